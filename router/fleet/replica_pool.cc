#include "router/fleet/replica_pool.h"

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <random>
#include <unordered_map>

#include "api/openai_request.h"
#include "http/sse.h"
#include "router/fleet/replica_auth.h"
#include "router/fleet/replica_pool_replica.h"
#include "router/fleet/replica_probe.h"

namespace kvc {

namespace {

std::string random_route_prefix() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd();
  char text[18];
  std::snprintf(text, sizeof text, "%016llx-", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

int64_t planned_open_completion(const std::vector<ReplicaView>& replicas) {
  double sum = 0;
  int reports = 0;
  for (const ReplicaView& r : replicas) {
    if (r.healthy && r.planned_open_completion_tokens) {
      sum += static_cast<double>(*r.planned_open_completion_tokens);
      ++reports;
    }
  }
  return reports > 0 ? std::llround(sum / reports) : kPlannedOpenCompletionTokens;
}

Status parse_replica_address(const std::string& address, std::string& host, uint16_t& port) {
  if (!http::parse_host_port(address, host, port)) {
    return Error{"replica address '" + address + "' is not host:port (port 1-65535, no path)"};
  }
  return Status::Ok();
}

ReplicaPool::ReplicaPool(http::Client& client, FleetIndexes& indexes, const Clock& clock,
                         PoolConfig config)
    : client_(client),
      indexes_(indexes),
      clock_(clock),
      config_(config),
      route_prefix_(random_route_prefix()) {}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    for (auto& r : replicas_)
      if (r) r->removed = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  // No feed starts once the poller is gone. Those open are cut, so the replicas see them end now
  // rather than when the client goes, and whatever the client still runs of them (the cut's
  // on_done, a chunk read meanwhile) finds the pool gone.
  std::vector<std::shared_ptr<http::Cancellation>> feeds;
  {
    std::lock_guard lock(mu_);
    for (const auto& r : replicas_)
      if (r && r->subscription) feeds.push_back(r->subscription);
  }
  for (const auto& c : feeds)
    c->cancel("the router's replica pool was destroyed");
  std::unique_lock life(lifetime_->mu);  // waits for a feed callback running now
  lifetime_->alive = false;
}

Result<uint32_t> ReplicaPool::add(const std::string& address, ReplicaKind kind) {
  auto r = std::make_shared<Replica>();
  r->backoff = config_.resubscribe_backoff_min;
  r->probe = ReplicaProbe(kind != ReplicaKind::kAuto ? kind : config_.default_kind);
  if (Status s = parse_replica_address(address, r->view.host, r->view.port); !s.ok()) {
    return Error{s.message()};
  }
  r->view.replica_id = r->view.host + ":" + std::to_string(r->view.port);
  r->view.block_size = config_.default_block_size;
  std::lock_guard lock(mu_);
  for (const auto& other : replicas_) {
    if (other && other->view.host == r->view.host && other->view.port == r->view.port) {
      return other->view.index;
    }
  }
  r->view.index = static_cast<uint32_t>(replicas_.size());
  replicas_.push_back(r);
  return r->view.index;
}

void ReplicaPool::remove(uint32_t index) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  replicas_[index]->removed = true;
  forget_blocks_locked(*replicas_[index]);
  replicas_[index].reset();
  refresh_version_order_locked();
}

// What the indexes hold for the replica goes (it may come back restarted, its cache empty), and
// its KV-event feed is cut so that it resubscribes, with a fresh snapshot, once it is healthy
// again: a replica that was only slow would otherwise keep its feed and never send again what
// was dropped here.
void ReplicaPool::forget_blocks_locked(Replica& r) {
  ++r.index_generation;
  if (r.subscription) r.subscription->cancel("replica " + r.view.replica_id + " left routing");
  std::lock_guard index_lock(indexes_.mu);  // lock order: pool, then index
  indexes_.exact.clear(r.view.index);
  indexes_.approx.clear(r.view.index);
  indexes_.routed.clear(r.view.index);
}

void ReplicaPool::set_addresses(const std::vector<std::string>& addresses) {
  std::vector<uint32_t> keep;
  for (const std::string& a : addresses) {
    if (auto i = add(a); i.ok()) keep.push_back(*i);
  }
  std::vector<uint32_t> gone;
  {
    std::lock_guard lock(mu_);
    for (const auto& r : replicas_) {
      if (r && std::find(keep.begin(), keep.end(), r->view.index) == keep.end()) {
        gone.push_back(r->view.index);
      }
    }
  }
  for (uint32_t i : gone)
    remove(i);
}

ReplicaView ReplicaPool::view_locked(const Replica& r, Clock::TimePoint now) const {
  ReplicaView v = r.view;
  v.healthy = v.healthy && now >= r.open_until;
  if (r.computed_total) {
    for (const auto& [id, sent] : r.unacked) {
      v.unacked_work += sent.work;
      v.unacked_sequences += sent.sequences;
    }
    v.announced_work = r.announced_work;
    v.waiting_sequences += r.announced_sequences;
    v.routed_work = r.computed_decayed + r.queued_work + v.unacked_work + r.announced_work;
    if (r.busy_total && r.wall_decayed > 0) {
      v.busy = std::clamp(r.busy_decayed / r.wall_decayed, 0.0, 1.0);
      if (r.steps_total && r.view.step_model) {
        v.load_busy = std::clamp(
            (r.busy_decayed - r.view.step_model->overhead_s * r.steps_decayed) / r.wall_decayed,
            0.0, 1.0);
      }
    }
  }
  return v;
}

// The replica's load report: its queue, sequences and work figures.
void ReplicaPool::apply_load_locked(Replica& r, const ReplicaLoad& load, uint64_t round,
                                    bool arrived) {
  r.view.queued_prefill_tokens = load.queued_prefill_tokens;
  r.view.running_sequences = load.running;
  r.view.waiting_sequences = load.waiting;
  r.view.step_model = load.step_model;
  r.view.planned_open_completion_tokens = load.planned_open_completion_tokens;
  if (load.computed_tokens_total) {
    note_work_report_locked(r, load, round, arrived);
  } else {
    r.computed_total.reset();
    r.finished_total.reset();
  }
}

// Weight versions newest last. A version's time is the latest load time a healthy replica at it
// reports: the same for every router reading the same reports, whatever order each saw the
// versions in (a restarted router, the other router of a pair, during a rolling update). Health
// is this router's (its polls and its breaker). Equal times: by name.
// Versions without a time (replicas that do not report one, or only unhealthy replicas at them)
// rank below every timed one, in the order this router first saw them.
std::map<std::string, uint64_t> ReplicaPool::version_ranks_locked() const {
  struct Key {
    std::optional<int64_t> loaded_at_ms;
    uint64_t first_seen = 0;
  };
  std::map<std::string, Key> keys;
  for (const auto& r : replicas_) {
    if (!r || r->view.weight_version.empty()) continue;
    Key& k = keys[r->view.weight_version];
    if (r->view.healthy && r->view.weight_loaded_at_ms &&
        (!k.loaded_at_ms || *r->view.weight_loaded_at_ms > *k.loaded_at_ms)) {
      k.loaded_at_ms = r->view.weight_loaded_at_ms;
    }
  }
  std::vector<std::pair<std::string, Key>> order;
  for (auto& [version, k] : keys) {
    const auto seen = version_order_.find(version);
    k.first_seen = seen != version_order_.end() ? seen->second : 0;
    order.emplace_back(version, k);
  }
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    if (a.second.loaded_at_ms.has_value() != b.second.loaded_at_ms.has_value()) {
      return !a.second.loaded_at_ms.has_value();  // untimed first: older
    }
    if (!a.second.loaded_at_ms) return a.second.first_seen < b.second.first_seen;
    if (*a.second.loaded_at_ms != *b.second.loaded_at_ms) {
      return *a.second.loaded_at_ms < *b.second.loaded_at_ms;
    }
    return a.first < b.first;
  });
  std::map<std::string, uint64_t> ranks;
  for (size_t i = 0; i < order.size(); ++i)
    ranks[order[i].first] = i + 1;
  return ranks;
}

// Each replica's rank of its version, kept in its view: recomputed whenever a report or a health
// change could move it (polls, the breaker, removal), not for every routed request.
void ReplicaPool::refresh_version_order_locked() {
  const std::map<std::string, uint64_t> ranks = version_ranks_locked();
  for (const auto& r : replicas_) {
    if (!r) continue;
    const auto rank = ranks.find(r->view.weight_version);
    r->view.weight_version_order = rank != ranks.end() ? rank->second : 0;
  }
}

std::vector<ReplicaView> ReplicaPool::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<ReplicaView> out;
  const Clock::TimePoint now = clock_.now();
  for (const auto& r : replicas_) {
    if (r) out.push_back(view_locked(*r, now));
  }
  return out;
}

std::optional<ReplicaView> ReplicaPool::get(uint32_t index) const {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return std::nullopt;
  ReplicaView v = view_locked(*replicas_[index], clock_.now());
  v.healthy = replicas_[index]->view.healthy;  // as before: the breaker is the proxy's business
  return v;
}

void ReplicaPool::begin_request(uint32_t index, std::shared_ptr<http::Cancellation> cancellation,
                                int64_t prompt_bytes, int64_t prefill_tokens) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  Replica& r = *replicas_[index];
  ++r.view.in_flight;
  r.view.in_flight_prompt_bytes += prompt_bytes;
  r.view.pending_prefill_tokens += prefill_tokens;
  if (cancellation) r.exchanges.insert(std::move(cancellation));
}

void ReplicaPool::prefill_started(uint32_t index, int64_t prefill_tokens) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  replicas_[index]->view.pending_prefill_tokens -= prefill_tokens;
}

void ReplicaPool::end_request(uint32_t index, bool ok,
                              const std::shared_ptr<http::Cancellation>& cancellation,
                              int64_t prompt_bytes, int64_t prefill_tokens) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  Replica& r = *replicas_[index];
  --r.view.in_flight;
  r.view.in_flight_prompt_bytes -= prompt_bytes;
  r.view.pending_prefill_tokens -= prefill_tokens;
  if (cancellation) r.exchanges.erase(cancellation);
  if (ok) {
    r.consecutive_failures = 0;
    return;
  }
  if (++r.consecutive_failures >= config_.failures_to_open) {
    r.open_until = clock_.now() + config_.open_for;
    // The breaker opened: the replica leaves routing, and the index (else its stale entries
    // would keep drawing prefix matches to it the moment the breaker closes).
    if (r.view.healthy) forget_blocks_locked(r);
    r.view.healthy = false;  // until a poll succeeds
    refresh_version_order_locked();
  }
}

void ReplicaPool::poll(Replica& r, uint64_t round) {
  ProbeConfig pc;
  pc.timeout = config_.poll_timeout;
  pc.max_body_bytes = config_.max_probe_body_bytes;
  pc.default_block_size = config_.default_block_size;
  pc.headers = replica_auth_headers(config_.replica_api_key);
  // Detect at start and on reconnect: what comes back on the address may be another engine.
  ProbeResult p = r.probe.run(client_, r.view.host, r.view.port, pc, !r.detected);
  std::unique_lock lock(mu_);
  if (p.identity) {
    if (r.view.kind != p.kind && r.view.healthy) forget_blocks_locked(r);  // another engine
    r.view.kind = p.kind;
    r.view.models = std::move(p.models);
    r.view.max_model_len = p.max_model_len;
    r.view.hash_model = std::move(p.hash_model);
    r.view.block_size = p.block_size;
    r.view.replica_id =
        p.replica_id.empty() ? r.view.host + ":" + std::to_string(r.view.port) : p.replica_id;
    r.view.chat_template = std::move(p.chat_template);
    r.view.completion_prefix = std::move(p.completion_prefix);
    r.view.completion_suffix = std::move(p.completion_suffix);
    r.view.token_table = std::move(p.token_table);
    if (!p.replica_id_error.empty()) {
      std::fprintf(stderr, "router: replica %s: %s\n", r.view.replica_id.c_str(),
                   p.replica_id_error.c_str());
    }
    if (!p.token_table_error.empty()) {
      std::fprintf(stderr,
                   "router: replica %s: token table: %s (token-id prompts routed "
                   "without prefix affinity)\n",
                   r.view.replica_id.c_str(), p.token_table_error.c_str());
    }
    // A template this router cannot render: route by the canonical rendering (only the hit
    // estimate suffers), and say so.
    if (!p.chat_template_error.empty()) {
      std::fprintf(stderr, "router: replica %s: chat template: %s\n", r.view.replica_id.c_str(),
                   p.chat_template_error.c_str());
    }
  }
  r.view.error = p.error;
  if (p.healthy) {
    r.detected = true;
    r.failed_polls = 0;
    r.view.load_reported = p.load.has_value();
    const ReplicaLoad load = p.load.value_or(ReplicaLoad{});
    r.view.kv_usage = load.kv_usage;
    r.view.weight_version = load.weight_version;
    r.view.weight_loaded_at_ms = load.weight_loaded_at_ms;
    r.view.paused = load.paused;
    if (!load.weight_version.empty()) {
      version_order_.emplace(load.weight_version, version_order_.size() + 1);
    }
    if (load.kv_capacity_tokens && load.kv_capacity_tokens != r.view.kv_capacity_tokens) {
      r.view.kv_capacity_tokens = load.kv_capacity_tokens;
      set_approx_capacity_locked(r);
    }
    r.view.load_error = p.load_error;
    apply_load_locked(r, load, round, !r.view.healthy);
    if (clock_.now() >= r.open_until) r.view.healthy = true;
    refresh_version_order_locked();
    return;
  }
  r.detected = false;
  // It went away: what it held is gone from routing until its next snapshot.
  if (r.view.healthy) forget_blocks_locked(r);
  r.view.healthy = false;
  refresh_version_order_locked();
  if (++r.failed_polls < config_.failed_polls_to_dead) return;
  // Dead (stopped, or stalled like a process under SIGSTOP): its exchanges would wait for their
  // timeouts; they end now.
  const std::vector<std::shared_ptr<http::Cancellation>> dead_exchanges(r.exchanges.begin(),
                                                                        r.exchanges.end());
  const std::string why = "replica " + r.view.replica_id + " stopped answering health checks";
  lock.unlock();
  for (const auto& c : dead_exchanges)
    c->cancel(why);
}

// Its KV capacity in router blocks (bytes): a foreign replica's approximate entries are bounded
// by what it can hold, so the index forgets about as fast as the replica evicts.
void ReplicaPool::set_approx_capacity_locked(const Replica& r) {
  if (!config_.derive_approx_capacity || !r.view.kv_capacity_tokens) return;
  const double blocks = static_cast<double>(*r.view.kv_capacity_tokens) *
                        config_.approx_bytes_per_token / std::max(1, r.view.block_size);
  std::lock_guard index_lock(indexes_.mu);  // lock order: pool, then index
  indexes_.approx.set_capacity(r.view.index, static_cast<size_t>(std::clamp(blocks, 1.0, 1e12)));
}

void ReplicaPool::poll_now() {
  std::lock_guard round_lock(poll_mu_);  // one round at a time: a probe serves one poll
  const uint64_t round = ++rounds_started_;
  std::vector<std::shared_ptr<Replica>> rs;
  {
    std::lock_guard lock(mu_);
    for (auto& r : replicas_)
      if (r) rs.push_back(r);
  }
  // In parallel: a replica that stalls costs its own poll_timeout, not every other replica's.
  std::vector<std::thread> polls;
  for (size_t i = 1; i < rs.size(); ++i)
    polls.emplace_back([this, r = rs[i], round] { poll(*r, round); });
  if (!rs.empty()) poll(*rs.front(), round);
  for (std::thread& t : polls)
    t.join();
  {
    std::lock_guard lock(mu_);
    adapt_work_horizon_locked();
  }
  for (auto& r : rs) {
    bool want = false;
    {
      std::lock_guard lock(mu_);
      // Only kvcascade replicas publish KV events; the others are routed approximately.
      want = r->view.healthy && r->view.kind == ReplicaKind::kKvcascade && !r->subscribing &&
             clock_.now() >= r->next_subscribe && !r->removed;
      if (want) r->subscribing = true;
    }
    if (want) subscribe(r->view.index);
  }
  ++poll_rounds_;  // every round, background or called
}

// Streams /v1/kv_events into the index. The first batch is a snapshot: it replaces whatever the
// index held for the replica. A gap in sequence numbers or a broken stream resubscribes (with
// backoff), which brings a fresh snapshot.
void ReplicaPool::subscribe(uint32_t index) {
  std::shared_ptr<Replica> r;
  auto cancellation = std::make_shared<http::Cancellation>();
  uint64_t generation = 0;
  {
    std::lock_guard lock(mu_);
    if (index >= replicas_.size() || !replicas_[index]) return;
    r = replicas_[index];
    // A poll_now() from another thread racing the destructor (or a removal): no new feed.
    if (stopping_ || r->removed) {
      r->subscribing = false;
      return;
    }
    r->parser = std::make_unique<http::SseParser>(config_.max_kv_event_bytes);
    r->expected_seq = 0;
    r->subscription = cancellation;
    generation = r->index_generation.load();
  }
  auto status = std::make_shared<int>(0);
  http::StreamOptions options;
  options.cancellation = cancellation;
  client_.stream(
      r->view.host, r->view.port, "GET", "/v1/kv_events?queued=1&work=1", "",
      replica_auth_headers(config_.replica_api_key),
      [status](int s, const http::Headers&) { *status = s; },
      [this, life = lifetime_, r, index, status, generation](std::string_view bytes) {
        std::shared_lock alive(life->mu);
        if (!life->alive || *status != 200 || r->removed) return false;
        auto events = r->parser->feed(bytes);
        if (!events.ok()) return false;
        for (const http::SseEvent& e : *events) {
          auto batch = decode_kv_event_batch(e.data);
          if (!batch.ok()) return false;
          bool gap = false;
          {
            std::lock_guard lock(mu_);
            if (r->index_generation.load() != generation) return false;
            gap = batch->seq != r->expected_seq;
            if (!gap) {
              ++r->expected_seq;
              r->view.exact = true;
              r->backoff = config_.resubscribe_backoff_min;
            }
          }
          if (gap) {  // missed events: resubscribe, for a snapshot
            note_resync(*r, "sequence_gap");
            return false;
          }
          bool refused = false;
          std::vector<const KvWork*> work;
          {
            std::lock_guard lock(indexes_.mu);
            if (r->index_generation.load() != generation) return false;  // forgotten meanwhile
            if (batch->snapshot) indexes_.exact.clear(index);
            for (const KvEvent& ev : batch->events) {
              // An event the index refuses (a parent it does not know) means the index no
              // longer mirrors the replica: drop the feed, and the next one starts with a
              // snapshot. Applying the rest would build on a wrong tree.
              if (!indexes_.exact.apply(index, ev).ok()) {
                refused = true;
                break;
              }
              // What the replica evicts or loses is not held there any more, however recently
              // this router sent it.
              if (const auto* removed = std::get_if<KvRemoved>(&ev)) {
                indexes_.routed.remove(index, removed->hashes);
              } else if (std::holds_alternative<KvCleared>(ev)) {
                indexes_.routed.clear(index);
              } else if (const auto* queued = std::get_if<KvQueued>(&ev)) {
                indexes_.note_queued_locked(index, *queued);
              } else if (const auto* w = std::get_if<KvWork>(&ev)) {
                work.push_back(w);
              }
            }
          }
          if (refused) {
            note_resync(*r, "refused_event");
            return false;
          }
          if (!work.empty()) {  // lock order: pool, then index
            // Announcements made while no feed was open are lost; the next report holds them.
            std::lock_guard lock(mu_);
            for (const KvWork* w : work)
              note_announced_work_locked(*r, *w);
          }
        }
        return true;
      },
      [this, life = lifetime_, r, cancellation](Status) {
        std::shared_lock alive(life->mu);
        if (!life->alive) return;  // the pool is gone
        std::lock_guard lock(mu_);
        if (r->subscription == cancellation) r->subscription.reset();
        r->subscribing = false;
        r->view.exact = false;
        r->next_subscribe = clock_.now() + r->backoff;
        r->backoff = std::min(r->backoff * 2, config_.resubscribe_backoff_max);
      },
      std::move(options));
}

void ReplicaPool::note_resync(Replica& r, const char* reason) {
  std::string id;
  {
    std::lock_guard lock(mu_);
    ++r.view.kv_event_resyncs;
    id = r.view.replica_id;
  }
  if (config_.on_resync) config_.on_resync(id, reason);
}

void ReplicaPool::start() {
  thread_ = std::thread([this] { run(); });
}

void ReplicaPool::run() {
  while (true) {
    poll_now();
    auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(config_.poll_interval);
    if (config_.poll_phase.count() >= 0 && config_.poll_interval.count() > 0) {
      // The next multiple of the interval on the system clock, plus the phase.
      const auto now = std::chrono::system_clock::now().time_since_epoch();
      const auto period =
          std::chrono::duration_cast<std::chrono::nanoseconds>(config_.poll_interval);
      const auto since = std::chrono::duration_cast<std::chrono::nanoseconds>(now) % period;
      const auto phase =
          std::chrono::duration_cast<std::chrono::nanoseconds>(config_.poll_phase) % period;
      wait = period - since + phase;
      if (wait > period) wait -= period;
    }
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, wait, [&] { return stopping_; })) return;
  }
}

}  // namespace kvc
