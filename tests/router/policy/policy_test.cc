// The routing policies' choices on hand-made candidates: the kvcascade policy's costs, work
// bound, holders' rule and explained decisions, and the other policies. Replicas of different
// speeds (step models) are policy_speeds_test.cc; how several routers agree (and replicas
// leaving or coming back) is policy_agreement_test.cc.
#include "router/policy/policy.h"

#include <map>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "tests/router/policy/policy_test_util.h"

namespace kvc {
namespace {

using testing::random_decision;
using testing::request;
using testing::three;

TEST(KvCascadePolicy, LongestMatchWinsAtEqualLoad) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[1].matched_blocks = 30;
  cs[2].matched_blocks = 10;
  const RouteDecision d = p->choose(request(512), cs);
  EXPECT_EQ(d.replica, 1u);
  EXPECT_EQ(d.reason, "prefix_match");
}

// A holder whose KV cache is nearly full (as an engine's metrics report it) is charged for the
// wait: a long match there loses to a cold replica with room; at ordinary usage it wins.
TEST(KvCascadePolicy, KvPressureOutweighsAMatch) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[1].matched_blocks = 120;  // 1,920 of 2,048 tokens
  cs[1].kv_usage = 0.5;
  EXPECT_EQ(p->choose(request(2048), cs).replica, 1u);
  cs[1].kv_usage = 0.99;
  EXPECT_NE(p->choose(request(2048), cs).replica, 1u);
}

// Bounded work: a holder that was sent far more than its share recently loses its prefix to a
// replica under the bound, preferring one that holds part of it; a declared group is placed by the
// work of all its members.
TEST(KvCascadePolicy, BoundedWorkMovesAHotPrefixOffItsHolder) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[1].matched_blocks = 30;
  RouteRequest r = request(512);
  r.block_size = 16;
  r.max_tokens = 64;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  for (int i = 0; i < 40; ++i)
    p->record(r, cs[1]);  // the prefix's traffic all went to its holder
  p->record(r, cs[0]);
  p->record(r, cs[2]);
  const RouteDecision moved = p->choose(r, cs);
  EXPECT_NE(moved.replica, 1u);
  cs[2].matched_blocks = 20;  // replica 2 holds part of it: the cheapest under the bound
  EXPECT_EQ(p->choose(r, cs).replica, 2u);
  EXPECT_EQ(p->choose(r, cs).reason, "hot_spread");
  // Balanced again: the holder keeps it.
  for (int i = 0; i < 40; ++i) {
    p->record(r, cs[0]);
    p->record(r, cs[2]);
  }
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
}

// A burst of declared groups (RL: each prompt's samples sent as separate requests sharing a
// `group`) whose first members all arrive before the rest: each group's whole work counts when
// its first member is placed, so the next group sees it and the burst spreads evenly; the later
// members (pinned by the router to the first's replica) add nothing more.
TEST(KvCascadePolicy, DeclaredGroupsCountWholeAtTheirFirstMember) {
  // Little slack: three replicas and six groups, where a group is a large share of the work.
  KvCascadePolicyConfig config;
  config.work_slack_requests = 0.5;
  auto p = make_kvcascade_policy(config);
  auto cs = three();
  std::map<uint32_t, int> groups_on;
  for (int i = 0; i < 3; ++i) {  // some ordinary traffic first, evenly spread
    RouteRequest single = request(512, "single");
    single.max_tokens = 64;
    for (int j = 0; j < 5; ++j)
      p->record(single, cs[i]);
  }
  std::vector<std::string> ids;
  for (int g = 0; g < 6; ++g)
    ids.push_back("step-1-prompt-" + std::to_string(g));
  std::vector<uint32_t> placed;
  for (const std::string& id : ids) {
    RouteRequest first = request(512, id);
    first.max_tokens = 64;
    first.group = id;
    first.group_size = 16;
    const RouteDecision d = p->choose(first, cs);
    p->record(first, cs[d.replica]);
    placed.push_back(d.replica);
    ++groups_on[d.replica];
  }
  for (size_t g = 0; g < ids.size(); ++g) {  // the members follow their first
    RouteRequest member = request(512, ids[g]);
    member.max_tokens = 64;
    member.group = ids[g];
    member.group_size = 16;
    for (int m = 1; m < 16; ++m)
      p->record(member, cs[placed[g]]);
  }
  for (const auto& [replica, count] : groups_on)
    EXPECT_EQ(count, 2) << "replica " << replica;
  // The members added nothing: after the next burst the groups are still even (within one).
  for (int g = 0; g < 6; ++g) {
    RouteRequest first = request(512, "step-2-prompt-" + std::to_string(g));
    first.max_tokens = 64;
    first.group = "step-2-prompt-" + std::to_string(g);
    first.group_size = 16;
    const RouteDecision d = p->choose(first, cs);
    p->record(first, cs[d.replica]);
    ++groups_on[d.replica];
  }
  int lo = 1 << 30, hi = 0;
  for (uint32_t i = 0; i < 3; ++i) {
    lo = std::min(lo, groups_on[i]);
    hi = std::max(hi, groups_on[i]);
  }
  EXPECT_LE(hi - lo, 1) << groups_on[0] << " " << groups_on[1] << " " << groups_on[2];
}

// A declared group's work is its prompt once (its later members find it cached) plus every
// member's completion. Counted so, it fits under the bound of a replica with room when its
// prefix's holder was sent far more than its share; counted as members x (prompt + completion)
// it fitted nowhere, and the group fell back to the replica with the fewest sequences: here
// the overworked holder.
TEST(KvCascadePolicy, AGroupLeavesAnOverworkedHolderForAReplicaWithRoom) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  RouteRequest single = request(512, "single");
  single.block_size = 16;
  single.max_tokens = 64;
  for (int i = 0; i < 12; ++i)
    p->record(single, cs[1]);  // the holder got far more than its share
  for (int i = 0; i < 3; ++i) {
    p->record(single, cs[0]);
    p->record(single, cs[2]);
  }
  cs[1].matched_blocks = 30;  // it holds the group's prompt
  cs[0].running_sequences = 40;
  cs[1].running_sequences = 10;
  cs[2].running_sequences = 45;
  RouteRequest first = request(512, "group");
  first.block_size = 16;
  first.max_tokens = 64;
  first.group = "rl-step-1-prompt-0";
  first.group_size = 16;
  const RouteDecision d = p->choose(first, cs);
  EXPECT_NE(d.replica, 1u) << d.reason;
}

// A group id is forgotten once all its members were recorded: a client reusing ids (p0..p63 every
// RL step) has every new group counted. A group whose first member is retried elsewhere has its
// counted work follow it.
TEST(KvCascadePolicy, ReusedGroupIdsAreCountedAgainAndRetriesMoveTheWork) {
  KvCascadePolicyConfig config;
  config.work_slack_requests = 0.5;
  auto p = make_kvcascade_policy(config);
  auto cs = three();
  RouteRequest single = request(512, "single");
  single.max_tokens = 64;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      p->record(single, cs[i]);
  auto group = [] {
    RouteRequest g = request(512, "p0");
    g.max_tokens = 64;
    g.group = "p0";  // the same id every step
    g.group_size = 4;
    return g;
  };
  // Steps of one group of 4 (id reused): each step's group is counted, so they rotate.
  std::map<uint32_t, int> on;
  for (int step = 0; step < 6; ++step) {
    const RouteRequest g = group();
    const uint32_t d = p->choose(g, cs).replica;
    for (int m = 0; m < 4; ++m)
      p->record(g, cs[d]);
    ++on[d];
  }
  EXPECT_EQ(on.size(), 3u);
  // A retry: the first member recorded on 0, then sent to 1 (0 failed): the next group avoids 1
  // (it carries the work now), not 0.
  RouteRequest g = group();
  g.group = "retried";
  p->record(g, cs[0]);
  p->retried(g, cs[0], cs[1]);
  RouteRequest next = group();
  next.group = "next";
  EXPECT_NE(p->choose(next, cs).replica, 1u);
}

TEST(KvCascadePolicy, QueuedPrefillOutweighsASmallMatch) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[0].matched_blocks = 2;            // saves 32 tokens of prefill...
  cs[0].queued_prefill_tokens = 5000;  // ...behind 5000 queued ones
  const RouteDecision d = p->choose(request(512), cs);
  EXPECT_NE(d.replica, 0u);
}

// A loaded fleet (the replicas report how much of their time goes to work beyond each step's
// fixed cost: load_busy; busy_cap 0.8, the default): computing a prompt again is new work that
// delays what queues behind it, so it costs a / (1 - load) per token (a = 2 here) while the
// holder's queue costs its tokens once. Idle, the holder's 4,000 queued tokens outweigh
// recomputing 1,700 elsewhere (2 x 1,700); at 75% (8 x) the holder wins. Busy but hardly loaded
// (a GPU decoding small batches, load 10%): as idle. Capped at 80% (10 x): a queue of 20,000
// still loses. busy_cap 0: the load is not read. (The holder's lead, 1,600 bytes, is under
// holder_lead_bytes: the costs decide, as HoldersUnderTheBoundsKeepTheirPrefixes has it.)
TEST(KvCascadePolicy, ALoadedFleetWaitsForTheHolderRatherThanComputeAgain) {
  KvCascadePolicyConfig config;
  config.weight_uncached_prefill = 2;
  EXPECT_EQ(config.busy_cap, 0.8);
  auto p = make_kvcascade_policy(config);
  auto cs = three();
  RouteRequest r = request(1700);
  r.block_size = 16;
  cs[1].matched_blocks = 100;  // 1,600 of 1,700 tokens
  cs[1].queued_prefill_tokens = 4000;
  EXPECT_NE(p->choose(r, cs).replica, 1u);  // not reported: as idle
  for (Candidate& c : cs)
    c.busy = 0.9, c.load_busy = 0.1;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
  for (Candidate& c : cs)
    c.load_busy = 0.75;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  config.busy_cap = 0;
  EXPECT_NE(make_kvcascade_policy(config)->choose(r, cs).replica, 1u);  // 4,200 against 3,400
  cs[1].queued_prefill_tokens = 20000;
  for (Candidate& c : cs)
    c.load_busy = 0.99;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
}

// RouteRequest::explain: the decision is the same, and its detail shows each candidate's match,
// work and bound, whether the bounds allow it and whether a holder keeps the request from it.
TEST(KvCascadePolicy, ExplainShowsWhatTheDecisionSawOfEachCandidate) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  RouteRequest r = request(4100);
  r.fleet_request_work = 1000;  // a mean request: the work bound is on
  cs[1].matched_blocks = 250;   // the holder
  cs[0].matched_blocks = 99;    // 2,416 bytes less: kept from
  cs[2].routed_work = 1e6;      // far over the bound
  const RouteDecision quiet = p->choose(r, cs);
  EXPECT_TRUE(quiet.detail.empty());
  r.explain = true;
  const RouteDecision told = p->choose(r, cs);
  EXPECT_EQ(told.replica, quiet.replica);
  EXPECT_EQ(told.reason, quiet.reason);
  EXPECT_EQ(told.replica, 1u);
  const std::string& d = told.detail;
  EXPECT_NE(d.find("mean_request=1000 "), std::string::npos) << d;
  EXPECT_NE(d.find("none_allowed=0"), std::string::npos) << d;
  EXPECT_NE(d.find("replica-0 m=99 "), std::string::npos) << d;
  EXPECT_NE(d.find("replica-1 m=250 "), std::string::npos) << d;
  auto fields = [&](const std::string& id) {
    const size_t at = d.find(id + " ");
    return at == std::string::npos ? std::string() : d.substr(at, d.find(';', at) - at);
  };
  EXPECT_NE(fields("replica-0").find("ok=1 kept=1"), std::string::npos) << d;
  EXPECT_NE(fields("replica-1").find("ok=1 kept=0"), std::string::npos) << d;
  EXPECT_NE(fields("replica-1").find(" s=1.00 "), std::string::npos) << d;    // no step models
  EXPECT_NE(fields("replica-2").find("w=1004101 "), std::string::npos) << d;  // 1e6 + its 4,101
  EXPECT_NE(fields("replica-2").find("ok=0"), std::string::npos) << d;
}

// Explaining changes no decision: two policies replaying the same random requests and fleets
// (cold prompts, holders over and under the bounds, none under them), one explaining, choose
// alike, and every explained decision names each candidate.
TEST(KvCascadePolicy, ExplainingChangesNoDecision) {
  auto plain = make_policy("kvcascade");
  auto told = make_policy("kvcascade");
  std::mt19937 rng(5);
  std::set<std::string> reasons;
  for (int i = 0; i < 400; ++i) {
    auto [cs, r] = random_decision(rng);
    const RouteDecision a = plain->choose(r, cs);
    r.explain = true;
    const RouteDecision b = told->choose(r, cs);
    ASSERT_EQ(a.replica, b.replica) << i;
    ASSERT_EQ(a.reason, b.reason) << i;
    EXPECT_TRUE(a.detail.empty());
    for (const Candidate& c : cs)
      EXPECT_NE(b.detail.find("; " + c.id + " m="), std::string::npos) << b.detail;
    reasons.insert(a.reason);
    plain->record(r, cs[a.replica]);
    told->record(r, cs[b.replica]);
  }
  EXPECT_GE(reasons.size(), 3u);  // cold, prefix_match, hot_spread or least_cost
}

// KvCascadePolicyConfig::holders_keep_prefixes (the default): a holder under the bounds keeps a
// request from replicas holding holder_lead_bytes (2,048) less of its prompt or more, whatever
// its queue, where the costs alone would move it; among several holders, and against a replica
// whose match is nearly as long, the costs choose. It does not keep it from a faster replica,
// with its KV cache under pressure (a co-holder under no pressure still keeps it), or for a
// short lead (a first block every prompt shares: a replica lacking it is not shut out). Over the
// work bound the prefix moves as before.
TEST(KvCascadePolicy, HoldersUnderTheBoundsKeepTheirPrefixes) {
  KvCascadePolicyConfig off;
  off.holders_keep_prefixes = false;
  auto p = make_policy("kvcascade");
  auto costs = make_kvcascade_policy(off);
  auto cs = three();
  RouteRequest r = request(4100);
  cs[1].matched_blocks = 250;  // 4,000 of 4,100 tokens
  cs[1].queued_prefill_tokens = 10000;
  EXPECT_NE(costs->choose(r, cs).replica, 1u);  // 10,116 against 4,116
  const RouteDecision kept = p->choose(r, cs);
  EXPECT_EQ(kept.replica, 1u);
  EXPECT_EQ(kept.reason, "prefix_match");
  cs[1].queued_prefill_tokens = 200000;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  cs[1].queued_prefill_tokens = 10000;

  // Two holders of the whole match: the cheaper (the shorter queue) takes it; a replica holding
  // 2,416 tokens less does not, however short its queue; one holding 800 less competes.
  cs[2].matched_blocks = 250;
  cs[2].queued_prefill_tokens = 3000;
  cs[0].matched_blocks = 99;
  EXPECT_EQ(p->choose(r, cs).replica, 2u);
  cs[0].matched_blocks = 200;
  EXPECT_EQ(p->choose(r, cs).replica, 0u);  // 916 against 3,116
  cs[0].matched_blocks = 122;               // exactly 2,048 bytes less: kept from it
  EXPECT_EQ(p->choose(r, cs).replica, 2u);
  cs[0].matched_blocks = 123;  // 2,032 less: competes (2,148 against 3,116)
  EXPECT_EQ(p->choose(r, cs).replica, 0u);
  cs[0].matched_blocks = 0;

  // Its KV cache under pressure: the costs decide (the pressure and the queue move it), unless
  // a co-holder under no pressure keeps it.
  cs[1].kv_usage = cs[2].kv_usage = 0.99;
  EXPECT_EQ(p->choose(r, cs).replica, 0u);
  cs[2].kv_usage = 0.5;
  EXPECT_EQ(p->choose(r, cs).replica, 2u);
  cs[2].matched_blocks = 0;
  cs[2].queued_prefill_tokens = 0;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
  cs[1].kv_usage = 0.5;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);

  // A faster replica (step models five times apart) still competes on cost.
  cs[1].seconds_per_token = 5e-4;
  cs[0].seconds_per_token = cs[2].seconds_per_token = 1e-4;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
  for (Candidate& c : cs)
    c.seconds_per_token.reset();

  // Over the work bound (its recent work far over the others'), the holder loses the request
  // whatever its lead; another replica under the bound takes it.
  {
    auto fresh = make_policy("kvcascade");
    RouteRequest small = request(4100);
    small.max_tokens = 64;
    EXPECT_EQ(fresh->choose(small, cs).replica, 1u);
    for (int i = 0; i < 300; ++i)
      fresh->record(small, cs[1]);
    fresh->record(small, cs[0]);
    fresh->record(small, cs[2]);
    const RouteDecision moved = fresh->choose(small, cs);
    EXPECT_NE(moved.replica, 1u);
    EXPECT_EQ(moved.reason, "hot_spread");
  }

  // A lead of one 512-byte block (every other replica lacks only the shared first block): the
  // costs decide.
  r = request(1024);
  r.block_size = 512;
  cs[1].matched_blocks = 1;
  cs[1].queued_prefill_tokens = 10000;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
}

TEST(SglangPolicy, ImbalanceThenPrefixThenSmallestTree) {
  auto p = make_policy("sglang_cache_aware");
  auto cs = three();
  cs[0].matched_blocks = 20;  // 320 of 512 tokens: rate 0.625 > 0.5
  cs[2].index_blocks = 0;
  cs[0].index_blocks = cs[1].index_blocks = 100;
  EXPECT_EQ(p->choose(request(512), cs).reason, "prefix_match");
  EXPECT_EQ(p->choose(request(512), cs).replica, 0u);
  cs[0].matched_blocks = 10;  // rate 0.31: below the threshold
  const RouteDecision low = p->choose(request(512), cs);
  EXPECT_EQ(low.reason, "smallest_tree");
  EXPECT_EQ(low.replica, 2u);
  // Imbalanced: max - min > 32 and max > 1.1 x min.
  cs[0].matched_blocks = 32;
  cs[0].in_flight_requests = 40;
  cs[1].in_flight_requests = 3;
  cs[2].in_flight_requests = 5;
  const RouteDecision bal = p->choose(request(512), cs);
  EXPECT_EQ(bal.reason, "load_balance");
  EXPECT_EQ(bal.replica, 1u);
  cs[0].in_flight_requests = 30;  // difference 27: balanced enough
  EXPECT_EQ(p->choose(request(512), cs).replica, 0u);
}

TEST(SimplePolicies, RoundRobinLeastLoadConsistentHash) {
  auto cs = three();
  auto rr = make_policy("round_robin");
  EXPECT_EQ(rr->choose(request(1), cs).replica, 0u);
  EXPECT_EQ(rr->choose(request(1), cs).replica, 1u);
  cs[2].healthy = false;
  EXPECT_EQ(rr->choose(request(1), cs).replica, 0u);  // 2 skipped
  cs[2].healthy = true;

  auto ll = make_policy("least_load");
  cs[0].running_sequences = 5;
  cs[1].running_sequences = 1;
  cs[2].running_sequences = 3;
  EXPECT_EQ(ll->choose(request(1), cs).replica, 1u);

  // Removing a replica moves only the keys that lived on it.
  auto ch = make_policy("consistent_hash");
  std::map<std::string, uint32_t> before;
  for (int k = 0; k < 500; ++k) {
    const std::string key = "user-" + std::to_string(k);
    before[key] = ch->choose(request(1, key), cs).replica;
  }
  cs[1].healthy = false;
  for (const auto& [key, replica] : before) {
    const uint32_t now = ch->choose(request(1, key), cs).replica;
    if (replica != 1) {
      EXPECT_EQ(now, replica) << key;
    }
  }
  EXPECT_EQ(make_policy("nonsense"), nullptr);
}

// An explicit routing key pins by rendezvous: the same key, the same replica, whatever the load
// and the prefix matches; keys spread; a key moves only when its replica leaves.
TEST(RouteByKey, PinsByRendezvousAndMovesOnlyWhenItsReplicaLeaves) {
  auto cs = three();
  std::map<std::string, uint32_t> before;
  std::set<uint32_t> used;
  for (int k = 0; k < 300; ++k) {
    const std::string key = "rollout-" + std::to_string(k);
    const RouteDecision d = route_by_key(key, cs);
    EXPECT_EQ(d.reason, "routing_key");
    before[key] = d.replica;
    used.insert(d.replica);
  }
  EXPECT_EQ(used.size(), 3u);
  cs[0].running_sequences = 1000;  // load and matches do not move a key
  cs[1].matched_blocks = 50;
  for (const auto& [key, replica] : before)
    EXPECT_EQ(route_by_key(key, cs).replica, replica) << key;
  cs[2].healthy = false;
  for (const auto& [key, replica] : before) {
    const uint32_t now = route_by_key(key, cs).replica;
    EXPECT_NE(now, 2u);
    if (replica != 2) {
      EXPECT_EQ(now, replica) << key;
    }
  }
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Sibling pinning is the policy's own choice (the router asks it; it never compares names).
TEST(PolicyInterface, OnlyKvcascadePinsSiblings) {
  for (const std::string& name : policy_names())
    EXPECT_EQ(make_policy(name)->pins_siblings(), name.rfind("kvcascade", 0) == 0) << name;
}

}  // namespace
}  // namespace kvc
