#include "replica/core/engine_loop.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <variant>

namespace kvc {
namespace {

// Now on the system clock, in ms since the epoch: what routers compare across replicas (the
// time weights were loaded, LoadSnapshot::weight_loaded_at_ms).
int64_t unix_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The fit begins with the steps the backend can time without running them (none but the sim's).
StepModelFit seeded_step_fit(const Backend& backend) {
  StepModelFit fit;
  for (const PredictedStep& s : backend.predicted_steps())
    fit.add(s.seconds, s.prefill_tokens, s.decode_seqs, s.kv_gb);
  return fit;
}

// The load a replica reports before its first step (its engine thread not started yet), with
// the step model it starts from.
LoadSnapshot initial_load(const Engine& engine, const std::string& weight_version,
                          std::optional<StepModel> step_model) {
  LoadSnapshot snap;
  snap.scheduler = engine.scheduler().counts();
  snap.blocks = engine.pool().counts();
  snap.weight_version = weight_version;
  snap.work_seq = engine.work_seq();
  snap.step_model = std::move(step_model);
  return snap;
}

}  // namespace

EngineLoop::EngineLoop(Engine& engine, std::string replica_id, metrics::ReplicaMetrics* metrics,
                       std::string weight_version)
    : engine_(engine),
      replica_id_(std::move(replica_id)),
      metrics_(metrics),
      step_fit_(seeded_step_fit(engine.backend())),
      load_(initial_load(engine, weight_version, step_fit_.published())),
      weight_version_(std::move(weight_version)),
      thread_([this] { run(); }) {
  // Every series a dashboard plots exists from the start (at zero), not only after its first
  // event: "no data" and "zero" look different on a graph. The per-step ones are kept.
  if (!metrics_) return;
  metrics::ReplicaMetrics& m = *metrics_;
  run_on_engine_thread([this, &m](Engine& engine) {
    auto st = std::make_unique<StepSeries>();
    st->shared_prefix_tokens =
        &m.decode_batch_shared_prefix_tokens.Add({}, metrics::token_buckets());
    st->sibling_count = &m.decode_batch_sibling_count.Add({}, metrics::count_buckets());
    st->decode_batch_size = &m.decode_batch_size.Add({}, metrics::count_buckets());
    st->decode_step_seconds = &m.decode_step_seconds.Add(
        {{"attention", engine.config().cascade.enabled ? "cascade" : "flat"}},
        metrics::seconds_buckets());
    for (int kept = 0; kept < 2; ++kept) {
      for (int i = 0; i < kNumCascadeReasons; ++i) {
        const auto r = static_cast<CascadeReason>(i);
        // A kept level's reason is "pays", a dropped one's any other: create those that occur.
        if ((r == CascadeReason::kPays) != (kept == 1)) continue;
        st->decisions[kept][static_cast<int>(r)] = &m.cascade_decisions_total.Add(
            {{"decision", kept ? "cascade" : "flat"}, {"reason", cascade_reason_name(r)}});
      }
    }
    st->kv_read_prefix = &m.kv_bytes_read_total.Add({{"kind", "prefix"}});
    st->kv_read_suffix = &m.kv_bytes_read_total.Add({{"kind", "suffix"}});
    st->kv_saved = &m.kv_bytes_saved_total.Add({});
    st->cache_query = &m.prefix_cache_query_tokens_total.Add({});
    st->cache_hit = &m.prefix_cache_hit_tokens_total.Add({});
    st->preemptions = &m.preemptions_total.Add({});
    m.request_ttft_seconds.Add({}, metrics::seconds_buckets());
    m.request_tpot_seconds.Add({}, metrics::seconds_buckets());
    m.prompt_tokens_total.Add({});
    st->generated = &m.generation_tokens_total.Add({});
    st->blocks_used = &m.kv_blocks.Add({{"state", "used"}});
    st->blocks_cached = &m.kv_blocks.Add({{"state", "cached"}});
    st->blocks_free = &m.kv_blocks.Add({{"state", "free"}});
    st->host_blocks_held = &m.kv_host_blocks.Add({});
    st->host_loads = &m.kv_host_transfers_total.Add({{"direction", "load"}});
    st->host_offloads = &m.kv_host_transfers_total.Add({{"direction", "offload"}});
    st->groups_waiting = &m.groups.Add({{"state", "waiting"}});
    st->groups_running = &m.groups.Add({{"state", "running"}});
    const BlockPoolCounts b = engine.pool().counts();
    st->blocks_used->Set(b.num_blocks_used);
    st->blocks_cached->Set(b.num_blocks_cached);
    st->blocks_free->Set(b.num_blocks_free);
    series_ = std::move(st);
  });
}

EngineLoop::~EngineLoop() {
  stop();
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool EngineLoop::stopped() const {
  std::lock_guard lock(mu_);
  return stopping_;
}

bool EngineLoop::post(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return false;
    commands_.push_back(std::move(fn));
  }
  wake_.notify_one();
  return true;
}

void EngineLoop::submit(std::vector<GenerationRequest> requests, std::vector<GroupSink> sinks,
                        OnSubmitted on_submitted) {
  assert(requests.size() == sinks.size());
  // Shared: if the loop refuses the command, the callback is still here to be told so.
  auto callback = std::make_shared<OnSubmitted>(std::move(on_submitted));
  const bool queued =
      post([this, callback, requests = std::move(requests), sinks = std::move(sinks)]() mutable {
        Result<std::vector<uint64_t>> ids = engine_.submit_all(std::move(requests));
        if (ids.ok()) {
          for (size_t i = 0; i < ids->size(); ++i)
            sinks_.emplace((*ids)[i], std::move(sinks[i]));
        }
        (*callback)(std::move(ids));
      });
  if (!queued) (*callback)(Error{"the engine is shutting down"});
}

void EngineLoop::abort(uint64_t group_id) {
  post([this, group_id] { engine_.abort(group_id); });
}

std::optional<uint64_t> EngineLoop::subscribe_kv_events(KvSubscriber subscriber, bool queued,
                                                        bool work) {
  uint64_t sid = 0;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return std::nullopt;
    sid = next_subscriber_++;
  }
  // Commands run in order, so an unsubscribe posted after this finds the subscriber.
  const bool posted = post([this, sid, queued, work, subscriber = std::move(subscriber)]() mutable {
    // Changes not yet published belong before the snapshot for everyone else.
    publish_kv_events();
    Subscriber& s = subscribers_[sid];
    s.fn = std::move(subscriber);
    s.queued = queued;
    s.work = queued && work;
    KvEventBatch snapshot{replica_id_, s.next_seq++, true, {KvCleared{}}};
    for (KvEvent& e : engine_.kv_snapshot(queued))
      snapshot.events.push_back(std::move(e));
    s.fn(snapshot, encode_kv_events(snapshot.events));
  });
  if (!posted) return std::nullopt;
  return sid;
}

void EngineLoop::unsubscribe_kv_events(uint64_t id) {
  post([this, id] { subscribers_.erase(id); });
}

LoadSnapshot EngineLoop::load() const {
  std::lock_guard lock(mu_);
  return load_;
}

std::string EngineLoop::weight_version() const {
  std::lock_guard lock(mu_);
  return weight_version_;
}

int64_t EngineLoop::weight_loaded_at_ms() const {
  std::lock_guard lock(mu_);
  return weight_loaded_at_ms_;
}

void EngineLoop::set_paused(bool paused) {
  post([this, paused] {
    paused_ = paused;
    update_admission();
  });
}

void EngineLoop::refresh_load() {
  LoadSnapshot snap;
  snap.scheduler = engine_.scheduler().counts();
  snap.blocks = engine_.pool().counts();
  snap.num_steps = num_steps_;
  snap.num_preemptions = engine_.scheduler().num_preemptions();
  snap.paused = paused_;
  snap.updating = pending_update_.has_value();
  snap.num_computed_tokens = num_computed_tokens_;
  snap.num_finished_requests = num_finished_requests_;
  snap.busy_seconds = busy_seconds_;
  snap.step_model = step_fit_.published();
  snap.work_seq = engine_.work_seq();
  // The gauges with /v1/load: an abort frees blocks with no step after it to observe.
  set_gauges(snap.blocks, snap.scheduler);
  std::lock_guard lock(mu_);
  snap.weight_version = weight_version_;
  snap.weight_loaded_at_ms = weight_loaded_at_ms_;
  load_ = snap;
}

void EngineLoop::update_admission() {
  engine_.set_admitting(!paused_ && !pending_update_);
}

void EngineLoop::update_weights(WeightUpdate update, OnUpdated done) {
  auto callback = std::make_shared<OnUpdated>(std::move(done));
  auto fail = [callback](UpdateError kind, std::string message) {
    const WeightUpdateFailure f{kind, std::move(message)};
    (*callback)(nullptr, &f);
  };
  const bool queued = post([this, callback, fail, update = std::move(update)]() mutable {
    if (pending_update_) {
      return fail(UpdateError::kBusy,
                  "a weight update (to " + pending_update_->update.version + ") is running");
    }
    // A checkpoint that cannot be served is refused before anything drains. Before an abort,
    // also one holding NaN or infinity (a pass over every byte of it, here on the engine
    // thread: the requests it holds up are about to be cut anyway), which would otherwise cut
    // them for an update then refused; a drain finds it as the weights load, after it.
    const Backend& backend = engine_.backend();
    if (Status s = update.abort ? backend.check_weights_finite(update.path)
                                : backend.check_weights(update.path);
        !s.ok()) {
      return fail(UpdateError::kInvalid, s.message());
    }
    pending_update_ = PendingUpdate{std::move(update), std::move(*callback), Clock::TimePoint{}, 0};
    pending_update_->since = engine_.clock().now();
    update_admission();
    refresh_load();
    if (pending_update_->update.abort) {
      const std::vector<uint64_t> ids = engine_.scheduler().started_groups();
      for (uint64_t id : ids)
        engine_.abort(id);
      pending_update_->aborted = static_cast<int64_t>(ids.size());
      // Their clients hear of it now (finish_reason "abort"), on the old version.
      StepResult ended = engine_.step();
      dispatch(ended);
    }
  });
  if (!queued) fail(UpdateError::kInvalid, "the engine is shutting down");
}

void EngineLoop::finish_update() {
  PendingUpdate p = std::move(*pending_update_);
  pending_update_.reset();
  WeightUpdateReport report;
  report.version = p.update.version;
  report.previous_version = weight_version();
  report.aborted_groups = p.aborted;
  report.drain_seconds = std::chrono::duration<double>(engine_.clock().now() - p.since).count();
  const auto loading = std::chrono::steady_clock::now();
  const Status s = engine_.replace_weights(p.update.path, &report.flushed_blocks);
  report.load_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - loading).count();
  // The cleared event goes out before anything is cached with the new weights.
  publish_kv_events();
  const bool intact = engine_.backend().weights_intact();
  if (s.ok() || !intact) {
    std::lock_guard lock(mu_);
    weight_version_ = s.ok() ? p.update.version : "";
    // Later than the weights it replaced, even if the system clock stepped back.
    if (s.ok()) weight_loaded_at_ms_ = std::max(unix_ms_now(), weight_loaded_at_ms_ + 1);
  }
  update_admission();
  refresh_load();  // /v1/load agrees with the answer the client is about to read
  if (s.ok()) {
    p.done(&report, nullptr);
  } else {
    const WeightUpdateFailure f{intact ? UpdateError::kInvalid : UpdateError::kBroken, s.message()};
    p.done(nullptr, &f);
  }
}

void EngineLoop::run_on_engine_thread(std::function<void(Engine&)> fn) {
  std::promise<void> done;
  auto finished = done.get_future();
  // Commands queued before stop() still run (run() drains them), so this never waits forever.
  if (!post([&] {
        fn(engine_);
        done.set_value();
      })) {
    return;
  }
  finished.wait();
}

void EngineLoop::publish_kv_events() {
  std::vector<KvEvent> events = engine_.take_kv_events();
  if (events.empty() || subscribers_.empty()) return;
  // Three feeds: the blocks alone; with the queued events (KvQueued); with the queued and the
  // work events (KvWork). One batch and one encoding per feed that has subscribers, each
  // subscriber's seq set on it in turn: N routers cost the engine thread one encoding of the
  // events, not N copies and encodings. The richest feed in use takes the events themselves.
  auto feed_of = [](const Subscriber& s) { return s.work ? 2 : (s.queued ? 1 : 0); };
  auto keeps = [](int feed, const KvEvent& e) {
    if (std::holds_alternative<KvWork>(e)) return feed == 2;
    return feed >= 1 || !std::holds_alternative<KvQueued>(e);
  };
  struct Shared {
    KvEventBatch batch;
    std::string json;
  };
  Shared shared[3];
  int richest = -1;
  bool used[3] = {false, false, false};
  for (const auto& [id, s] : subscribers_) {
    used[feed_of(s)] = true;
    richest = std::max(richest, feed_of(s));
  }
  for (int f = 0; f < 3; ++f) {
    if (!used[f]) continue;
    if (f == richest) {
      std::erase_if(events, [&](const KvEvent& e) { return !keeps(f, e); });
      shared[f].batch.events = std::move(events);
    } else {
      for (const KvEvent& e : events)
        if (keeps(f, e)) shared[f].batch.events.push_back(e);
    }
    shared[f].batch.replica = replica_id_;
    if (!shared[f].batch.events.empty()) shared[f].json = encode_kv_events(shared[f].batch.events);
  }
  for (auto& [id, s] : subscribers_) {
    Shared& feed = shared[feed_of(s)];
    if (feed.batch.events.empty()) continue;
    feed.batch.seq = s.next_seq++;
    s.fn(feed.batch, feed.json);
  }
}

void EngineLoop::observe(const StepResult& result) {
  if (!series_) return;
  StepSeries& m = *series_;
  const StepStats& s = result.stats;
  if (s.num_decode_seqs > 0) {
    m.decode_batch_size->Observe(s.num_decode_seqs);
    m.decode_step_seconds->Observe(std::chrono::duration<double>(s.duration).count());
    for (const LevelDecision& d : s.cascade.decisions) {
      m.shared_prefix_tokens->Observe(d.shared_tokens);
      m.sibling_count->Observe(d.members);
      if (prometheus::Counter* c = m.decisions[d.kept ? 1 : 0][static_cast<int>(d.reason)]) {
        c->Increment();
      }
    }
    m.kv_read_prefix->Increment(static_cast<double>(s.cascade.kv_bytes_shared));
    m.kv_read_suffix->Increment(
        static_cast<double>(s.cascade.kv_bytes_cascade - s.cascade.kv_bytes_shared));
    m.kv_saved->Increment(
        static_cast<double>(s.cascade.kv_bytes_flat - s.cascade.kv_bytes_cascade));
  }
  m.cache_query->Increment(s.prefix_cache_query_tokens);
  m.cache_hit->Increment(s.prefix_cache_hit_tokens);
  m.host_loads->Increment(s.num_host_loads);
  m.host_offloads->Increment(s.num_host_offloads);
  m.host_blocks_held->Set(engine_.pool().host_counts().num_blocks_held);
  m.preemptions->Increment(static_cast<double>(s.preempted.size()));
  int64_t generated = 0;
  for (const SequenceOutput& o : result.outputs)
    generated += o.num_new_tokens;
  m.generated->Increment(static_cast<double>(generated));
  set_gauges(engine_.pool().counts(), engine_.scheduler().counts());
}

void EngineLoop::set_gauges(const BlockPoolCounts& b, const SchedulerCounts& c) {
  if (!series_) return;
  StepSeries& m = *series_;
  m.blocks_used->Set(b.num_blocks_used);
  m.blocks_cached->Set(b.num_blocks_cached);
  m.blocks_free->Set(b.num_blocks_free);
  m.groups_waiting->Set(c.num_groups_waiting);
  m.groups_running->Set(c.num_groups_running);
}

void EngineLoop::dispatch(StepResult& result) {
  for (const SequenceOutput& o : result.outputs) {
    auto it = sinks_.find(o.group_id);
    if (it != sinks_.end() && it->second.on_output) it->second.on_output(o);
  }
  for (const auto& g : result.finished) {
    auto it = sinks_.find(g->id);
    if (it == sinks_.end()) continue;
    if (it->second.on_finished) it->second.on_finished(*g, result.error);
    sinks_.erase(it);
  }
}

void EngineLoop::run() {
  Clock::TimePoint last_publish = engine_.clock().now();
  while (true) {
    std::deque<std::function<void()>> commands;
    {
      // Queued work that cannot start yet (a declared group waiting for its members) sleeps
      // until it can, or until a command (a new member) arrives.
      const std::optional<Clock::Duration> held = engine_.held_for();
      const auto timeout =
          held ? std::min<std::chrono::nanoseconds>(kHeartbeat, *held) : kHeartbeat;
      std::unique_lock lock(mu_);
      wake_.wait_for(lock, timeout, [&] {
        return stopping_ || !commands_.empty() || (engine_.has_runnable_work() && !held);
      });
      if (stopping_) break;
      commands.swap(commands_);
    }
    // Idle streams get an empty batch now and then, so proxies and clients do not cut them.
    if (engine_.clock().now() - last_publish >= kHeartbeat) {
      for (auto& [id, s] : subscribers_)
        s.fn(KvEventBatch{replica_id_, s.next_seq++, false, {}}, "[]");
      last_publish = engine_.clock().now();
    }
    for (auto& c : commands)
      c();
    // Submissions' queued events (and anything else pending) go out before the step, which may
    // take long: other routers learn at once where the prompts wait.
    if (!commands.empty()) publish_kv_events();
    if (engine_.has_runnable_work()) {
      StepResult result = engine_.step();
      ++num_steps_;
      num_computed_tokens_ += result.stats.num_prefill_tokens + result.stats.num_decode_seqs;
      num_finished_requests_ += static_cast<int64_t>(result.finished.size());
      const CascadeStats& cs = result.stats.cascade;
      const double seconds = std::chrono::duration<double>(result.stats.duration).count();
      busy_seconds_ += seconds;
      step_fit_.add(
          seconds, result.stats.num_prefill_tokens, result.stats.num_decode_seqs,
          static_cast<double>(cs.kv_bytes_cascade > 0 ? cs.kv_bytes_cascade : cs.kv_bytes_flat) *
              1e-9);
      observe(result);
      dispatch(result);
    }
    if (pending_update_ && !engine_.scheduler().has_started_work()) finish_update();
    publish_kv_events();
    refresh_load();
  }
  // Shutting down: end every group still queued or running, so no caller waits forever.
  std::deque<std::function<void()>> commands;
  {
    std::lock_guard lock(mu_);
    commands.swap(commands_);
  }
  for (auto& c : commands)
    c();
  if (pending_update_) {
    const WeightUpdateFailure f{UpdateError::kInvalid, "the engine is shutting down"};
    pending_update_->done(nullptr, &f);
    pending_update_.reset();
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, _] : sinks_)
    ids.push_back(id);
  for (uint64_t id : ids)
    engine_.abort(id);
  StepResult result;
  result.finished = engine_.step().finished;
  result.error = "the engine is shutting down";
  dispatch(result);
}

}  // namespace kvc
