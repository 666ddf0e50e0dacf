// The scheduler's ordering rules, one example each (replica/core/scheduler.h): the waiting queue
// is first-come-first-served (a small group does not pass a big one at the head), a group is
// admitted whole, preemption takes the most recently admitted group and never the oldest,
// preempted groups come back before any new group and in their original order, and a group that
// could never fit is refused at submission. The property test covers random workloads; these say
// what each rule means on a case small enough to read.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "replica/core/engine.h"
#include "replica/model/model_config.h"
#include "replica/tokenizer/tokenizer.h"
#include "tests/testing/fake_backend.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

GenerationRequest request(char c, int32_t prompt_len, int32_t n, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt.assign(static_cast<size_t>(prompt_len), c);
  r.n = n;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

ModelConfig fake_model() {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = 260;
  return c;
}

// An engine on the FakeBackend that records, step by step, which groups were admitted and
// preempted, and checks that no group ever runs partly.
class Harness {
 public:
  Harness(int32_t num_blocks, int32_t block_size, SchedulerConfig sc)
      : backend_(fake_model(), num_blocks, block_size),
        engine_(backend_, tokenizer_, EngineConfig{sc, {}}, clock_) {}

  uint64_t submit(GenerationRequest r) {
    Result<uint64_t> id = engine_.submit(std::move(r));
    EXPECT_TRUE(id.ok()) << id.error().message;
    return id.ok() ? *id : 0;
  }
  Result<uint64_t> try_submit(GenerationRequest r) { return engine_.submit(std::move(r)); }

  // One step; returns what it admitted.
  std::vector<uint64_t> step() {
    StepResult r = engine_.step();
    EXPECT_TRUE(r.error.empty()) << r.error;
    for (uint64_t id : r.stats.admitted)
      admissions_.push_back(id);
    for (uint64_t id : r.stats.preempted)
      preemptions_.push_back(id);
    for (const auto& g : r.finished)
      finished_.push_back(g->id);
    check_whole_groups();
    return r.stats.admitted;
  }
  void run_to_end(int max_steps = 2000) {
    for (int i = 0; i < max_steps && engine_.has_work(); ++i)
      step();
    EXPECT_FALSE(engine_.has_work());
  }
  bool running(uint64_t id) const {
    for (const auto& g : engine_.scheduler().running())
      if (g->id == id) return true;
    return false;
  }

  const std::vector<uint64_t>& admissions() const { return admissions_; }
  const std::vector<uint64_t>& preemptions() const { return preemptions_; }
  const std::vector<uint64_t>& finished() const { return finished_; }
  Engine& engine() { return engine_; }

 private:
  // Every unfinished sibling of a running group holds blocks; a waiting group holds none.
  void check_whole_groups() {
    for (const auto& g : engine_.scheduler().waiting()) {
      for (const Sequence& s : g->seqs) {
        EXPECT_TRUE(s.block_table.empty()) << "waiting group " << g->id << " holds blocks";
      }
    }
    for (const auto& g : engine_.scheduler().running()) {
      for (const Sequence& s : g->seqs) {
        if (s.finish == FinishReason::kNone) {
          EXPECT_FALSE(s.block_table.empty()) << "running group " << g->id << " is split";
        }
      }
    }
  }

  testing::FakeBackend backend_;
  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
  Engine engine_;
  std::vector<uint64_t> admissions_, preemptions_, finished_;
};

int index_of(const std::vector<uint64_t>& v, uint64_t id) {
  auto it = std::find(v.begin(), v.end(), id);
  return it == v.end() ? -1 : static_cast<int>(it - v.begin());
}

TEST(SchedulerOrder, ASmallGroupDoesNotPassABigOneWaitingAtTheHead) {
  SchedulerConfig sc;
  sc.max_num_seqs = 5;
  Harness h(256, 16, sc);
  const uint64_t a = h.submit(request('a', 20, 3, 30));
  const uint64_t b = h.submit(request('b', 20, 3, 5));  // 3 + 3 > 5: waits for a
  const uint64_t c = h.submit(request('c', 20, 1, 5));  // 3 + 1 <= 5, but b is ahead of it
  EXPECT_EQ(h.step(), std::vector<uint64_t>{a});
  for (int i = 0; i < 10; ++i) {
    h.step();
    EXPECT_FALSE(h.running(b));
    EXPECT_FALSE(h.running(c)) << "c passed b, which waits at the head of the queue";
  }
  h.run_to_end();
  EXPECT_EQ(h.admissions(), (std::vector<uint64_t>{a, b, c}));
  EXPECT_TRUE(h.preemptions().empty());
}

TEST(SchedulerOrder, AGroupIsAdmittedWholeOrNotAtAll) {
  SchedulerConfig sc;
  sc.max_num_seqs = 4;
  Harness h(256, 16, sc);
  const uint64_t a = h.submit(request('a', 20, 3, 8));
  const uint64_t b = h.submit(request('b', 20, 2, 8));  // one seat is free; b needs two
  h.step();
  EXPECT_TRUE(h.running(a));
  EXPECT_FALSE(h.running(b));
  while (h.running(a) && h.engine().has_work()) {
    h.step();
    if (h.running(a)) {
      EXPECT_FALSE(h.running(b));
    }
  }
  h.run_to_end();
  EXPECT_EQ(h.admissions(), (std::vector<uint64_t>{a, b}));
  EXPECT_EQ(index_of(h.finished(), a), 0);
}

// Admission without growth projection lets the pool run out, so groups are preempted: always
// the most recently admitted one, never the oldest running group; the preempted groups come back
// before a group that arrived after them, in their original order, and every group finishes.
TEST(SchedulerOrder, PreemptionTakesTheYoungestAndItComesBackFirst) {
  SchedulerConfig sc;
  sc.max_num_seqs = 8;
  sc.project_growth = false;  // admit on what fits now: growth then forces preemptions
  Harness h(14, 4, sc);
  const uint64_t a = h.submit(request('a', 8, 1, 30));  // 10 blocks at its end, of 14
  const uint64_t b = h.submit(request('b', 8, 1, 30));
  const uint64_t c = h.submit(request('c', 8, 1, 30));
  h.step();
  EXPECT_TRUE(h.running(a) && h.running(b) && h.running(c));

  // Run until the first preemption: it takes c, the youngest.
  for (int i = 0; i < 100 && h.preemptions().empty(); ++i)
    h.step();
  ASSERT_FALSE(h.preemptions().empty()) << "the pool should have run out";
  EXPECT_EQ(h.preemptions().front(), c);

  // A group that arrives now waits behind the preempted ones.
  const uint64_t d = h.submit(request('d', 8, 1, 4));
  h.run_to_end();
  EXPECT_EQ(index_of(h.preemptions(), a), -1) << "the oldest running group was preempted";
  const int d_at = index_of(h.admissions(), d);
  ASSERT_GE(d_at, 0);
  // Re-admissions of b and c (their second admission) all come before d's, b's before c's.
  std::map<uint64_t, std::vector<int>> at;
  for (size_t i = 0; i < h.admissions().size(); ++i)
    at[h.admissions()[i]].push_back(static_cast<int>(i));
  for (uint64_t id : {b, c}) {
    const auto n = std::count(h.preemptions().begin(), h.preemptions().end(), id);
    ASSERT_EQ(at[id].size(), static_cast<size_t>(1 + n)) << "group " << id;
  }
  ASSERT_GE(at[c].size(), 2u);
  EXPECT_LT(at[c][1], d_at) << "d, newer, was admitted before preempted c came back";
  if (at[b].size() >= 2) {
    EXPECT_LT(at[b][1], at[c][1]) << "b and c came back out of order";
  }
  EXPECT_EQ(h.finished().size(), 4u);
}

TEST(SchedulerOrder, AGroupThatCouldNeverFitIsRefusedAtSubmission) {
  SchedulerConfig sc;
  sc.max_num_seqs = 4;
  sc.max_model_len = 100;
  Harness h(8, 4, sc);  // 32 token slots in all

  Result<uint64_t> too_many = h.try_submit(request('x', 4, 5, 2));  // 5 siblings > 4 seats
  ASSERT_FALSE(too_many.ok());
  EXPECT_FALSE(too_many.error().message.empty());

  Result<uint64_t> too_long = h.try_submit(request('x', 60, 1, 50));  // 110 > max_model_len
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.error().message.find("100"), std::string::npos) << too_long.error().message;

  Result<uint64_t> too_big = h.try_submit(request('x', 16, 2, 16));  // 4 + 2 * 4 > 8 blocks
  ASSERT_FALSE(too_big.ok());
  EXPECT_FALSE(too_big.error().message.empty());

  // What does fit still runs, and nothing was queued by the refusals.
  EXPECT_FALSE(h.engine().has_work());
  h.submit(request('y', 8, 2, 4));
  h.run_to_end();
  EXPECT_EQ(h.finished().size(), 1u);
}

}  // namespace
}  // namespace kvc
