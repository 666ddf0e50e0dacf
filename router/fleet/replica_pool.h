// The router's view of its replicas: address, kind (kvcascade, vLLM, SGLang, any OpenAI-compatible
// server; detected at start and on reconnect, or forced), identity (models, hash model, block
// size), health (periodic polls, router/fleet/replica_probe.h, and a circuit breaker fed by proxy
// outcomes), load (the replica's own report, else what this router sent it), and the KV events
// of each kvcascade replica applied to the shared RadixIndex (exact mode). Every other replica,
// and a kvcascade replica whose /v1/kv_events cannot be subscribed, is routed in approximate
// mode: the router inserts what it sends there and lets entries expire, within a per-replica
// capacity derived from the KV capacity its metrics state. A replica that leaves routing (a failed
// poll, an open breaker) leaves the index too, and a replica found dead has its proxied exchanges
// ended.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "api/chat_template.h"
#include "api/token_table.h"
#include "base/clock.h"
#include "http/client.h"
#include "prefix_index/radix_index.h"
#include "router/fleet/engine_signals.h"
#include "router/fleet/fleet_indexes.h"
#include "router/policy/policy.h"

namespace kvc {

struct PoolConfig {
  std::chrono::milliseconds poll_interval{500};  // health and load of every replica
  // Polls start at multiples of poll_interval on the system clock, plus this: routers polling
  // the same replicas read them within one period of the replicas' load tick
  // (ReplicaServerConfig::load_tick) and see the same figures. Negative: not aligned.
  std::chrono::milliseconds poll_phase{20};
  std::chrono::milliseconds poll_timeout{2000};   // a poll not answered within it failed
  size_t max_probe_body_bytes = size_t{4} << 20;  // a larger answer to a poll (/metrics) is refused
  ReplicaKind default_kind = ReplicaKind::kAuto;  // of replicas added without one (DNS discovery)
  // A failed poll takes the replica out of routing; this many in a row make it dead: the
  // exchanges it still has in flight are ended (and retried elsewhere if nothing reached the
  // client yet), instead of waiting for a stalled process.
  int32_t failed_polls_to_dead = 2;
  int32_t failures_to_open = 3;              // consecutive proxy failures open the breaker
  std::chrono::milliseconds open_for{2000};  // then no traffic for this long
  // A KV-event subscription that ended is retried after a backoff doubling from min to max.
  std::chrono::milliseconds resubscribe_backoff_min{100};
  std::chrono::milliseconds resubscribe_backoff_max{5000};
  size_t max_kv_event_bytes = size_t{8} << 20;  // one SSE event of a replica's KV-event feed
  // Called (without the pool's locks) each time a replica's KV-event feed is dropped to be
  // resubscribed with a fresh snapshot: reason "refused_event" (an event the index refused: a
  // parent it does not know, a corrupt chain) or "sequence_gap" (events were missed). It runs on
  // the client's I/O thread inside a feed's callback: it must not destroy the pool (or wait for
  // its destruction).
  std::function<void(const std::string& replica_id, const char* reason)> on_resync;
  int32_t default_block_size = 16;
  std::string replica_api_key;  // sent on polls and KV-event subscriptions (replica --api-key)
  // Approximate index capacity of a replica whose metrics state its KV capacity (vLLM, SGLang):
  // its KV tokens x bytes per token / block size router blocks. Off: the index's own capacity.
  bool derive_approx_capacity = true;
  // The routed-work signal (ReplicaView::routed_work): a replica's computed tokens count with
  // weight exp(-age / horizon). The horizon starts at routed_work_horizon and stretches (up to
  // routed_work_max_horizon) until the fleet's decayed ended requests hold
  // routed_work_requests_per_replica per replica: a slower fleet (fewer requests a second) keeps
  // as many requests in the window, so the work bound's slack (a few mean requests) is as
  // tight a share of it as on a fast one.
  std::chrono::milliseconds routed_work_horizon{10000};
  std::chrono::milliseconds routed_work_max_horizon{120000};
  // 125: what the H200 sim fleet's window holds at 200 requests a second; the A10G profile's
  // balance came within 1.2 with it, the H200's unchanged (bench/results/routing-profiles.md).
  // 0: a fixed horizon.
  double routed_work_requests_per_replica = 125;
  double min_requests_for_mean = 20;
  double approx_bytes_per_token = 4.0;  // router blocks are bytes; ~4 bytes per BPE token
};

struct ReplicaView {  // a copy, safe to use without the pool's lock
  uint32_t index = 0;
  std::string host;
  uint16_t port = 0;
  std::string replica_id;  // from /v1/info; the address until known (and for foreign replicas)
  ReplicaKind kind = ReplicaKind::kAuto;  // kAuto until detected
  std::string hash_model;                 // kvcascade only (foreign: the request's model)
  std::vector<std::string> models;
  std::optional<int64_t> max_model_len;  // its models' context, when it states one
  // The replica's chat template from /v1/info (null: canonical rendering): chat requests are
  // hashed as the replica will tokenize them.
  std::shared_ptr<const ChatTemplate> chat_template;
  // Put around a completion prompt before hashing, as the replica's tokenizer does (BOS).
  std::string completion_prefix, completion_suffix;
  // Its tokens' bytes (kTokenIds replicas): a prompt given as token ids is hashed as these.
  std::shared_ptr<const TokenTable> token_table;
  int32_t block_size = 16;
  bool healthy = false;
  bool exact = false;            // KV events subscribed
  int64_t kv_event_resyncs = 0;  // feeds dropped for a fresh snapshot (PoolConfig::on_resync)
  // The replica's last load report; load_reported false when it has none (openai kind) or its
  // load signal failed (load_error says why): the router's own counts stand in.
  bool load_reported = false;
  // As last reported; waiting_sequences also counts the samples of the work announced since
  // (announced_work), so /router/state's "waiting" does too.
  int64_t queued_prefill_tokens = 0, running_sequences = 0, waiting_sequences = 0;
  // The version of its weights (kvcascade's /v1/load; empty for other engines), when they began
  // to serve there (ms since the epoch, as the replica reports it; nullopt: its start-up
  // weights, or a replica that does not report it), and the version's rank among the versions the
  // replicas serve (1, 2, ...: a higher one is newer; 0: no version). A version ranks by the latest
  // time a healthy replica reports loading it, which every router reads alike, so routers agree on
  // the newest whatever order they saw the versions in; versions no replica gives a time for rank
  // below those, in the order this router first saw them. Ranks compare within one snapshot only.
  std::string weight_version;
  std::optional<int64_t> weight_loaded_at_ms;
  uint64_t weight_version_order = 0;
  // An operator paused its admission (kvcascade's /v1/load "paused"): it takes no new request
  // while another replica can (router/proxy.cc).
  bool paused = false;
  std::optional<double> kv_usage;             // 0..1, when reported
  std::optional<int64_t> kv_capacity_tokens;  // when reported
  // The completion tokens it plans per sample of a chat request without max_tokens (kvcascade's
  // /v1/load; api/openai_request.h kPlannedOpenCompletionTokens), when reported.
  std::optional<int64_t> planned_open_completion_tokens;
  std::string error;  // why the last poll failed
  std::string load_error;
  // Sent by this router and not yet answered: requests, and their prompts' bytes.
  int64_t in_flight = 0;
  int64_t in_flight_prompt_bytes = 0;
  // The prompt tokens this router expects the replica to compute (those it did not hold) for
  // requests whose answer has not started: fresher than a load report (polled every
  // poll_interval). Shown in /router/state; not in the policy's cost: tried there, it moved
  // requests off their prefixes' holders under load (rl mix: hits 95% -> 92% of the oracle).
  int64_t pending_prefill_tokens = 0;
  // The work this replica took on lately, in tokens, as every router sees it alike: from its
  // last load report, the tokens it computed (prefill and decode rows) decayed over
  // PoolConfig::routed_work_horizon plus the work queued there; then what this router sent it
  // since that report (note_routed_work). A replica that comes back (restart, a stall that
  // ended) or joins restarts at the others' mean, so it takes its share, not every request.
  // nullopt: the replica reports no such figures (other engines); the policy counts its own.
  // Between two reports every router adds the work the replica announced queuing since (its
  // KvWork events, whichever router sent it: announced_work, and announced_sequences with the
  // waiting sequences), and this router's own sends only until their announcement comes (a few
  // ms), so routers differ only by what is in flight to the replica.
  std::optional<double> routed_work;
  double unacked_work = 0;    // this router's part of routed_work (sent, not announced yet)
  double announced_work = 0;  // the announced part, alike for every router
  // The share of wall time the replica spent in steps lately (its busy_seconds_total, decayed
  // as routed_work's computed tokens), 0..1; nullopt: not reported, or no report to compare yet.
  std::optional<double> busy;
  // The share of wall time in steps beyond each step's fixed cost (its step model's overhead_s x
  // the steps it ran, decayed alike): the work that grows with what is sent there. A GPU
  // stepping all the time on small decode batches is busy and still has room (most of each step
  // is the weights' read, the same for one row or a hundred); a CPU replica's busy time is nearly
  // all of this kind. nullopt: no step model or steps reported yet.
  std::optional<double> load_busy;
  // Sequences (n per request) this router sent since that report: with the report's running and
  // waiting sequences, the replica's decode load without counting twice what the report has.
  int64_t unacked_sequences = 0;
  // Its step time as it fitted it from its own steps (kvcascade replicas): the basis for costs
  // in each replica's own seconds (Candidate::seconds_per_token). Shown in /router/state.
  std::optional<StepModel> step_model;
};

// The completion tokens per sample to plan for a chat request without max_tokens (only the
// context bounds it) on `replicas` (those serving its model): the mean of what the healthy ones
// report planning for such requests from those they saw end (ReplicaView::
// planned_open_completion_tokens), which every router reads alike; api/openai_request.h
// kPlannedOpenCompletionTokens where none reports it yet.
int64_t planned_open_completion(const std::vector<ReplicaView>& replicas);

// A replica's address as ReplicaPool::add takes it: "host:port" (an http:// prefix and a trailing
// '/' accepted; port 1-65535; no path, no other scheme). The error names the address.
Status parse_replica_address(const std::string& address, std::string& host, uint16_t& port);

class ReplicaPool {
 public:
  // Feeds indexes.exact from the replicas' KV events; a replica that leaves routing leaves both
  // indexes.
  ReplicaPool(http::Client& client, FleetIndexes& indexes, const Clock& clock,
              PoolConfig config = {});
  // Stops the poller and cuts the KV-event subscriptions (their replicas see the connections
  // close). The client may outlive the pool: a callback of one of its feeds that runs later
  // touches nothing of the pool (Lifetime).
  ~ReplicaPool();

  // "host:port" (an http:// prefix is accepted); kAuto: detected (else default_kind when that is
  // set). Returns the replica's index.
  Result<uint32_t> add(const std::string& address, ReplicaKind kind = ReplicaKind::kAuto);
  // The replica is gone (DNS, operator): its entries leave the index.
  void remove(uint32_t index);
  // Replaces the set of addresses (DNS discovery): new ones added, missing ones removed.
  void set_addresses(const std::vector<std::string>& addresses);
  void start();  // background polling and subscriptions
  // One synchronous poll of every replica (tests, start-up).
  void poll_now();
  // Poll rounds completed so far (tests wait for rounds instead of sleeping).
  uint64_t num_poll_rounds() const { return poll_rounds_.load(); }

  std::vector<ReplicaView> snapshot() const;
  // The mean work of a request over the fleet lately, as every router sees it: the healthy
  // reporting replicas' computed tokens over their ended requests, both decayed over
  // routed_work_horizon; nullopt until they ended PoolConfig::min_requests_for_mean of them.
  std::optional<double> fleet_request_work() const;

  // The routed-work signal's horizon now, in seconds (PoolConfig::routed_work_horizon, stretched
  // by routed_work_requests_per_replica).
  double routed_work_horizon_s() const;
  std::optional<ReplicaView> get(uint32_t index) const;
  // Proxy outcomes feed the circuit breaker and the in-flight counts. `cancellation`, when given,
  // is cancelled if the replica is found dead while the exchange is in flight; pass the same one
  // to end_request.
  // prompt_bytes: the request's, counted in flight until end_request (give the same number).
  // prefill_tokens: its uncached prompt tokens, pending until prefill_started or end_request
  // (give end_request what prefill_started did not take).
  void begin_request(uint32_t index, std::shared_ptr<http::Cancellation> cancellation = nullptr,
                     int64_t prompt_bytes = 0, int64_t prefill_tokens = 0);
  // The answer started (its first bytes came back): the replica has done the prefill.
  void prefill_started(uint32_t index, int64_t prefill_tokens);
  void end_request(uint32_t index, bool ok,
                   const std::shared_ptr<http::Cancellation>& cancellation = nullptr,
                   int64_t prompt_bytes = 0, int64_t prefill_tokens = 0);
  // This router sent `work` tokens of work to the replica (what the policy counted for the
  // request): part of its routed_work until a load report that was asked for after the send.
  // Returns an id for forget_routed_work.
  uint64_t note_routed_work(uint32_t index, double work, int64_t sequences = 0);
  // That send failed before the replica took it: its work leaves routed_work.
  void forget_routed_work(uint32_t index, uint64_t id);
  // The x-kvcascade-route header value for a send (note_routed_work's id): the replica gives it
  // back in the send's work announcement (KvWork::route), which then takes over from the send.
  // Unique to this pool (a random prefix), so that other routers' sends are never taken for it.
  std::string route_of(uint64_t id) const;
  // A work announcement from the replica's KV events (the subscription's, in order; tests).
  void note_announced_work(uint32_t index, const KvWork& work);
  // Announcements older than this many are dropped (an engine that never reports).
  static constexpr size_t kMaxAnnounced = 65536;

 private:
  struct Replica;
  // Whether the pool is still there, for the callbacks of its KV-event feeds, which the client
  // runs on its I/O threads, possibly after the pool is gone. Each holds a reference and runs
  // with `mu` shared and returns at once when `alive` is false; the destructor clears it with `mu`
  // exclusive, so it also waits for a callback running then. Lock order: this, then mu_.
  struct Lifetime {
    std::shared_mutex mu;
    bool alive = true;
  };
  void poll(Replica& r, uint64_t round);
  void note_work_report_locked(Replica& r, const ReplicaLoad& load, uint64_t round, bool arrived);
  // The healthy reporting replicas' decayed computed tokens and ended requests, summed.
  struct FleetWork {
    double computed = 0, finished = 0;
    int replicas = 0;
  };
  FleetWork fleet_work_locked() const;
  double work_horizon_s_locked() const;
  void adapt_work_horizon_locked();
  void apply_load_locked(Replica& r, const ReplicaLoad& load, uint64_t round, bool arrived);
  ReplicaView view_locked(const Replica& r, Clock::TimePoint now) const;
  // Each weight version the replicas report, with its rank (ReplicaView::weight_version_order).
  std::map<std::string, uint64_t> version_ranks_locked() const;
  void refresh_version_order_locked();
  void set_approx_capacity_locked(const Replica& r);
  void subscribe(uint32_t index);
  void note_resync(Replica& r, const char* reason);
  void forget_blocks_locked(Replica& r);
  void run();

  http::Client& client_;
  FleetIndexes& indexes_;
  const Clock& clock_;
  PoolConfig config_;
  std::mutex poll_mu_;  // held through a round of polls
  std::atomic<uint64_t> poll_rounds_{0};
  std::atomic<uint64_t> rounds_started_{0};  // sends are tagged with it (note_routed_work)
  mutable std::mutex mu_;
  // Guarded by mu_: when this router first saw each weight version (1, 2, ...), the order of
  // versions no replica gives a load time for.
  std::map<std::string, uint64_t> version_order_;
  uint64_t next_send_id_ = 1;       // guarded by mu_
  const std::string route_prefix_;  // route_of's: 16 random hex digits and '-'
  void note_announced_work_locked(Replica& r, const KvWork& work);
  static void drop_oldest_announced(Replica& r);
  static void clear_announced(Replica& r);
  double work_horizon_s_ = 0;  // guarded by mu_; 0: PoolConfig::routed_work_horizon
  std::vector<std::shared_ptr<Replica>> replicas_;  // by index; removed ones are null
  const std::shared_ptr<Lifetime> lifetime_ = std::make_shared<Lifetime>();
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvc
