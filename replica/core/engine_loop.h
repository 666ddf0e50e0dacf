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
};

class EngineLoop {
 public:
  using KvSubscriber = std::function<void(const KvEventBatch&)>;
  // The engine's answer to a submission: the group ids in request order, or why none was queued.
  using OnSubmitted = std::function<void(Result<std::vector<uint64_t>>)>;

  // metrics: observed after every step on the engine thread; may be null.
  EngineLoop(Engine& engine, std::string replica_id, metrics::ReplicaMetrics* metrics = nullptr);
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
  // engine thread. Returns the id to unsubscribe with, or nullopt after stop().
  std::optional<uint64_t> subscribe_kv_events(KvSubscriber subscriber);
  void unsubscribe_kv_events(uint64_t id);
  // Ends the engine thread: commands already queued run, groups still running are aborted (their
  // sinks see the error), later submissions and subscriptions are refused. Idempotent.
  void stop();
  bool stopped() const;

  LoadSnapshot load() const;
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
        *preemptions, *generated;
    prometheus::Gauge *blocks_used, *blocks_cached, *blocks_free, *groups_waiting, *groups_running;
  };
  std::unique_ptr<StepSeries> series_;
  int64_t preemptions_seen_ = 0;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> commands_;  // run on the engine thread
  bool stopping_ = false;
  LoadSnapshot load_;             // guarded by mu_
  uint64_t next_subscriber_ = 1;  // guarded by mu_

  // Engine-thread state.
  std::map<uint64_t, GroupSink> sinks_;
  struct Subscriber {
    KvSubscriber fn;
    uint64_t next_seq = 0;
  };
  std::map<uint64_t, Subscriber> subscribers_;
  int64_t num_steps_ = 0;
  std::thread thread_;
};

}  // namespace kvc
