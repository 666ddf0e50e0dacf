#include "router/router_stats.h"

#include <nlohmann/json.hpp>

namespace kvc {

RouterStats::RouterStats(metrics::RouterMetrics* metrics) : metrics_(metrics) {
  if (metrics_ != nullptr) {
    retries_counter_ = &metrics_->router_retries_total.Add({});
    near_miss_counter_ = &metrics_->router_near_miss_prefixes_total.Add({});
  }
}

void RouterStats::note_retry() {
  ++retries_;
  if (retries_counter_ != nullptr) retries_counter_->Increment();
}

void RouterStats::note_near_miss() {
  ++near_misses_;
  if (near_miss_counter_ != nullptr) near_miss_counter_->Increment();
}

void RouterStats::note_routed(const std::string& replica, const std::string& reason) {
  prometheus::Counter* counter = nullptr;
  {
    std::lock_guard lock(mu_);
    Routed& r = routed_[{replica, reason}];
    ++r.count;
    if (metrics_ != nullptr && r.counter == nullptr) {
      r.counter = &metrics_->router_requests_total.Add({{"replica", replica}, {"reason", reason}});
    }
    counter = r.counter;
  }
  if (counter != nullptr) counter->Increment();
}

void RouterStats::note_upstream_error(const std::string& replica, const char* kind) {
  ++upstream_errors_;
  if (metrics_ != nullptr) {
    metrics_->router_upstream_errors_total.Add({{"replica", replica}, {"kind", kind}}).Increment();
  }
}

void RouterStats::add_upstream_error_series(const std::string& replica) {
  if (metrics_ == nullptr) return;
  // Every kind note_upstream_error is given (proxy.cc); Add leaves an existing series as it is.
  for (const char* kind : {"connect", "status", "timeout", "midstream"}) {
    metrics_->router_upstream_errors_total.Add({{"replica", replica}, {"kind", kind}});
  }
}

void RouterStats::note_kv_resync(const std::string& replica, const char* reason) {
  ++kv_resyncs_;
  if (metrics_ != nullptr) {
    metrics_->router_kv_event_resyncs_total.Add({{"replica", replica}, {"reason", reason}})
        .Increment();
  }
}

void RouterStats::to_json(nlohmann::json& out) const {
  nlohmann::json routed = nlohmann::json::array();
  {
    std::lock_guard lock(mu_);
    for (const auto& [key, r] : routed_) {
      routed.push_back({{"replica", key.first}, {"reason", key.second}, {"count", r.count}});
    }
  }
  out["requests"] = requests();
  out["retries"] = retries();
  out["upstream_errors"] = upstream_errors();
  out["near_misses"] = near_misses();
  out["kv_event_resyncs"] = kv_resyncs_.load();
  out["routed"] = std::move(routed);
}

}  // namespace kvc
