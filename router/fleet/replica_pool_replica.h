// ReplicaPool's per-replica state (replica_pool.cc: health, load, breaker, KV-event feed;
// routed_work.cc: the routed-work signal). Internal to the pool's two files.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "http/sse.h"
#include "router/fleet/replica_pool.h"
#include "router/fleet/replica_probe.h"

namespace kvc {

struct ReplicaPool::Replica {
  ReplicaView view;
  ReplicaProbe probe;     // used by the poller only
  bool detected = false;  // the probe learned the kind since the replica was last unhealthy
  int32_t consecutive_failures = 0;
  int32_t failed_polls = 0;  // in a row
  Clock::TimePoint open_until{};
  // Proxied exchanges in flight that asked to be ended if the replica dies.
  std::unordered_set<std::shared_ptr<http::Cancellation>> exchanges;
  // KV-event subscription.
  bool subscribing = false;
  Clock::TimePoint next_subscribe{};
  std::chrono::milliseconds backoff{};  // PoolConfig::resubscribe_backoff_min at first
  uint64_t expected_seq = 0;
  std::unique_ptr<http::SseParser> parser;
  std::shared_ptr<http::Cancellation> subscription;  // the feed in flight
  // Bumped (under mu_, before the index is cleared) whenever the replica's index entries are
  // dropped: a feed of an older generation applies nothing more.
  std::atomic<uint64_t> index_generation{0};
  std::atomic<bool> removed{false};
  // The routed-work signal (ReplicaView::routed_work), from the replica's load reports.
  std::optional<int64_t> computed_total;      // at the last report; nullopt: none reported
  double computed_decayed = 0;                // computed tokens, decayed to the last report
  std::optional<int64_t> finished_total;      // ended requests, at the last report
  double finished_decayed = 0;                // ...decayed alike
  std::optional<double> busy_total;           // seconds in steps, at the last report
  double busy_decayed = 0, wall_decayed = 0;  // ...and wall seconds, decayed alike
  std::optional<int64_t> steps_total;         // steps run, at the last report
  double steps_decayed = 0;                   // ...decayed alike
  // When the last report's figures were taken: its tick (system clock, so that every router
  // decays them alike), else when it arrived (the pool's clock); seconds.
  double computed_at_s = 0;
  double queued_work = 0;
  struct Sent {
    uint64_t round;  // rounds_started_ when sent: a report of a later round includes it
    double work;
    int64_t sequences;
  };
  std::unordered_map<uint64_t, Sent> unacked;  // this router's sends, by note_routed_work id
  // Work the replica announced queuing (KvWork) after its last report's work_seq, by seq, and
  // their sums (ReplicaView::announced_work). No report with a work_seq yet: none kept.
  std::optional<uint64_t> reported_work_seq;
  struct Announced {
    int64_t tokens;
    int64_t sequences;
  };
  std::map<uint64_t, Announced> announced;
  double announced_work = 0;
  int64_t announced_sequences = 0;
};

}  // namespace kvc
