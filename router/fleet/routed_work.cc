// ReplicaPool's routed-work signal (ReplicaView::routed_work): the replicas' reported work, its
// decay horizon and the fleet's mean request, this router's sends until a report holds them, and
// the work the replicas announce (KvWork) until a report holds it. The rest of the pool:
// replica_pool.cc.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "router/fleet/replica_pool.h"
#include "router/fleet/replica_pool_replica.h"

namespace kvc {

double ReplicaPool::routed_work_horizon_s() const {
  std::lock_guard lock(mu_);
  return work_horizon_s_locked();
}

double ReplicaPool::work_horizon_s_locked() const {
  const double base = std::chrono::duration<double>(config_.routed_work_horizon).count();
  return work_horizon_s_ > 0 ? work_horizon_s_ : base;
}

ReplicaPool::FleetWork ReplicaPool::fleet_work_locked() const {
  FleetWork f;
  for (const auto& r : replicas_) {
    if (!r || !r->view.healthy || !r->computed_total || !r->finished_total) continue;
    f.computed += r->computed_decayed;
    f.finished += r->finished_decayed;
    ++f.replicas;
  }
  return f;
}

// PoolConfig::routed_work_requests_per_replica, once per poll round (after every report of the
// round, so routers that read the same reports stretch it alike): the decayed ended requests
// against the target, a tenth of the way per round (a damped step: the sums follow a new horizon
// only as requests end).
void ReplicaPool::adapt_work_horizon_locked() {
  if (config_.routed_work_requests_per_replica <= 0) return;
  const FleetWork f = fleet_work_locked();
  if (f.replicas == 0 || f.finished <= 0) return;
  const double base = std::chrono::duration<double>(config_.routed_work_horizon).count();
  const double most = std::chrono::duration<double>(config_.routed_work_max_horizon).count();
  const double want = config_.routed_work_requests_per_replica * f.replicas / f.finished;
  work_horizon_s_ =
      std::clamp(work_horizon_s_locked() * std::pow(want, 0.1), base, std::max(base, most));
}

std::optional<double> ReplicaPool::fleet_request_work() const {
  std::lock_guard lock(mu_);
  const FleetWork f = fleet_work_locked();
  if (f.finished < config_.min_requests_for_mean) return std::nullopt;
  return f.computed / f.finished;
}

uint64_t ReplicaPool::note_routed_work(uint32_t index, double work, int64_t sequences) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return 0;
  const uint64_t id = next_send_id_++;
  replicas_[index]->unacked[id] = {rounds_started_.load(), work, sequences};
  return id;
}

void ReplicaPool::forget_routed_work(uint32_t index, uint64_t id) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  replicas_[index]->unacked.erase(id);
}

std::string ReplicaPool::route_of(uint64_t id) const {
  return route_prefix_ + std::to_string(id);
}

void ReplicaPool::note_announced_work(uint32_t index, const KvWork& work) {
  std::lock_guard lock(mu_);
  if (index >= replicas_.size() || !replicas_[index]) return;
  note_announced_work_locked(*replicas_[index], work);
}

void ReplicaPool::note_announced_work_locked(Replica& r, const KvWork& work) {
  // No report with a work_seq yet: nothing would ever prune it, and this router's own send
  // (if it is one) stays counted as its own until a report has it.
  if (!r.reported_work_seq) return;
  // This router's own send: the announcement (or the report that holds it) replaces it, so it
  // is never counted twice.
  if (work.route.size() > route_prefix_.size() && work.route.starts_with(route_prefix_)) {
    uint64_t id = 0;
    const char* begin = work.route.data() + route_prefix_.size();
    const char* end = work.route.data() + work.route.size();
    if (auto [p, ec] = std::from_chars(begin, end, id); ec == std::errc() && p == end) {
      r.unacked.erase(id);
    }
  }
  if (work.seq <= *r.reported_work_seq) return;  // held by the last report already
  auto [it, added] =
      r.announced.try_emplace(work.seq, Replica::Announced{work.tokens, work.sequences});
  if (!added) return;  // a repeat (a resubscription's): counted once
  r.announced_work += static_cast<double>(work.tokens);
  r.announced_sequences += work.sequences;
  if (r.announced.size() > kMaxAnnounced) drop_oldest_announced(r);
}

void ReplicaPool::drop_oldest_announced(Replica& r) {
  const Replica::Announced& oldest = r.announced.begin()->second;
  r.announced_work -= static_cast<double>(oldest.tokens);
  r.announced_sequences -= oldest.sequences;
  r.announced.erase(r.announced.begin());
  if (r.announced.empty()) r.announced_work = 0, r.announced_sequences = 0;  // no drift
}

void ReplicaPool::clear_announced(Replica& r) {
  r.announced.clear();
  r.announced_work = 0;
  r.announced_sequences = 0;
}

// A load report with the replica's computed and queued work (ReplicaView::routed_work), from
// the poll of `round`: every send tagged with an earlier round reached the replica before the
// poll was asked, so the report counts it.
void ReplicaPool::note_work_report_locked(Replica& r, const ReplicaLoad& load, uint64_t round,
                                          bool arrived) {
  const double at_s = load.tick_at_ms
                          ? static_cast<double>(*load.tick_at_ms) * 1e-3
                          : std::chrono::duration<double>(clock_.now().time_since_epoch()).count();
  const int64_t total = *load.computed_tokens_total;
  const int64_t finished = load.finished_requests_total.value_or(0);
  if (arrived || !r.computed_total || total < *r.computed_total) {
    // Announcements from before a restart (or a stall) are no measure of what it holds now,
    // and its numbering may have started again.
    clear_announced(r);
    r.reported_work_seq.reset();
    // New to this router, back from a restart or a stall: it starts at the others' mean.
    double sum = 0, sum_finished = 0;
    int n = 0;
    for (const auto& o : replicas_) {
      if (o && o.get() != &r && o->view.healthy && o->computed_total) {
        sum += o->computed_decayed;
        sum_finished += o->finished_decayed;
        ++n;
      }
    }
    r.computed_decayed = n > 0 ? sum / n : 0.0;
    r.finished_decayed = n > 0 ? sum_finished / n : 0.0;
    r.busy_decayed = r.wall_decayed = r.steps_decayed = 0;  // no share until two readings
  } else {
    const double age = at_s - r.computed_at_s;
    const double keep = std::exp(-std::max(age, 0.0) / work_horizon_s_locked());
    r.computed_decayed = r.computed_decayed * keep + static_cast<double>(total - *r.computed_total);
    r.finished_decayed =
        r.finished_decayed * keep +
        static_cast<double>(std::max<int64_t>(0, finished - r.finished_total.value_or(finished)));
    if (load.busy_seconds_total && r.busy_total && age > 0) {
      r.busy_decayed =
          r.busy_decayed * keep + std::max(0.0, *load.busy_seconds_total - *r.busy_total);
      r.wall_decayed = r.wall_decayed * keep + age;
      if (load.steps_total && r.steps_total) {
        r.steps_decayed = r.steps_decayed * keep + static_cast<double>(std::max<int64_t>(
                                                       0, *load.steps_total - *r.steps_total));
      }
    }
  }
  r.busy_total = load.busy_seconds_total;
  r.steps_total = load.steps_total;
  r.computed_total = total;
  r.finished_total = finished;
  r.computed_at_s = at_s;
  r.queued_work = static_cast<double>(load.queued_work_tokens.value_or(0));
  std::erase_if(r.unacked, [&](const auto& e) { return e.second.round < round; });
  // The announcements this report's figures hold leave the count; a report whose seq went back
  // (a restart) holds none of the old ones.
  if (!load.work_seq ||
      (r.reported_work_seq && static_cast<uint64_t>(*load.work_seq) < *r.reported_work_seq)) {
    clear_announced(r);
  }
  if (load.work_seq) {
    r.reported_work_seq = static_cast<uint64_t>(*load.work_seq);
    while (!r.announced.empty() && r.announced.begin()->first <= *r.reported_work_seq)
      drop_oldest_announced(r);
  } else {
    r.reported_work_seq.reset();
  }
}

}  // namespace kvc
