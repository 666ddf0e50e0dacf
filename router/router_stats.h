// The router's counters, each counted in one place: a note_* call updates the plain count
// (/router/state, tests) and, when the router has metrics, its Prometheus series.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "metrics/metrics.h"

namespace kvc {

class RouterStats {
 public:
  explicit RouterStats(metrics::RouterMetrics* metrics);  // may be null

  void note_request() { ++requests_; }
  void note_retry();
  void note_near_miss();
  // A request (or a retry of it) sent to `replica` for `reason` (router_requests_total).
  void note_routed(const std::string& replica, const std::string& reason);
  // kind: connect, status, timeout (no answer in time once sent) or midstream
  // (router_upstream_errors_total).
  void note_upstream_error(const std::string& replica, const char* kind);
  // router_upstream_errors_total's series of `replica` for each of those kinds, at 0 where it
  // had none: a fleet that has had no error shows zeros, not no series (the dashboard's panel).
  void add_upstream_error_series(const std::string& replica);
  // A replica's KV-event feed dropped for a fresh snapshot (router_kv_event_resyncs_total).
  void note_kv_resync(const std::string& replica, const char* reason);

  int64_t requests() const { return requests_.load(); }
  int64_t retries() const { return retries_.load(); }
  int64_t near_misses() const { return near_misses_.load(); }
  int64_t upstream_errors() const { return upstream_errors_.load(); }
  // Every count above and the routed ones by (replica, reason), for /router/state.
  void to_json(nlohmann::json& out) const;

 private:
  metrics::RouterMetrics* metrics_;
  prometheus::Counter* retries_counter_ = nullptr;
  prometheus::Counter* near_miss_counter_ = nullptr;
  std::atomic<int64_t> requests_{0}, retries_{0}, near_misses_{0}, upstream_errors_{0},
      kv_resyncs_{0};
  mutable std::mutex mu_;
  struct Routed {
    int64_t count = 0;
    prometheus::Counter* counter = nullptr;  // looked up once: Family::Add hashes a label map
  };
  std::map<std::pair<std::string, std::string>, Routed> routed_;  // (replica id, reason); mu_
};

}  // namespace kvc
