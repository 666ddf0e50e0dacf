// The kvcascade policy across several routers and a changing fleet: cold prompts and near-equal
// costs broken by rendezvous so that routers agree, groups placed alike by routers with
// different histories, short matches one router has not seen yet, hot prefixes spreading, and
// replicas that are unhealthy or come back. Split from policy_test.cc.
#include "router/policy/policy.h"

#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/router/policy/policy_test_util.h"

namespace kvc {
namespace {

using testing::request;
using testing::three;

TEST(KvCascadePolicy, ColdPromptsSpreadByRendezvousAndRoutersAgree) {
  auto a = make_policy("kvcascade");
  auto b = make_policy("kvcascade");
  auto cs = three();
  std::map<uint32_t, int> hits;
  for (int k = 0; k < 3000; ++k) {
    const RouteRequest r = request(100, "prefix-" + std::to_string(k));
    const RouteDecision da = a->choose(r, cs), db = b->choose(r, cs);
    ASSERT_EQ(da.replica, db.replica);
    EXPECT_EQ(da.reason, "cold_rendezvous");
    ++hits[da.replica];
  }
  for (auto [replica, n] : hits)
    EXPECT_NEAR(n, 1000, 150) << replica;
}

// Several routers agree without talking (seen before: two routers sent a group's members, or a
// prompt whose only match is a first block every replica holds, to different replicas). Each
// router has its own history (what it routed, its requests in flight, its sends not yet in a
// report); what they share is the replicas' reports and the index.
std::vector<Candidate> sixteen_reporting(std::mt19937& rng) {
  std::vector<Candidate> cs(16);
  std::uniform_int_distribution<int> load(0, 40);
  for (uint32_t i = 0; i < cs.size(); ++i) {
    cs[i].replica = i;
    cs[i].id = "sim" + std::to_string(i);
    cs[i].matched_blocks = 1;  // a first block every replica holds
    cs[i].running_sequences = load(rng);
    cs[i].routed_work = 20000.0 + 200.0 * load(rng);
  }
  return cs;
}

TEST(KvCascadePolicy, RoutersWithDifferentHistoriesPlaceAGroupAlike) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    auto a = make_policy("kvcascade"), b = make_policy("kvcascade");
    const std::vector<Candidate> shared = sixteen_reporting(rng);
    // Different pasts: each sent other requests to other replicas.
    std::vector<Candidate> va = shared, vb = shared;
    for (int k = 0; k < 40; ++k) {
      RouteRequest other = request(600, "other-" + std::to_string(k));
      other.max_tokens = 64;
      const uint32_t to = static_cast<uint32_t>(rng() % 16);
      const double w = (k % 2 ? a : b)->record(other, shared[to]);
      auto& view = k % 2 ? va : vb;
      *view[to].routed_work += w;  // in its routed work until the next report...
      view[to].unacked_work += w;  // ...as its own sends
      ++view[to].unacked_sequences;
      ++view[to].in_flight_requests;
    }
    RouteRequest first = request(585, "system-prompt");
    first.max_tokens = 64;
    first.group = "rl-" + std::to_string(trial);
    first.group_size = 16;
    std::vector<BlockHash> blocks = {BlockHash{1}, BlockHash{1000u + trial}};
    first.blocks = blocks;
    const RouteDecision da = a->choose(first, va), db = b->choose(first, vb);
    ASSERT_EQ(da.replica, db.replica)
        << "trial " << trial << ": " << da.reason << " / " << db.reason;
  }
}

// Two routers, each with its own view of three replicas, choose for `prompts` prompts (`make(k,
// views)` fills both views, the request and its blocks): they must agree every time. Returns
// how many prompts each replica got.
struct TwoViews {
  std::vector<Candidate> a = three(), b = three();
  RouteRequest r;
  std::vector<BlockHash> blocks;
};
template <class Make>
std::map<uint32_t, int> expect_routers_agree(int prompts, Make make) {
  auto a = make_policy("kvcascade"), b = make_policy("kvcascade");
  std::map<uint32_t, int> on;
  for (int k = 0; k < prompts; ++k) {
    TwoViews v;
    make(k, v);
    v.r.blocks = v.blocks;
    const RouteDecision da = a->choose(v.r, v.a), db = b->choose(v.r, v.b);
    EXPECT_EQ(da.replica, db.replica) << k;
    ++on[da.replica];
  }
  return on;
}

// A prompt whose only match is a first block cached on every replica: costs within tie_tokens
// of each other are ties, broken by the rendezvous order of one of the prompt's blocks (its
// last: the match is short, see below), so two routers whose views of load differ a little
// agree, and different prompts still spread.
TEST(KvCascadePolicy, NearEqualCostsAreBrokenByRendezvousSoRoutersAgree) {
  std::mt19937 rng(5);
  const auto on = expect_routers_agree(400, [&](int k, TwoViews& v) {
    for (uint32_t i = 0; i < 3; ++i) {
      v.a[i].matched_blocks = v.b[i].matched_blocks = 1;
      v.a[i].queued_prefill_tokens = static_cast<int64_t>(rng() % 400);
      v.b[i].queued_prefill_tokens = static_cast<int64_t>(rng() % 400);
    }
    v.r = request(600, "system-prompt");
    v.blocks = {BlockHash{1}, BlockHash{7000u + k}};
  });
  for (auto [replica, n] : on)
    EXPECT_NEAR(n, 133, 50) << replica;
  // A real difference in load still counts.
  auto p = make_policy("kvcascade");
  auto cs = three();
  for (Candidate& c : cs)
    c.matched_blocks = 1;
  RouteRequest r = request(600, "system-prompt");
  std::vector<BlockHash> blocks = {BlockHash{1}, BlockHash{42}};
  r.blocks = blocks;
  const uint32_t first = p->choose(r, cs).replica;
  cs[first].queued_prefill_tokens = 20000;
  EXPECT_NE(p->choose(r, cs).replica, first);
}

// How far a short match reaches (a tenant's first blocks, stored a moment ago: in one router's
// index and not yet in another's) does not change where near-equal costs send the prompt: below
// min_match_bytes the rendezvous key is the prompt's last block, not the first block past the
// match. Before, router a (two blocks matched) keyed by the third block and router b (one) by
// the second, and placed the same prompt differently about two times in three.
TEST(KvCascadePolicy, AShortMatchOneRouterHasNotSeenYetDoesNotSplitThePlacement) {
  const auto on = expect_routers_agree(300, [](int k, TwoViews& v) {
    for (uint32_t i = 0; i < 3; ++i) {
      v.a[i].matched_blocks = 2;  // 128 bytes: the tenant's first two blocks
      v.b[i].matched_blocks = 1;  // the second one's event has not reached router b yet
    }
    v.r = request(600, "tenant");
    v.r.block_size = 64;
    for (uint64_t i = 0; i < 9; ++i)
      v.blocks.push_back(BlockHash{i < 2 ? i + 1 : 1000u * k + i});
  });
  for (auto [replica, n] : on)
    EXPECT_NEAR(n, 100, 40) << replica;
}

TEST(KvCascadePolicy, HotPrefixSpreadsWhenItsHolderIsOverloaded) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[0].matched_blocks = 32;
  cs[0].running_sequences = 100;  // far above a fair share
  const RouteDecision d = p->choose(request(512), cs);
  EXPECT_NE(d.replica, 0u);
  EXPECT_EQ(d.reason, "hot_spread");
}

TEST(KvCascadePolicy, UnhealthyReplicasAreNeverChosen) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[1].matched_blocks = 30;
  cs[1].healthy = false;
  for (int k = 0; k < 100; ++k) {
    EXPECT_NE(p->choose(request(512, std::to_string(k)), cs).replica, 1u);
  }
}

// A replica that comes back (a restart, a stall that ends) takes its share of new work, not all of
// it: while it was away the others were sent its share, so by the recent-work count it looked idle
// and every request went to it (seen: all 10-20 closed-loop clients moved onto it for seconds).
// Also a replica that joins the pool mid-traffic.
TEST(KvCascadePolicy, AReturningReplicaTakesItsShareNotEveryRequest) {
  for (const bool joins : {false, true}) {
    SCOPED_TRACE(joins ? "a new replica" : "a returning replica");
    auto p = make_policy("kvcascade");
    std::vector<Candidate> cs(4);
    for (uint32_t i = 0; i < 4; ++i) {
      cs[i].replica = i;
      cs[i].id = "replica-" + std::to_string(i);
      cs[i].running_sequences = 8;
    }
    int k = 0;
    auto route = [&](std::span<const Candidate> now) {
      RouteRequest r = request(600, "prompt-" + std::to_string(k++));
      r.max_tokens = 200;
      const RouteDecision d = p->choose(r, now);
      p->record(r, now[d.replica]);
      return d.replica;
    };
    std::vector<Candidate> three_of_four(cs.begin(), cs.begin() + 3);
    for (int i = 0; i < 300; ++i)
      route(joins ? std::span<const Candidate>(three_of_four) : std::span<const Candidate>(cs));
    if (!joins) {
      cs[3].healthy = false;
      for (int i = 0; i < 300; ++i)
        EXPECT_NE(route(cs), 3u);
      cs[3].healthy = true;
    }
    cs[3].running_sequences = 0;  // back empty (a restart), or new
    int to_it = 0;
    for (int i = 0; i < 40; ++i) {
      const uint32_t chosen = route(cs);
      ++cs[chosen].in_flight_requests;  // as the router counts what it sent
      to_it += chosen == 3;
    }
    // Its fair share is 10 of 40, plus what its empty queue earns: far from all 40.
    EXPECT_GE(to_it, 5);
    EXPECT_LE(to_it, 24);
  }
}

}  // namespace
}  // namespace kvc
