// Routing policies: given a request's prefix-match results and each replica's load, choose a
// replica and say why. Pure functions of their inputs (plus the policy's own small state), so
// they are tested without sockets and several routers given the same inputs agree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prefix_index/block_hash.h"

namespace kvc {

// One replica as the router sees it when a request arrives.
struct Candidate {
  uint32_t replica = 0;  // index in the router's pool (also the RadixIndex ReplicaId)
  std::string id;        // its --replica-id, for stable hashing across routers
  bool healthy = true;
  size_t matched_blocks = 0;  // leading blocks of the request the replica holds
  // Load: the replica's last /v1/load report plus what this router sent since.
  int64_t queued_prefill_tokens = 0;
  int64_t running_sequences = 0;
  int64_t waiting_sequences = 0;
  int64_t in_flight_requests = 0;  // sent by this router, not yet answered
  double kv_usage = 0;             // share of its KV cache in use (engines that report it), 0..1
  size_t index_blocks = 0;         // blocks the router's index holds for it (SGLang's tree size)
  // The work it took on lately, in tokens, as every router sees it (ReplicaView::routed_work:
  // its own load report plus this router's sends since). nullopt: not reported; policies that
  // balance work count what they routed there themselves.
  std::optional<double> routed_work;
  double unacked_work = 0;        // this router's part of routed_work
  int64_t unacked_sequences = 0;  // sent by this router since that report (n per request)
  // The share of wall time it spent in steps lately, as every router reads it from its reports
  // (ReplicaView::busy); nullopt: not reported.
  std::optional<double> busy;
  // The part of it beyond each step's fixed cost (ReplicaView::load_busy): how loaded it is, what
  // the policy reads (KvCascadePolicyConfig::busy_cap); nullopt: unknown.
  std::optional<double> load_busy;
  // Its seconds per token of work, from the step model it fitted to its own steps, at one
  // reference step for every replica (api/step_model.h seconds_per_work_token); nullopt: no
  // model yet, or an engine that publishes none.
  std::optional<double> seconds_per_token;
  // Without seconds_per_token, the figure of a fit that cannot tell what the reference step
  // costs (StepModel::reference_error over the limit): it may make the replica look faster than
  // the fleet's mean, never slower (one that decoded alone read 3-6x too slow; the H200s of a
  // mixed fleet, counted as the mean, looked 2x too slow).
  std::optional<double> uncertain_seconds_per_token;
};

struct RouteRequest {
  std::span<const BlockHash> blocks;  // the prompt's chained block hashes
  int64_t prompt_bytes = 0;           // the prompt's size (the byte tokenizer's tokens)
  int32_t block_size = 16;
  int32_t n = 1;  // samples: decode load counts n times
  // Per sample: the completion work it may ask for (a chat request without max_tokens: the
  // replicas' planned open completion, router/fleet/replica_pool.h planned_open_completion).
  int64_t max_tokens = 0;
  int32_t group_size = 0;            // requests declared for `group` (0: not declared)
  std::optional<std::string> group;  // user-supplied sibling group id
  // The prompt's first RouterConfig::affinity_key_blocks blocks: the key of rendezvous and
  // consistent hashing (cold prompts, the consistent_hash policy).
  std::string affinity_key;
  // The mean work of a request over the fleet, as every router sees it
  // (ReplicaPool::fleet_request_work); nullopt: the policy's own mean of what it routed.
  std::optional<double> fleet_request_work;
  // Fill RouteDecision::detail (the router's debug headers, `bench routing --decisions`).
  bool explain = false;
};

struct RouteDecision {
  uint32_t replica = 0;
  std::string reason;  // "prefix_match", "least_load", "sibling_pinned", "cold_rendezvous", ...
  // With RouteRequest::explain, what the policy saw of each healthy candidate, for diagnosis (the
  // kvcascade policy only; a pinned sibling or a routing key is not the policy's choice and has
  // none)
  // (kvcascade: "mean_request=W work_total=T none_allowed=0|1; ID m=M w=W b=B ok=0|1 kept=0|1
  // cost=C; ..."), else empty. One line, no fixed format.
  std::string detail = {};
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string name() const = 0;
  // Precondition: at least one candidate is healthy. Returns a healthy candidate's replica.
  virtual RouteDecision choose(const RouteRequest& request,
                               std::span<const Candidate> candidates) = 0;
  // Whether the router keeps siblings (the same `group`, or identical prompts close together:
  // router/policy/sibling_tracker.h) on the replica this policy chose for the first of them.
  virtual bool pins_siblings() const { return false; }
  // Every request the router sends, however it chose the replica (pinned siblings, routing
  // keys): policies that balance the work they route count it here. Returns the work counted
  // for it on `chosen`, in tokens (the router adds it to the replica's routed work until a load
  // report includes it: ReplicaPool::note_routed_work).
  virtual double record(const RouteRequest& request, const Candidate& chosen) { return 0; }
  // A request recorded on `from` was sent to `to` instead (its try there failed before any
  // answer): what record() counted for it moves with it. Returns the work moved to `to`.
  virtual double retried(const RouteRequest& request, const Candidate& from, const Candidate& to) {
    return 0;
  }
};

// Work tokens (prefill tokens and decode rows) of the reference step that replicas' speeds are
// compared at (api/step_model.h: 256 prefill tokens beside 16 decode rows; router/proxy.cc checks
// that the two agree): KvCascadePolicyConfig::weight_steps counts in such steps.
inline constexpr double kReferenceStepWorkTokens = 272;

struct KvCascadePolicyConfig {
  double weight_uncached_prefill = 1.0;  // a: per prompt token the replica must compute
  // With busy_cap > 0, a is divided by 1 - load (capped at busy_cap) where the replica reports
  // how loaded it is (Candidate::load_busy: the busy time beyond each step's fixed cost): work
  // added to a loaded device delays what queues behind it as well (at 75%, about three times its
  // own time), while a holder's queue (b) is only waited for; so under load a request waits for
  // its prefix's holder rather than compute the prefix again. A GPU stepping all the time on
  // small batches is busy but hardly loaded (the sim H200 at 52-68% busy: 9-24% beyond its
  // steps' fixed cost), a CPU replica's busy time nearly all load. 5,000-request sim runs:
  // the CPU profile's rl mix 92.6% -> 95.4% of the oracle and TTFT p90 halved, the A10G's and
  // H200's rows within their noise (bench/results/routing-profiles.md, "Load").
  double busy_cap = 0.8;
  double weight_queued_prefill = 1.0;  // b: per token already queued there
  double weight_decode = 16.0;         // c: per running/waiting sequence (n counts n times)
  // d: reference steps (kReferenceStepWorkTokens work tokens) per request. A request's first token
  // waits for the step in progress and then for a step of its own beyond its prefill, and a
  // session's later requests follow its prefix to where it went: a slow replica costs each of them
  // its slower steps, which the tokens above do not count (an idle A10G's step is 5.5x an H200's).
  // In the replica's own time like the rest; where every figure is within speed_tolerance (one kind
  // of device, fits that agree) the same for every candidate, so the costs' order and ties are as
  // without it (up to rounding where costs are fractional); a replica of one kind whose fit strays
  // beyond the tolerance pays its figure's steps, as it pays its figure's tokens. 8 H200 + 8 A10G
  // sim replicas, chat@110 (2-core VM, the bound by kind below, the sims' figures after their first
  // 42 steps): TTFT p90 42.1 ms at 1 step, 40.5-46.6 at 1.5, 32.6-33.2 at 3.7, 32.9 at 4 (SGLang's
  // rule 59.7 in the same run), where without it 50.6; with figures from the start
  // (Backend::predicted_steps) 24.6-25.5 at 4, as 8 H200s alone (bench/results/routing-profiles.md,
  // twenty-eighth session).
  double weight_steps = 4.0;
  // A prefix is hot when more than this share of its cost-equal replicas would be overloaded:
  // bounded-load rendezvous spreads it over up to `hot_spread` replicas.
  int32_t hot_spread = 2;
  double bounded_load_factor = 1.25;  // a replica may take up to 1.25x the mean load...
  int32_t bounded_load_slack = 32;    // ...plus this many sequences
  // Bounded work: besides sequences, each replica's recently routed work (its uncached prompt
  // tokens + n x RouteRequest::max_tokens per request, decayed by work_decay per routed request; a
  // declared group counted whole at its first member) may exceed the mean by work_bound_factor,
  // plus work_slack_requests mean requests, plus work_lead_factor x the prefill it saves (the
  // prompt tokens it holds beyond any other replica: moving redoes them and delays the request by
  // them). A prefix whose holder is over the bound moves to the cheapest replica under it (its
  // prefix then replicates to as many replicas as its load needs). 0: off.
  // 1.05 since the twenty-third session (1.1 before): Mooncake's trace (977 long requests, ~61 a
  // replica) ended at 1.13-1.24x the mean work on the H200 profile at 1.1 and 1.09-1.18 at 1.05;
  // the ten target-table cells re-run were met (CPU chat seed 2 after re-runs: its spread, not the
  // factor); the twentieth session's four-router loss at 1.05 is gone since replicas announce
  // their work (bench/results/routing-profiles.md).
  double work_bound_factor = 1.05;
  // The bound's mean is of c's own kind: the replicas whose slowness (costs_by_step_model) is
  // within this factor (at least 1) of c's; a kind of one replica is bounded by the fleet's mean.
  // On one kind of device (fits within 2x of each other even where noisy), the fleet's mean as
  // before. On a fleet of two kinds the bound keeps each kind
  // balanced within itself and leaves the costs to decide between kinds: bounded against the
  // fleet's mean, the H200s of 8 H200 + 8 A10G sim replicas had to leave the A10Gs their share of
  // speed (16-17% of the tokens), whose steps then set the fleet's TTFT p90 (56.7-64.0 ms, where 8
  // H200s alone served the same trace at 25.1).
  double kind_factor = 2.0;
  // 2 since the twenty-fourth session (4 before): with holders_keep_prefixes the bound is what
  // spreads a prefix, and four mean requests (6.5% of a replica's share of Mooncake's trace, more
  // of a young window) left the A10G and H200 Mooncake rows at 1.13-1.25x the mean work; at 2,
  // 1.12-1.18 with 98.2-98.7% of the oracle, and the ten target-table cells met (2-core VM, two
  // runs a row; bench/results/routing-profiles.md, twenty-fourth session).
  double work_slack_requests = 2.0;
  // 1.0 since the eleventh session (2.0 before): at 2.0 the holders of Mooncake's long shared
  // prefixes ended 1.25-1.53x the mean work on the H200 profile; at 1.0, 1.12-1.17 with the same
  // hits, and every cell of the routing target table (bench/routing_target_table.py) still met
  // (bench/results/routing-profiles.md, eleventh session).
  double work_lead_factor = 1.0;
  double work_decay = 0.999;
  // KV pressure (engines reporting their KV-cache usage, e.g. vLLM's kv_cache_usage_perc): past
  // kv_pressure_start, new work there waits for memory or preempts, so the replica is charged as
  // if its queue held up to kv_pressure_tokens more prefill tokens (linearly, at 100% usage).
  double kv_pressure_start = 0.9;
  double kv_pressure_tokens = 16384;
  // Candidates holding as much of the prompt as the cheapest one, whose cost is within this
  // many tokens of it, count as equal: the rendezvous order decides among them (several routers,
  // whose views of load differ a little, then agree). 0: the cheapest wins.
  double tie_tokens = 2048;
  // Among near-equal costs, a cheapest candidate's match shorter than this many prompt bytes
  // (the first block or two every prompt of a tenant shares) does not pick the rendezvous key
  // (the prompt's first block past the match): the prompt's last block does. How far such a
  // match reaches differs between routers (a block stored a moment ago is in one router's index
  // and not yet in another's), and keying by it placed one prompt differently at each
  // (bench/results/routing-routers.md, eighth session).
  double min_match_bytes = 256;
  // A replica holding the longest match keeps the request from every replica holding
  // holder_lead_bytes less of the prompt or more, while it is under the bounds and its KV cache
  // under kv_pressure_start: the costs then choose among the rest (the holders, replicas whose
  // match is nearly as long, and replicas faster than the holders: Candidate::seconds_per_token
  // beyond speed_tolerance). Under the bounds a holder has no more than its share of the fleet's
  // work, so a request moved off it to save its queue computes the prefix again for the fleet
  // to wait on: such moves were 4.8 of the 5.5 points the A10G Mooncake row lost (94.5%; with
  // the rule 97.4-98.7%; 2-core VM), and CPU chat@150's TTFT p90 was 141-182 ms with the rule
  // against 596-680 in the twenty-third session's runs without it (not interleaved; that
  // session's 1.1 runs had 305). A short lead (Mooncake's first block, which nearly every prompt
  // shares) still goes by the costs: kept from every replica lacking it, two replicas got 5-8
  // requests of 977 (bench/results/routing-profiles.md, twenty-fourth session). false: the costs
  // choose among every candidate under the bounds.
  bool holders_keep_prefixes = true;
  double holder_lead_bytes = 2048;
  // The first member of a declared group (group_size > 1) is placed on the replicas' own
  // reports (Candidate::routed_work less unacked_work, no requests in flight), so routers that
  // get members of one group at once place it alike.
  bool groups_by_shared_view = true;
  // Costs in each replica's own time (Candidate::seconds_per_token): its tokens (uncached prefill,
  // queue, decode load, recent work) count at its seconds per token over the geometric mean of
  // the healthy replicas' (its slowness, within 1/64..64), so a replica twice as slow takes half
  // the work and its queue weighs twice; its share of the decode load follows its speed too. A
  // replica within a factor 1 + speed_tolerance of the mean (fits of one device differ by noise,
  // and routers must agree), or without a model yet, counts as 1; the mean is of the figures
  // replicas vouch for, and a withheld one (Candidate::uncertain_seconds_per_token) counts only
  // where it is faster than that mean. One kind of device: token costs as before.
  bool costs_by_step_model = true;
  double speed_tolerance = 0.25;
};

struct SglangPolicyConfig {  // SGLang router's Rust defaults
  double cache_threshold = 0.5;
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.1;
};

// name: "kvcascade", "round_robin", "least_load", "consistent_hash", "sglang_cache_aware", or
// "kvcascade_tokens" (kvcascade with its costs in tokens whatever the replicas' speeds:
// costs_by_step_model off, for comparison).
std::unique_ptr<Policy> make_policy(const std::string& name);
std::unique_ptr<Policy> make_kvcascade_policy(KvCascadePolicyConfig config);
std::unique_ptr<Policy> make_sglang_policy(SglangPolicyConfig config);
std::vector<std::string> policy_names();

// Highest-random-weight hash of (key, replica id): the rendezvous score.
uint64_t rendezvous_score(uint64_t key, const std::string& replica_id);

// An explicit affinity key (a session, an RL rollout): the healthy candidate with the highest
// rendezvous score for it, whatever the policy, reason "routing_key". Every router agrees, and a
// key moves only when its replica leaves. Precondition: at least one candidate is healthy.
RouteDecision route_by_key(std::string_view key, std::span<const Candidate> candidates);

}  // namespace kvc
