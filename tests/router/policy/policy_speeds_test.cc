// The kvcascade policy on replicas of different speeds (KvCascadePolicyConfig::
// costs_by_step_model): each replica's slowness from its step model's figure, costs and work in
// its own time, the work bound by kind of device, and steps per request; on one kind of device
// none of it changes a decision.
#include <limits>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "router/policy/policy.h"
#include "tests/router/policy/policy_test_util.h"

namespace kvc {
namespace {

using testing::random_decision;
using testing::request;
using testing::three;

// The detail shows each candidate's slowness: its seconds per token of work over the fleet's
// geometric mean (here 2e-4: the two fast replicas 0.5, the slow one 4).
TEST(KvCascadePolicy, ExplainShowsEachCandidatesSlowness) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[0].seconds_per_token = cs[1].seconds_per_token = 1e-4;
  cs[2].seconds_per_token = 8e-4;
  RouteRequest r = request(4100);
  r.explain = true;
  const std::string d = p->choose(r, cs).detail;
  EXPECT_NE(d.find("replica-0 m=0 w="), std::string::npos) << d;
  for (const auto& [id, s] :
       {std::pair{"replica-0", " s=0.50 "}, std::pair{"replica-1", " s=0.50 "},
        std::pair{"replica-2", " s=4.00 "}}) {
    const size_t at = d.find(std::string(id) + " ");
    ASSERT_NE(at, std::string::npos) << d;
    EXPECT_NE(d.substr(at, d.find(';', at) - at).find(s), std::string::npos) << id << ": " << d;
  }
}

// A figure the replica's fit cannot vouch for (Candidate::uncertain_seconds_per_token) may make
// it look faster than the fleet's mean, never slower: a replica that decoded alone read 3-6x too
// slow, and the H200s of a mixed fleet, counted as the mean, 2x too slow.
TEST(KvCascadePolicy, AnUncertainFigureMayMakeAReplicaFasterNeverSlower) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  cs[0].seconds_per_token = cs[1].seconds_per_token = 1e-4;
  RouteRequest r = request(4100);
  r.explain = true;
  auto slowness_of = [&](const std::string& id) {
    const std::string d = p->choose(r, cs).detail;
    const size_t at = d.find(id + " ");
    const size_t s = d.find(" s=", at);
    return at == std::string::npos || s == std::string::npos ? std::string() : d.substr(s + 3, 4);
  };
  cs[2].uncertain_seconds_per_token = 8e-4;  // 8x slower, uncertain: as the mean
  EXPECT_EQ(slowness_of("replica-2"), "1.00");
  cs[2].uncertain_seconds_per_token = 0.2e-4;  // 5x faster, uncertain: taken
  EXPECT_EQ(slowness_of("replica-2"), "0.20");
  EXPECT_EQ(slowness_of("replica-0"), "1.00");
  cs[2].seconds_per_token = 8e-4;  // a figure it vouches for wins: the mean is 2e-4
  EXPECT_EQ(slowness_of("replica-2"), "4.00");
}

// Replicas of different speeds (their step models: Candidate::seconds_per_token) cost their own
// time. The holder of 1,600 of 1,700 tokens, with 1,000 queued, wins in tokens (1,116 against
// 1,716); five times as slow as the others it loses (x 2.92 against x 0.58 of the fleet's
// geometric mean). Speeds within 25% of the mean count as one (fits of one device differ by
// noise): the holder keeps it. A replica without a model counts as 1. kvcascade_tokens ignores
// the speeds.
TEST(KvCascadePolicy, ReplicasOfDifferentSpeedsCostTheirOwnTime) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  RouteRequest r = request(1700);
  r.block_size = 16;
  cs[1].matched_blocks = 100;
  cs[1].queued_prefill_tokens = 1000;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);  // no models: tokens
  cs[0].seconds_per_token = cs[2].seconds_per_token = 1e-4;
  cs[1].seconds_per_token = 5e-4;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
  cs[1].seconds_per_token = 1.2e-4;  // within the tolerance: as fast
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  cs[1].seconds_per_token.reset();  // no model yet: as the mean
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  cs[1].seconds_per_token = 5e-4;
  EXPECT_EQ(make_policy("kvcascade_tokens")->choose(r, cs).replica, 1u);
  // Two replicas of one kind whose fits differ by 14% either way (1.33x apart) count as one: the
  // holder (1,516 against 1,716 in tokens) keeps the request, which it would lose at its own
  // figure (x 1.15 against x 0.87).
  std::vector<Candidate> two(cs.begin(), cs.begin() + 2);
  two[1].queued_prefill_tokens = 1400;
  two[0].seconds_per_token = 0.86e-4;
  two[1].seconds_per_token = 1.14e-4;
  EXPECT_EQ(p->choose(r, two).replica, 1u);
  KvCascadePolicyConfig exact;
  exact.speed_tolerance = 0;
  EXPECT_EQ(make_kvcascade_policy(exact)->choose(r, two).replica, 0u);
  // A figure no step model gives (0, a denormal, infinity) is as no model.
  for (double bad : {0.0, 1e-300, std::numeric_limits<double>::infinity()}) {
    two[0].seconds_per_token = bad;
    EXPECT_EQ(p->choose(r, two).replica, 1u) << bad;
  }
}

// The bounded load gives each replica its share of the fleet's speed: a holder four times as
// fast as the two others keeps its prefix at 120 running sequences (its cap: 1.25 x 141 x 4/6
// + 33 = 150.5), where a fleet of equals would move it (cap 1.25 x 141 / 3 + 33 = 91.75). Its
// recent work counts in its own time too: four times the others' tokens is its share.
TEST(KvCascadePolicy, AFasterReplicaTakesItsShareOfSequencesAndWork) {
  auto p = make_policy("kvcascade");
  auto cs = three();
  RouteRequest r = request(512);
  r.block_size = 16;
  r.max_tokens = 64;
  cs[1].matched_blocks = 30;
  cs[1].running_sequences = 120;
  cs[0].running_sequences = cs[2].running_sequences = 10;
  EXPECT_NE(p->choose(r, cs).replica, 1u);  // equals: over its share
  cs[0].seconds_per_token = cs[2].seconds_per_token = 4e-4;
  cs[1].seconds_per_token = 1e-4;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  // Work as the replicas report it: the holder took four times the others' tokens lately.
  cs[0].routed_work = cs[2].routed_work = 20000.0;
  cs[1].routed_work = 80000.0;
  r.fleet_request_work = 600;
  EXPECT_EQ(p->choose(r, cs).replica, 1u);
  cs[1].seconds_per_token = 4e-4;  // as slow as the others: far over the bound
  cs[1].running_sequences = 10;
  EXPECT_NE(p->choose(r, cs).replica, 1u);
}

// On a fleet of two kinds of device the work bound is each kind's own
// (KvCascadePolicyConfig::kind_factor): two replicas five times as fast as the two others, that
// lately took ten times the slow ones' tokens (twice their share of speed), are over the fleet's
// bound and within their own kind's, so the costs decide between kinds and a fast one takes the
// request. Counted as one kind, the bound sends it to a slow one. On one kind, noisy figures
// within the factor included, the bound is the fleet's as before: the last check.
TEST(KvCascadePolicy, EachKindOfDeviceIsBoundedAmongItsOwn) {
  auto p = make_policy("kvcascade");
  KvCascadePolicyConfig one_kind;
  one_kind.kind_factor = 1e9;
  auto fleetwide = make_kvcascade_policy(one_kind);
  std::vector<Candidate> cs = three();
  cs.resize(4);
  cs[3].replica = 3;
  cs[3].id = "replica-3";
  RouteRequest r = request(4100);
  r.max_tokens = 64;
  r.fleet_request_work = 600;
  for (Candidate& c : cs)
    c.matched_blocks = 2;  // the first 32 bytes: a system prompt every replica holds
  cs[0].seconds_per_token = cs[1].seconds_per_token = 1e-4;
  cs[2].seconds_per_token = cs[3].seconds_per_token = 5e-4;
  cs[0].routed_work = cs[1].routed_work = 100000.0;
  cs[2].routed_work = cs[3].routed_work = 10000.0;
  EXPECT_LT(p->choose(r, cs).replica, 2u);
  EXPECT_GE(fleetwide->choose(r, cs).replica, 2u);
  // One kind whose figures differ by up to 1.9x: both bound it by the fleet's mean.
  cs[2].seconds_per_token = cs[3].seconds_per_token = 1.9e-4;
  EXPECT_EQ(p->choose(r, cs).replica, fleetwide->choose(r, cs).replica);
  EXPECT_GE(p->choose(r, cs).replica, 2u);
  // A kind of one replica (its own mean would never bound it) is bounded by the fleet's: the
  // fast one, with a hundred times the slow ones' tokens, is over it.
  cs.resize(3);
  cs[0].routed_work = 1e6;
  cs[2].seconds_per_token = 5e-4;
  EXPECT_GE(p->choose(r, cs).replica, 1u);
  KvCascadePolicyConfig alone_unbounded;
  alone_unbounded.work_bound_factor = 0;
  EXPECT_EQ(make_kvcascade_policy(alone_unbounded)->choose(r, cs).replica, 0u);
}

// Each request costs weight_steps reference steps of the replica's own time
// (KvCascadePolicyConfig::weight_steps): the holder of 1,600 of 1,700 tokens, four times as slow
// as the other replica, wins in tokens at its own time (2 x 116 against 0.5 x 1,716) and loses
// with its steps counted (2 x 1,204 against 0.5 x 2,804: four reference steps each, the slow
// replica's four times as long).
TEST(KvCascadePolicy, ASlowerReplicasStepsCountPerRequest) {
  KvCascadePolicyConfig no_steps;
  no_steps.weight_steps = 0;
  auto p = make_policy("kvcascade");
  auto tokens_only = make_kvcascade_policy(no_steps);
  std::vector<Candidate> cs = three();
  cs.resize(2);
  RouteRequest r = request(1700);
  r.block_size = 16;
  cs[1].matched_blocks = 100;
  cs[0].seconds_per_token = 1e-4;
  cs[1].seconds_per_token = 4e-4;
  EXPECT_EQ(tokens_only->choose(r, cs).replica, 1u);
  EXPECT_EQ(p->choose(r, cs).replica, 0u);
}

// On one kind of device (figures within speed_tolerance of the fleet's mean, or none) neither
// the steps per request nor the bound by kind changes a decision: a policy without either
// chooses alike over random fleets, requests and records. With fits that stray up to 1.9x
// apart (beyond the tolerance: each replica pays its own figure's steps) the bound by kind is
// still the fleet's.
TEST(KvCascadePolicy, OnOneKindOfDeviceStepsAndKindsChangeNoDecision) {
  KvCascadePolicyConfig before;
  before.weight_steps = 0;
  before.kind_factor = 1e9;
  auto now = make_policy("kvcascade");
  auto old = make_kvcascade_policy(before);
  std::mt19937 rng(11);
  std::set<std::string> reasons;
  for (int i = 0; i < 400; ++i) {
    auto [cs, r] = random_decision(rng);
    // Within 10% of 1e-4 either way (within the tolerance of any mean of them), or none.
    for (Candidate& c : cs) {
      if (rng() % 4) c.seconds_per_token = 1e-4 * (0.9 + 0.2 * (rng() % 1000) / 1000.0);
    }
    const RouteDecision a = now->choose(r, cs);
    const RouteDecision b = old->choose(r, cs);
    ASSERT_EQ(a.replica, b.replica) << i;
    ASSERT_EQ(a.reason, b.reason) << i;
    reasons.insert(a.reason);
    now->record(r, cs[a.replica]);
    old->record(r, cs[b.replica]);
  }
  EXPECT_GE(reasons.size(), 3u);

  KvCascadePolicyConfig one_kind;
  one_kind.kind_factor = 1e9;
  auto by_kind = make_policy("kvcascade");
  auto fleetwide = make_kvcascade_policy(one_kind);
  int strayed = 0;
  for (int i = 0; i < 400; ++i) {
    auto [cs, r] = random_decision(rng);
    for (Candidate& c : cs) {
      c.seconds_per_token = 1e-4 * (0.6 + 0.54 * (rng() % 1000) / 1000.0);  // 0.6-1.14: < 1.9x
    }
    const RouteDecision a = by_kind->choose(r, cs);
    const RouteDecision b = fleetwide->choose(r, cs);
    ASSERT_EQ(a.replica, b.replica) << i;
    ASSERT_EQ(a.reason, b.reason) << i;
    r.explain = true;
    const std::string d = by_kind->choose(r, cs).detail;
    if (d.find(" s=1.00 ") == std::string::npos || d.find(" s=0.") != std::string::npos) ++strayed;
    by_kind->record(r, cs[a.replica]);
    fleetwide->record(r, cs[b.replica]);
  }
  EXPECT_GT(strayed, 100);  // figures beyond the tolerance in many decisions
}

}  // namespace
}  // namespace kvc
