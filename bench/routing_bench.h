// `kvcascade bench routing`: a trace replayed open-loop (arrival times honoured)
// through a router per policy in front of R sim replicas (replica/backend/sim/sim_backend.h: the
// real engine and prefix cache, each step sleeping the time an H200 would take). Per policy: prompt
// tokens served from cache against an oracle (one infinite cache over the same trace), max/mean and
// p99/mean of per-replica work (uncached prefill + decode tokens), TTFT p50/p90/p99, end-to-end
// latency, goodput (requests within a TTFT SLO) and errors. Each policy starts from cold replicas.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/trace.h"
#include "replica/backend/sim/sim_backend.h"
#include "replica/core/block_pool.h"
#include "router/fleet/fleet_indexes.h"

namespace kvc::bench {

struct RoutingBenchOptions {
  std::vector<std::string> mixes = {"mixed"};  // synthetic mixes (bench/trace.h), unless `trace`
  std::string trace;                           // a recorded trace (JSON lines) instead
  int32_t requests = 1000;                     // per synthetic mix
  // Mean arrival rates: each mix is replayed at each (named "chat@200/s"); empty: the mix's own.
  std::vector<double> rates;
  uint64_t seed = 1;
  std::vector<std::string> policies = {"kvcascade", "sglang_cache_aware", "consistent_hash",
                                       "least_load", "round_robin"};
  int32_t replicas = 16;
  // Routers in front of the same replicas (as several router pods behind a Service): request i
  // of the trace goes to router i % N. Each starts cold and knows nothing of the others. Several
  // counts: each (mix, policy) is replayed with each.
  std::vector<int32_t> routers = {1};
  int32_t router_poll_ms = 500;  // each router's poll of every replica (PoolConfig::poll_interval)
  // How long a prompt sent to a replica counts as held there before its KV events say so
  // (RouterStackConfig::routed_ttl, the router's --routed-ttl-ms).
  int64_t routed_ttl_ms = FleetIndexes::kRoutedTtl.count();
  // The replicas: "sim" (sim_presets' device models) or "cpu" (real ones: the tiny model on the
  // CPU backend, in this process, as `kvcascade demo` runs them; no TTFT floor, no busy share).
  std::string backend = "sim";
  // Sim replicas' device models, given to replica i in turn (i mod their count): several make a
  // mixed fleet. The TTFT floor is the first's.
  std::vector<std::string> sim_presets = {"h200-llama3-8b"};
  int32_t kv_blocks = 0;  // per replica; 0: what the preset's memory holds (cpu: 4,096)
  // The replicas' EngineConfig::cold_reuse_rate (0: their prefix caches evict LRU alone).
  double kv_cold_reuse_rate = BlockPool::kColdReuseRate;
  // Sim replicas' host tier (--kv-host-memory-gb), GB each; the fleet references' capacity
  // ("fleet LRU", "fleet MIN") counts it.
  double kv_host_memory_gb = 0;
  // The replicas' --stream-interval (ReplicaServerConfig::stream_interval): tokens per
  // streamed chunk after a choice's first. The client's TTFT is the first chunk's either way.
  // 16: with a chunk per token the replay's own CPU (replicas, routers and client in one
  // process) saturated a 2-core machine during RL bursts, and TTFT measured that machine
  // (bench/results/routing-profiles.md, ninth session).
  int32_t stream_interval = 16;
  double ttft_slo_ms = 500;
  double request_timeout_s = 120;
  std::string out;     // JSON results (empty: none)
  std::string plot;    // SVG of the results (bench/routing_plot.h; empty: none)
  std::string replot;  // a saved --out JSON: only draw its --plot, run nothing
  // Each synthetic trace written as JSON lines to DIR/<mix>[@<rate>]-seed<seed>.jsonl (a
  // recorded trace for --trace); with save_only nothing is replayed.
  std::string save_traces;
  bool save_only = false;
  bool progress = true;  // a line per second while replaying
  // Each replay's decisions, a line per request (router, replica, reason, the prompt bytes the
  // router saw there, cached tokens, TTFT, when it was sent and how long it took, and the
  // policy's view of every replica: RouteDecision::detail), as DIR/<mix>-<policy>-routers<N>.tsv
  // (empty: none).
  std::string decisions;
};

// What one policy did on one trace.
struct RoutingResult {
  std::string mix, policy;
  int32_t routers = 1;
  int64_t requests = 0, errors = 0;
  int64_t prompt_tokens = 0, cached_tokens = 0, oracle_cached_tokens = 0;
  // What the fleet's KV blocks, pooled as one LRU cache, would serve
  // (fleet_lru_cached_per_request): where the trace's prefixes outgrow the fleet's memory, a
  // reference for what that memory allows (not a bound: an eviction better than LRU could serve
  // more).
  int64_t fleet_kv_tokens = 0, fleet_lru_cached_tokens = 0;
  int64_t fleet_host_kv_tokens = 0;  // the host tiers' (--kv-host-memory-gb), besides the pools'
  // The most that memory could serve (fleet_min_cached_tokens): an upper bound on any routing
  // and eviction over the fleet's KV, in arrival order.
  int64_t fleet_min_cached_tokens = 0;
  // Prefill computed on more than one replica: for each full prompt block, the replicas that
  // computed it (it was not in their cache) beyond the first, in tokens. A policy that spreads a
  // hot prefix does this on purpose; routers that disagree on a prefix do it by accident (the
  // excess over a one-router run of the same trace).
  int64_t cross_replica_prefill_tokens = 0;
  // Declared groups (`group` with `group_size`) whose members landed on more than one replica:
  // each part waits for members that never come (the replica's affinity wait), then runs alone.
  int64_t groups = 0, split_groups = 0;
  std::vector<int64_t> replica_work;             // uncached prompt + completion tokens, per replica
  std::vector<double> ttft_ms, e2e_ms;           // of the requests that succeeded
  std::map<std::string, int64_t> error_reasons;  // status and message, truncated
  double ttft_slo_ms = 0;
  double seconds = 0;
  // Mean share of the replay each sim replica's device was busy (its simulated step time over
  // the replay's wall time): how loaded the fleet was; and each replica's (a mixed fleet's
  // balance: replicas of different speeds balance in time, not in tokens).
  double busy = 0;
  std::vector<double> replica_busy;
  // Per replica, what its engine reports (GET /v1/load): tokens run through the model (prefill,
  // recompute after a preemption, decode rows: the routers' routed-work signal counts these,
  // where replica_work counts each request's uncached prompt once) and preemptions.
  std::vector<int64_t> replica_computed_tokens, replica_preemptions;

  double hit_ratio() const;               // cached / oracle cached
  double hit_ratio_vs_fleet_lru() const;  // cached / fleet LRU cached
  double fleet_min_ratio() const;         // fleet MIN cached / oracle cached: the reachable hits
  double cross_replica_share() const;     // cross_replica_prefill_tokens / oracle cached
  double max_over_mean_work() const;
  double p99_over_mean_work() const;
  double goodput() const;  // share of all requests with TTFT <= the SLO
  nlohmann::json to_json() const;
};

// The prompts' blocks: what the oracle and the sim replicas (byte tokens) count in.
inline constexpr size_t kRoutingBlock = 16;
// A trace request's prompt bytes as the sim replicas see them (a chat rendered canonically).
std::string prompt_bytes(const TraceRequest& r);

// The oracle: prompt tokens one infinite cache (full 16-token blocks, byte tokens) would serve
// over the trace in arrival order.
int64_t oracle_cached_tokens(const std::vector<TraceRequest>& trace);
// ...and per request, in trace order.
std::vector<int64_t> oracle_cached_per_request(const std::vector<TraceRequest>& trace);

// Prompt tokens per request (trace order) that one LRU cache of `capacity_blocks` full 16-token
// blocks would serve: each prompt's leading blocks found in it, then all its blocks touched, its
// first the most recent (a prefix's parents outlive their children, as the engine's own eviction
// does), the least recent evicted past the capacity. Requests in flight pin nothing here (which
// favours it), but it is not an upper bound (an eviction better than LRU could serve more); with
// room for every block it is the oracle.
std::vector<int64_t> fleet_lru_cached_per_request(const std::vector<TraceRequest>& trace,
                                                  int64_t capacity_blocks);

// Prompt tokens that no routing and no eviction over `capacity_blocks` full 16-token blocks of KV
// in all, however the blocks are spread over replicas, can exceed on this trace served in arrival
// order: Belady's MIN (the resident block used again the latest is evicted) on one pooled cache,
// every prompt block an access, each hit counted whether or not the blocks before it hit. Why it
// bounds a fleet: the blocks cached anywhere in the fleet are at most its capacity; a request's
// cached tokens are blocks cached on the replica it went to, which are among them; and a prompt's
// blocks are all cached once it was prefilled. So the union of the replicas' caches is one paging
// schedule of that capacity over these accesses, and MIN serves at least as many accesses as any
// schedule (Belady 1966; Mattson et al. 1970). Where the trace's blocks fit, it is the oracle.
// (Blocks reused only through earlier prompts: a reply the trace's later prompts repeat could hit
// a block the replica generated, which this does not count.)
int64_t fleet_min_cached_tokens(const std::vector<TraceRequest>& trace, int64_t capacity_blocks);

// The TTFT floor of each request (ms): its prompt beyond what the oracle holds prefilled on an
// idle replica (no queue, no step in progress) in chunks of max_tokens_per_step, each chunk one
// step of the sim's bandwidth model. No policy's TTFT goes below it.
std::vector<double> ttft_floor_ms(const std::vector<TraceRequest>& trace, const SimPreset& preset,
                                  int32_t max_tokens_per_step);

// Replays `trace` through `routers` routers with `policy` in front of fresh sim replicas.
Result<RoutingResult> run_routing(const std::vector<TraceRequest>& trace, const std::string& mix,
                                  const std::string& policy, const RoutingBenchOptions& options,
                                  int32_t routers = 1);

// Every (mix, policy): prints progress and a table, writes JSON. Returns the exit code.
int run_routing_bench(const RoutingBenchOptions& options);

}  // namespace kvc::bench
