// The routing evaluation, small (the CI check of the routing evaluation): ~300 requests of the
// mixed trace through the router over real sockets on 127.0.0.1 in front of 4 sim replicas, for the
// kvcascade policy. Bounds are generous (a loaded 2-core machine moves decisions that depend on
// timing); they catch a policy that stops following cached prefixes or piles work on one replica.
#include "bench/routing_bench.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

#include "bench/routing_plot.h"
#include "prefix_index/block_hash.h"
#include "tests/testing/temp_dir.h"

namespace kvc::bench {
namespace {

// Two prompts twice: a (3 full blocks), b (2), a, b.
std::vector<TraceRequest> abab() {
  TraceRequest a;
  a.prompt = std::string(48, 'a');
  TraceRequest b;
  b.prompt = std::string(32, 'b');
  return {a, b, a, b};
}

TEST(RoutingBench, OracleCountsEveryRepeatedFullBlock) {
  TraceRequest a;
  a.prompt = std::string(40, 'a');  // 2 full blocks
  TraceRequest b = a;
  b.prompt += std::string(20, 'b');  // the same 2 blocks, then 1 more full block
  TraceRequest c;
  c.prompt = std::string(40, 'c');
  EXPECT_EQ(oracle_cached_tokens({a, b, c, b}), 32 + 48);
}

// The fleet's KV as one LRU cache: with room for every block it is the oracle; with less, what
// was pushed out is computed again, and a prompt's first blocks outlive its last.
TEST(RoutingBench, FleetLruServesWhatItsCapacityKeeps) {
  const std::vector<TraceRequest> trace = abab();
  EXPECT_EQ(fleet_lru_cached_per_request(trace, 100), oracle_cached_per_request(trace));
  EXPECT_EQ(fleet_lru_cached_per_request(trace, 5), (std::vector<int64_t>{0, 0, 48, 32}));
  // Room for 4: b's 2 blocks push out a's last one (its first two stay), a's return pushes out
  // b's last one.
  EXPECT_EQ(fleet_lru_cached_per_request(trace, 4), (std::vector<int64_t>{0, 0, 32, 16}));
  EXPECT_EQ(fleet_lru_cached_per_request(trace, 0), (std::vector<int64_t>{0, 0, 0, 0}));
}

// The most any eviction over the fleet's memory serves (Belady's MIN on one pooled cache): the
// oracle with room for everything, nothing without room, at least what LRU serves where every
// prompt fits, and on small traces exactly the best of every eviction choice (searched
// exhaustively).
TEST(RoutingBench, FleetMinIsTheBestEvictionOfTheFleetsMemory) {
  const std::vector<TraceRequest> trace = abab();
  EXPECT_EQ(fleet_min_cached_tokens(trace, 100), oracle_cached_tokens(trace));
  EXPECT_EQ(fleet_min_cached_tokens(trace, 0), 0);
  // Room for 4: b's second block pushes out b's first (used again the latest), so a returns
  // whole (3 blocks) and b finds its second: 4 blocks, where LRU serves 3 (2 of a, 1 of b).
  EXPECT_EQ(fleet_min_cached_tokens(trace, 4), 4 * 16);
  const auto lru = fleet_lru_cached_per_request(trace, 4);
  EXPECT_EQ(std::accumulate(lru.begin(), lru.end(), int64_t{0}), 3 * 16);

  // Random traces of 1-3 blocks a prompt over two block texts (a binary tree of prefixes).
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<TraceRequest> small(5);
    std::vector<uint64_t> accesses;
    for (TraceRequest& r : small) {
      const int blocks = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < blocks; ++i)
        r.prompt += std::string(kRoutingBlock, rng() % 2 ? 'x' : 'y');
      for (const BlockHash& h : hash_blocks(chain_seed("oracle"), prompt_bytes(r), kRoutingBlock))
        accesses.push_back(h.value);
    }
    const int64_t capacity = 1 + static_cast<int64_t>(rng() % 3);
    // The best over every choice of what a miss evicts (demand paging, one block an access).
    std::function<int64_t(size_t, std::vector<uint64_t>)> best = [&](size_t i,
                                                                     std::vector<uint64_t> held) {
      if (i == accesses.size()) return int64_t{0};
      if (std::find(held.begin(), held.end(), accesses[i]) != held.end()) {
        return 1 + best(i + 1, held);
      }
      if (static_cast<int64_t>(held.size()) < capacity) {
        held.push_back(accesses[i]);
        return best(i + 1, held);
      }
      int64_t most = 0;
      for (size_t evict = 0; evict < held.size(); ++evict) {
        std::vector<uint64_t> next = held;
        next[evict] = accesses[i];
        most = std::max(most, best(i + 1, next));
      }
      return most;
    };
    const int64_t min = fleet_min_cached_tokens(small, capacity);
    EXPECT_EQ(min, best(0, {}) * static_cast<int64_t>(kRoutingBlock)) << "round " << round;
    // LRU holds a prompt's blocks past its capacity for a moment: a schedule of the fleet's
    // kind (every block of a prompt held at once, within capacity) only where a prompt fits.
    if (capacity >= 3) {
      const auto l = fleet_lru_cached_per_request(small, capacity);
      EXPECT_LE(std::accumulate(l.begin(), l.end(), int64_t{0}), min) << "round " << round;
    }
    EXPECT_LE(min, oracle_cached_tokens(small)) << "round " << round;
  }
}

// The TTFT floor: a prompt seen before (the oracle holds it) costs one short step; a new long one
// a step per chunk of the step budget, and more the longer it is.
TEST(RoutingBench, TtftFloorFollowsWhatTheOracleHolds) {
  const SimPreset preset = *sim_preset("h200-llama3-8b");
  TraceRequest a;
  a.prompt = std::string(3000, 'a');
  TraceRequest b;
  b.prompt = std::string(6000, 'b');
  const std::vector<double> ms = ttft_floor_ms({a, a, b}, preset, 2048);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_GT(ms[0], 0);
  EXPECT_LT(ms[1], ms[0] / 3);  // cached but for the last token: one small step
  EXPECT_GT(ms[2], ms[0]);      // 3 chunks against 2
  EXPECT_EQ(oracle_cached_per_request({a, a, b}),
            (std::vector<int64_t>{0, 2992, 0}));  // full 16-token blocks
}

// The plot: one bar pair per (mix, policy), every policy in the legend, the values written on it;
// a document without results, or a result missing a field, is a clear error.
TEST(RoutingPlot, DrawsEveryMixAndPolicyAndRefusesIncompleteResults) {
  nlohmann::json doc = {{"results", nlohmann::json::array()}};
  for (const char* mix : {"chat", "rl"}) {
    for (const char* policy : {"kvcascade", "round_robin"}) {
      RoutingResult r;
      r.mix = mix;
      r.policy = policy;
      r.requests = 3;
      r.replica_work = {10, 20, 30};
      r.ttft_ms = {12.0, 18.5, 730.0};
      r.cached_tokens = 90;
      r.oracle_cached_tokens = 100;
      doc["results"].push_back(r.to_json());
    }
  }
  Result<std::string> svg = routing_plot_svg(doc);
  ASSERT_TRUE(svg.ok()) << svg.error().message;
  EXPECT_EQ(svg->rfind("<svg", 0), 0u);
  EXPECT_NE(svg->find("</svg>"), std::string::npos);
  for (const char* s : {"kvcascade", "round_robin", "chat: TTFT", "rl: max/mean", "1.50", "90.0%"})
    EXPECT_NE(svg->find(s), std::string::npos) << s;
  size_t rects = 0;
  for (size_t at = svg->find("<rect"); at != std::string::npos; at = svg->find("<rect", at + 1))
    ++rects;
  EXPECT_EQ(rects, 1u + 2u + 4u * 3u);  // background, legend, per result: TTFT, p90 mark, work
  EXPECT_FALSE(routing_plot_svg(nlohmann::json::object()).ok());
  doc["results"][1].erase("ttft_ms");
  Result<std::string> bad = routing_plot_svg(doc);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("lacks a field"), std::string::npos);
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
  // What each replica's engine reports: tokens run through the model (at least each request's
  // uncached prompt and completion, less one row per sample: its first token comes from the
  // prompt's last prefill row) and preemptions.
  ASSERT_EQ(r->replica_computed_tokens.size(), 4u);
  ASSERT_EQ(r->replica_preemptions.size(), 4u);
  const int64_t computed = std::accumulate(r->replica_computed_tokens.begin(),
                                           r->replica_computed_tokens.end(), int64_t{0});
  const int64_t work = std::accumulate(r->replica_work.begin(), r->replica_work.end(), int64_t{0});
  int64_t samples = 0;
  for (const TraceRequest& t : trace)
    samples += t.n;
  EXPECT_GE(computed, work - samples) << computed << " against " << work;
  EXPECT_GT(computed, 0);
}

// `--decisions` writes a line per request: where it went and why, what it found, and when it was
// sent and answered (an analysis of which replica's memory held what and when reads them), and
// the policy's view of every replica at the decision.
TEST(RoutingBench, DecisionsFileHasALinePerRequestWithItsTimes) {
  TraceMix mix = *trace_mix("chat");
  mix.requests = 40;
  mix.rate_per_s = 40;
  const std::vector<TraceRequest> trace = generate_trace(mix);
  const testing::TempDir dir;  // removed on every return
  RoutingBenchOptions o;
  o.replicas = 2;
  o.progress = false;
  o.request_timeout_s = 30;
  o.decisions = dir.path();
  Result<RoutingResult> r = run_routing(trace, "chat", "kvcascade", o);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_EQ(r->errors, 0);
  std::ifstream in(dir.file("chat-kvcascade-routers1.tsv"));
  ASSERT_TRUE(in) << "no decisions file";
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line,
            "request\tarrival_s\trouter\tgroup\tn\tprompt_bytes\treplica\treason\tmatched\tcached"
            "\toracle\tttft_ms\tsent_s\te2e_ms\tdetail");
  size_t lines = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, '\t');)
      f.push_back(x);
    if (f.size() == 14) f.emplace_back();  // an empty detail: a pinned sibling
    ASSERT_EQ(f.size(), 15u) << line;
    EXPECT_EQ(f[0], std::to_string(lines)) << line;
    EXPECT_FALSE(f[6].empty()) << line;  // the replica
    // The policy's view of every replica (RouteDecision::detail), the chosen one among them; a
    // sibling pinned to its group's replica was not the policy's choice.
    if (f[7] == "sibling_pinned") {
      EXPECT_TRUE(f[14].empty()) << line;
    } else {
      EXPECT_NE(f[14].find("; " + f[6] + " m="), std::string::npos) << line;
    }
    const double arrival = std::stod(f[1]), ttft = std::stod(f[11]);
    const double sent = std::stod(f[12]), e2e = std::stod(f[13]);
    EXPECT_GE(sent, arrival - 1e-3) << line;  // never before its arrival in the trace
    EXPECT_GT(ttft, 0) << line;
    EXPECT_GE(e2e, ttft) << line;
    ++lines;
  }
  EXPECT_EQ(lines, trace.size());
}

}  // namespace
}  // namespace kvc::bench
