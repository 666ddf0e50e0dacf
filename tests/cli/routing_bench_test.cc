// The routing evaluation, small (issue 17's CI check): ~300 requests of the mixed trace through
// the router over real sockets on 127.0.0.1 in front of 4 sim replicas, for the kvcascade policy.
// Bounds are generous (a loaded 2-core machine moves decisions that depend on timing); they catch
// a policy that stops following cached prefixes or piles work on one replica.
#include "cli/routing_bench.h"

#include <gtest/gtest.h>

namespace kvc::cli {
namespace {

TEST(RoutingBench, OracleCountsEveryRepeatedFullBlock) {
  TraceRequest a;
  a.prompt = std::string(40, 'a');  // 2 full blocks
  TraceRequest b = a;
  b.prompt += std::string(20, 'b');  // the same 2 blocks, then 1 more full block
  TraceRequest c;
  c.prompt = std::string(40, 'c');
  EXPECT_EQ(oracle_cached_tokens({a, b, c, b}), 32 + 48);
}

TEST(RoutingBench, KvcascadeOnFourSimReplicasKeepsHitsAndBalance) {
  TraceMix mix = *trace_mix("mixed");
  mix.requests = 300;
  mix.rate_per_s = 30;
  const std::vector<TraceRequest> trace = generate_trace(mix);
  RoutingBenchOptions o;
  o.replicas = 4;
  o.progress = false;
  o.request_timeout_s = 30;
  Result<RoutingResult> r = run_routing(trace, "mixed", "kvcascade", o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->errors, 0);
  EXPECT_EQ(r->requests, 300);
  EXPECT_GT(r->oracle_cached_tokens, 0);
  EXPECT_GE(r->hit_ratio(), 0.70) << r->to_json().dump();
  EXPECT_LE(r->hit_ratio(), 1.0);
  EXPECT_LE(r->max_over_mean_work(), 1.7) << r->to_json().dump();
  EXPECT_EQ(r->replica_work.size(), 4u);
  EXPECT_EQ(r->ttft_ms.size(), 300u);
}

}  // namespace
}  // namespace kvc::cli
