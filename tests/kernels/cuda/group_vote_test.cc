// kernels/cuda/group_vote.h on the CPU: rounds of votes among threads (agreement, one dissent,
// many rounds in a row with the result of each seen by every rank), and abort() releasing the
// ranks that wait for one that never votes.
#include "kernels/cuda/group_vote.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace kvc::kernels::cuda {
namespace {

// Runs `rounds` rounds over `size` threads; rank r votes value(r, round). Returns what each
// rank learned, [rank][round].
template <class Value>
std::vector<std::vector<int>> run_rounds(int size, int rounds, Value value) {
  GroupVote vote(size);
  std::vector<std::vector<int>> got(size, std::vector<int>(rounds, -1));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      for (int k = 0; k < rounds; ++k)
        got[r][k] = vote.agree(value(r, k)) ? 1 : 0;
    });
  }
  for (auto& t : threads)
    t.join();
  return got;
}

TEST(GroupVote, EveryRankLearnsWhetherAllAgreedRoundByRound) {
  for (int size : {1, 2, 4, 8}) {
    constexpr int kRounds = 300;
    // Round k: all vote k, except that in every third round the last rank votes k + 1.
    const auto got = run_rounds(size, kRounds, [&](int r, int k) {
      return int64_t{k} + (k % 3 == 2 && r == size - 1 && size > 1 ? 1 : 0);
    });
    for (int r = 0; r < size; ++r) {
      for (int k = 0; k < kRounds; ++k) {
        EXPECT_EQ(got[r][k], k % 3 == 2 && size > 1 ? 0 : 1)
            << "size " << size << " rank " << r << " round " << k;
      }
    }
  }
}

TEST(GroupVote, AbortReleasesTheRanksWaitingForOneThatNeverVotes) {
  GroupVote vote(3);
  std::atomic<int> released{0};
  std::vector<std::thread> waiting;
  for (int r = 0; r < 2; ++r) {
    waiting.emplace_back([&] {
      EXPECT_FALSE(vote.agree(7));
      ++released;
    });
  }
  // The third rank failed before its vote: it aborts the group instead.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(released.load(), 0);
  vote.abort();
  for (auto& t : waiting)
    t.join();
  EXPECT_EQ(released.load(), 2);
  EXPECT_FALSE(vote.agree(7));  // and every later vote fails at once
}

}  // namespace
}  // namespace kvc::kernels::cuda
