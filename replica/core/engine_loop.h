// Runs an Engine on its own thread; HTTP sessions talk to it through a command queue and never
// wait for it (an I/O thread that waited for the engine held up every other request on it,
// /health included). Outputs and answers go back through callbacks, called on the engine thread
// (keep them short: hand the data to the I/O side). KV events are fanned out to subscribers in
// batches with per-subscriber sequence numbers; a new subscriber's first batch is a snapshot of
// every held block.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "metrics/metrics.h"
#include "prefix_index/kv_event.h"
#include "replica/core/engine.h"
#include "replica/core/step_model.h"

namespace kvc {

struct GroupSink {
  // Each sibling's new text, in order; the last call for a sibling has its finish reason.
  std::function<void(const SequenceOutput&)> on_output;
  // The group ended (finished, aborted or failed): its final state. Called once, last.
  std::function<void(const SequenceGroup&, const std::string& error)> on_finished;
};

// What routers and load balancers see (GET /v1/load).
struct LoadSnapshot {
  SchedulerCounts scheduler;
  BlockPoolCounts blocks;
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;
  std::string weight_version;
  bool paused = false;    // an operator's pause (POST /v1/admin/pause)
  bool updating = false;  // a weight update is draining or loading
  // Tokens run through the model since start (prefill, recompute and decode rows): with the
  // scheduler's queued prefill and decode tokens, the work this replica took on, which every
  // router reads alike (router/fleet/replica_pool.h: the routed-work signal).
  int64_t num_computed_tokens = 0;
  // Requests (groups) ended since start: with num_computed_tokens, the mean work of a request.
  int64_t num_finished_requests = 0;
  // Seconds spent in steps since start: a router's reading of how busy the device is (its
  // share of wall time between two readings).
  double busy_seconds = 0;
  // This replica's step time as fitted from the steps it ran, after those its backend times
  // without running them (Backend::predicted_steps: the sim's; nullopt before enough of them).
  std::optional<StepModel> step_model;
  // When an update's weights began to serve, in ms since the epoch on the system clock (the
  // swap; later on this replica than any earlier one); 0 for the weights the replica started
  // with. Routers rank weight versions by it, so that every router finds the same one newest
  // and a replica restarted on its start-up weights (crashed, rescheduled, scaled up) does not
  // pass for the newest (router/fleet/replica_pool.h).
  int64_t weight_loaded_at_ms = 0;
  // The last work announcement (KvWork) these figures hold (Engine::work_seq): a router counts
  // the later ones on top of them.
  uint64_t work_seq = 0;
};

// POST /v1/admin/weights: a Hugging Face folder of the same model to serve from now on.
struct WeightUpdate {
  std::string path;
  std::string version;
  // Drain: admit nothing new, let started groups finish, then swap. Abort: end started groups
  // now (finish_reason "abort") and swap. Either way, requests that arrive meanwhile queue and
  // run on the new weights.
  bool abort = false;
};

struct WeightUpdateReport {
  std::string version, previous_version;
  double drain_seconds = 0;  // from the command to the swap (waiting for started groups)
  double load_seconds = 0;   // the swap itself (reading and writing the weights)
  int64_t aborted_groups = 0;
  int32_t flushed_blocks = 0;
};

// Why an update failed: kInvalid (the checkpoint was refused before anything was written: the
// old weights serve on), kBusy (another update runs), kBroken (it failed while writing: nothing is
// served until an update succeeds).
enum class UpdateError { kInvalid, kBusy, kBroken };
struct WeightUpdateFailure {
  UpdateError kind = UpdateError::kInvalid;
  std::string message;
};

class EngineLoop {
 public:
  // A batch and its events' JSON array (encode_kv_events), encoded once for every subscriber
  // that receives the same events: encode_kv_event_batch(batch.replica, batch.seq,
  // batch.snapshot, events_json) is the batch's text. Both are valid during the call only (the
  // batch is shared: the next subscriber's seq is written into it).
  using KvSubscriber = std::function<void(const KvEventBatch& batch, std::string_view events_json)>;
  // The engine's answer to a submission: the group ids in request order, or why none was queued.
  using OnSubmitted = std::function<void(Result<std::vector<uint64_t>>)>;
  using OnUpdated =
      std::function<void(const WeightUpdateReport*, const WeightUpdateFailure* failure)>;

  // metrics: observed after every step on the engine thread; may be null.
  EngineLoop(Engine& engine, std::string replica_id, metrics::ReplicaMetrics* metrics = nullptr,
             std::string weight_version = "0");
  ~EngineLoop();  // stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Returns at once. On the engine thread: the requests are validated and queued all or none
  // (Engine::submit_all), then `on_submitted` is called, before any sink. Precondition:
  // sinks.size() == requests.size(). After stop(), `on_submitted` gets an error at once, on the
  // calling thread.
  void submit(std::vector<GenerationRequest> requests, std::vector<GroupSink> sinks,
              OnSubmitted on_submitted);
  void abort(uint64_t group_id);
  // Returns at once. The subscriber gets a snapshot batch first, then every change, all on the
  // engine thread; queued events (KvQueued) only with `queued` (a router that knows them: one
  // built before them refuses a batch holding one). Returns the id to unsubscribe with, or
  // nullopt after stop().
  // With `work` too (and `queued`), the work events (KvWork) as well: a router that counts them.
  std::optional<uint64_t> subscribe_kv_events(KvSubscriber subscriber, bool queued = false,
                                              bool work = false);
  void unsubscribe_kv_events(uint64_t id);
  // Ends the engine thread: commands already queued run, groups still running are aborted (their
  // sinks see the error), later submissions and subscriptions are refused. Idempotent.
  void stop();
  bool stopped() const;

  LoadSnapshot load() const;

  // Returns at once; `done` is called on the engine thread when the new weights serve, or with
  // why not (the folder is checked before anything drains). Weight updates: one at a time.
  void update_weights(WeightUpdate update, OnUpdated done);
  // Stops / restarts admission (requests queue meanwhile; started groups go on). Returns at once.
  void set_paused(bool paused);
  // The version of the weights serving now. While a callback of a group runs on the engine
  // thread it is the version that group ran on (swaps happen only with no group started).
  std::string weight_version() const;
  // When those weights began to serve (LoadSnapshot::weight_loaded_at_ms).
  int64_t weight_loaded_at_ms() const;
  // Runs `fn` on the engine thread between steps (metrics, tests); returns when it ran, or at once
  // (without running it) after stop(). Blocks: not for I/O threads.
  void run_on_engine_thread(std::function<void(Engine&)> fn);

 private:
  static constexpr std::chrono::seconds kHeartbeat{15};
  void run();
  // Queues a command for the engine thread; false (and `fn` dropped) after stop().
  bool post(std::function<void()> fn);
  void dispatch(StepResult& result);
  void publish_kv_events();
  void observe(const StepResult& result);
  // The KV block and group gauges of /metrics (after every step and every load refresh).
  void set_gauges(const BlockPoolCounts& blocks, const SchedulerCounts& scheduler);
  // With an update pending and no group started: swap, answer, resume admission.
  void finish_update();
  void update_admission();
  void refresh_load();  // load_ from the engine's state now

  Engine& engine_;
  std::string replica_id_;
  metrics::ReplicaMetrics* metrics_;
  // The series observe() writes every step, resolved once (Family::Add builds and hashes a label
  // map on every call). Null without metrics.
  struct StepSeries {
    prometheus::Histogram *decode_batch_size, *decode_step_seconds, *shared_prefix_tokens,
        *sibling_count;
    // [kept][reason]: cascade_decisions_total{decision, reason}.
    prometheus::Counter* decisions[2][kNumCascadeReasons] = {};
    prometheus::Counter *kv_read_prefix, *kv_read_suffix, *kv_saved, *cache_query, *cache_hit,
        *preemptions, *generated, *host_loads, *host_offloads;
    prometheus::Gauge *blocks_used, *blocks_cached, *blocks_free, *host_blocks_held,
        *groups_waiting, *groups_running;
  };
  std::unique_ptr<StepSeries> series_;
  int64_t preemptions_seen_ = 0;
  // Engine-thread state once the thread runs; declared before load_, whose first snapshot
  // carries the model it starts with.
  StepModelFit step_fit_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> commands_;  // run on the engine thread
  bool stopping_ = false;
  LoadSnapshot load_;                // guarded by mu_
  std::string weight_version_;       // guarded by mu_ (written on the engine thread)
  int64_t weight_loaded_at_ms_ = 0;  // guarded by mu_ (LoadSnapshot::weight_loaded_at_ms)
  uint64_t next_subscriber_ = 1;     // guarded by mu_

  // Engine-thread state.
  struct PendingUpdate {
    WeightUpdate update;
    OnUpdated done;
    Clock::TimePoint since;
    int64_t aborted = 0;
  };
  std::optional<PendingUpdate> pending_update_;
  bool paused_ = false;
  std::map<uint64_t, GroupSink> sinks_;
  struct Subscriber {
    KvSubscriber fn;
    uint64_t next_seq = 0;
    bool queued = false;  // receives KvQueued events
    bool work = false;    // ...and KvWork events
  };
  std::map<uint64_t, Subscriber> subscribers_;
  int64_t num_steps_ = 0;
  int64_t num_computed_tokens_ = 0;
  int64_t num_finished_requests_ = 0;
  double busy_seconds_ = 0;
  std::thread thread_;
};

}  // namespace kvc
