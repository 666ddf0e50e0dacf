// Every Prometheus metric of kvcascade, declared once (DESIGN.md "Metrics"; all names start with
// kvcascade_). Registration and exposition use the same structs, so a metric cannot be exposed
// without being declared or declared twice. Depends on prometheus-cpp core only.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace kvc::metrics {

// The text exposition (format 0.0.4) of everything registered.
std::string expose(const prometheus::Registry& registry);
inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Responses by status class: the series "1xx" ... "5xx" of a {code} family, made at zero and
// looked up once, one incremented per response (200 -> "2xx"; a response costs no family
// lookup). Thread-safe.
class StatusClassCounters {
 public:
  explicit StatusClassCounters(prometheus::Family<prometheus::Counter>& family);
  void count(int status);

 private:
  prometheus::Counter* by_class_[5];
};

struct ReplicaMetrics {
  explicit ReplicaMetrics(prometheus::Registry& registry);
  // Every response the replica's server sent, by status class ({code}: "2xx" ... "5xx").
  prometheus::Family<prometheus::Counter>& responses_total;
  StatusClassCounters response_classes{responses_total};
  void count_response(int status) { response_classes.count(status); }

  // Per decode step, per cascade level kept (and per group when flat): shared tokens, siblings.
  prometheus::Family<prometheus::Histogram>& decode_batch_shared_prefix_tokens;
  prometheus::Family<prometheus::Histogram>& decode_batch_sibling_count;
  prometheus::Family<prometheus::Histogram>& decode_batch_size;
  prometheus::Family<prometheus::Histogram>& decode_step_seconds;    // {attention}
  prometheus::Family<prometheus::Counter>& cascade_decisions_total;  // {decision, reason}
  prometheus::Family<prometheus::Counter>& kv_bytes_read_total;      // {kind: prefix|suffix}
  prometheus::Family<prometheus::Counter>& kv_bytes_saved_total;
  prometheus::Family<prometheus::Counter>& prefix_cache_query_tokens_total;
  prometheus::Family<prometheus::Counter>& prefix_cache_hit_tokens_total;
  prometheus::Family<prometheus::Gauge>& kv_blocks;  // {state: used|cached|free}
  // The host tier (--kv-host-memory-gb): blocks held there, and blocks moved ({direction:
  // load|offload}); a load is a prompt block not computed (counted in the hit tokens too).
  prometheus::Family<prometheus::Gauge>& kv_host_blocks;
  prometheus::Family<prometheus::Counter>& kv_host_transfers_total;
  prometheus::Family<prometheus::Counter>& preemptions_total;
  prometheus::Family<prometheus::Gauge>& groups;  // {state: waiting|running}
  prometheus::Family<prometheus::Histogram>& request_ttft_seconds;
  prometheus::Family<prometheus::Histogram>& request_tpot_seconds;
  prometheus::Family<prometheus::Counter>& prompt_tokens_total;
  prometheus::Family<prometheus::Counter>& generation_tokens_total;
  // 1 for the weights serving now ({version}), its only series (an info metric): set through
  // set_weight_version.
  prometheus::Family<prometheus::Gauge>& weight_version_info;
  prometheus::Family<prometheus::Counter>& weight_updates_total;     // {result: ok|refused|broken}
  prometheus::Family<prometheus::Histogram>& weight_update_seconds;  // {phase: drain|load}

  // The weights serving now are `version`: its weight_version_info series at 1, and the series
  // of the version it replaces removed (not kept at 0: an RL run that loads a version per step
  // would otherwise add a series per step, without bound). Thread-safe.
  void set_weight_version(const std::string& version);

 private:
  std::mutex weight_version_mu_;
  prometheus::Gauge* weight_version_ = nullptr;  // the series at 1; null before the first
};

struct RouterMetrics {
  explicit RouterMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& router_requests_total;  // {replica, reason}
  prometheus::Family<prometheus::Histogram>& router_prefix_match_ratio;
  prometheus::Family<prometheus::Gauge>& router_index_blocks;             // {replica}
  prometheus::Family<prometheus::Counter>& router_upstream_errors_total;  // {replica, kind}
  prometheus::Family<prometheus::Counter>& router_retries_total;
  prometheus::Family<prometheus::Histogram>& router_request_seconds;
  prometheus::Family<prometheus::Counter>& router_near_miss_prefixes_total;
  prometheus::Family<prometheus::Counter>& router_kv_event_resyncs_total;  // {replica, reason}
  // Every response the router's server sent, by status class ("2xx" ... "5xx"): what clients
  // got, the router's own refusals and the replicas' relayed answers alike.
  prometheus::Family<prometheus::Counter>& router_responses_total;  // {code}
  StatusClassCounters response_classes{router_responses_total};
  void count_response(int status) { response_classes.count(status); }
  // The unlabelled series of the two histograms above, looked up once (the proxy observes them
  // on every request).
  prometheus::Histogram& router_prefix_match_ratio_all;
  prometheus::Histogram& router_request_seconds_all;
};

// Bucket layouts shared by the declarations above.
prometheus::Histogram::BucketBoundaries token_buckets();    // 0, 16, 32, ... 128K
prometheus::Histogram::BucketBoundaries count_buckets();    // 1, 2, 4, ... 4096
prometheus::Histogram::BucketBoundaries seconds_buckets();  // 100 us ... 60 s
prometheus::Histogram::BucketBoundaries ratio_buckets();    // 0, 0.1, ... 1

}  // namespace kvc::metrics
