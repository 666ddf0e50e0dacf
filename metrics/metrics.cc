#include "metrics/metrics.h"

#include <algorithm>

#include <prometheus/text_serializer.h>

namespace kvc::metrics {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

std::string expose(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

prometheus::Histogram::BucketBoundaries token_buckets() {
  prometheus::Histogram::BucketBoundaries b{0};
  for (double v = 16; v <= 131072; v *= 2)
    b.push_back(v);
  return b;
}

prometheus::Histogram::BucketBoundaries count_buckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 1; v <= 4096; v *= 2)
    b.push_back(v);
  return b;
}

prometheus::Histogram::BucketBoundaries seconds_buckets() {
  return {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05,
          0.1,  0.25,   0.5,  1,    2.5,    5,    10,   30,    60};
}

prometheus::Histogram::BucketBoundaries ratio_buckets() {
  return {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1};
}

ReplicaMetrics::ReplicaMetrics(prometheus::Registry& r)
    : responses_total(BuildCounter()
                          .Name("kvcascade_responses_total")
                          .Help("Responses the replica sent, by status class (2xx, 3xx, 4xx, 5xx)")
                          .Register(r)),
      decode_batch_shared_prefix_tokens(
          BuildHistogram()
              .Name("kvcascade_decode_batch_shared_prefix_tokens")
              .Help("Shared-prefix tokens of each candidate cascade level per decode step, kept "
                    "or run flat (kvcascade_cascade_decisions_total counts which)")
              .Register(r)),
      decode_batch_sibling_count(
          BuildHistogram()
              .Name("kvcascade_decode_batch_sibling_count")
              .Help("Sequences sharing each candidate cascade level's prefix per decode step, "
                    "kept or run flat")
              .Register(r)),
      decode_batch_size(BuildHistogram()
                            .Name("kvcascade_decode_batch_size")
                            .Help("Sequences decoded per step")
                            .Register(r)),
      decode_step_seconds(BuildHistogram()
                              .Name("kvcascade_decode_step_seconds")
                              .Help("Engine step time, by attention mode")
                              .Register(r)),
      cascade_decisions_total(BuildCounter()
                                  .Name("kvcascade_cascade_decisions_total")
                                  .Help("Cascade level decisions by outcome and reason")
                                  .Register(r)),
      kv_bytes_read_total(BuildCounter()
                              .Name("kvcascade_kv_bytes_read_total")
                              .Help("KV bytes decode attention read, by kind (prefix or suffix)")
                              .Register(r)),
      kv_bytes_saved_total(BuildCounter()
                               .Name("kvcascade_kv_bytes_saved_total")
                               .Help("KV bytes flat attention would have read beyond cascade")
                               .Register(r)),
      prefix_cache_query_tokens_total(BuildCounter()
                                          .Name("kvcascade_prefix_cache_query_tokens_total")
                                          .Help("Prompt tokens looked up in the prefix cache")
                                          .Register(r)),
      prefix_cache_hit_tokens_total(BuildCounter()
                                        .Name("kvcascade_prefix_cache_hit_tokens_total")
                                        .Help("Prompt tokens found in the prefix cache")
                                        .Register(r)),
      kv_blocks(
          BuildGauge().Name("kvcascade_kv_blocks").Help("KV cache blocks by state").Register(r)),
      kv_host_blocks(BuildGauge()
                         .Name("kvcascade_kv_host_blocks")
                         .Help("KV blocks held in the host memory tier")
                         .Register(r)),
      kv_host_transfers_total(BuildCounter()
                                  .Name("kvcascade_kv_host_transfers_total")
                                  .Help("KV blocks moved between the pool and the host tier, by "
                                        "direction (load or offload)")
                                  .Register(r)),
      preemptions_total(BuildCounter()
                            .Name("kvcascade_preemptions_total")
                            .Help("Sibling groups preempted (whole groups, by recompute)")
                            .Register(r)),
      groups(BuildGauge().Name("kvcascade_groups").Help("Sibling groups by state").Register(r)),
      request_ttft_seconds(BuildHistogram()
                               .Name("kvcascade_request_ttft_seconds")
                               .Help("Time from request to its first token")
                               .Register(r)),
      request_tpot_seconds(BuildHistogram()
                               .Name("kvcascade_request_tpot_seconds")
                               .Help("Time per output token after the first")
                               .Register(r)),
      prompt_tokens_total(BuildCounter()
                              .Name("kvcascade_prompt_tokens_total")
                              .Help("Prompt tokens received")
                              .Register(r)),
      generation_tokens_total(BuildCounter()
                                  .Name("kvcascade_generation_tokens_total")
                                  .Help("Tokens generated")
                                  .Register(r)),
      weight_version_info(BuildGauge()
                              .Name("kvcascade_weight_version_info")
                              .Help("1 for the version of the weights serving now")
                              .Register(r)),
      weight_updates_total(BuildCounter()
                               .Name("kvcascade_weight_updates_total")
                               .Help("Weight updates by result (ok, refused, broken)")
                               .Register(r)),
      weight_update_seconds(BuildHistogram()
                                .Name("kvcascade_weight_update_seconds")
                                .Help("Weight updates: waiting for started requests (drain), "
                                      "then reading and writing the weights (load)")
                                .Register(r)) {}

void ReplicaMetrics::set_weight_version(const std::string& version) {
  std::lock_guard lock(weight_version_mu_);
  // The new series first: a scrape in between sees both, never none.
  prometheus::Gauge& now = weight_version_info.Add({{"version", version}});
  now.Set(1);
  if (weight_version_ != nullptr && weight_version_ != &now) {
    weight_version_info.Remove(weight_version_);
  }
  weight_version_ = &now;
}

RouterMetrics::RouterMetrics(prometheus::Registry& r)
    : router_requests_total(BuildCounter()
                                .Name("kvcascade_router_requests_total")
                                .Help("Requests routed, by replica and route reason")
                                .Register(r)),
      router_prefix_match_ratio(BuildHistogram()
                                    .Name("kvcascade_router_prefix_match_ratio")
                                    .Help("Share of the prompt the chosen replica already held")
                                    .Register(r)),
      router_index_blocks(BuildGauge()
                              .Name("kvcascade_router_index_blocks")
                              .Help("Blocks the router's index holds per replica")
                              .Register(r)),
      router_upstream_errors_total(BuildCounter()
                                       .Name("kvcascade_router_upstream_errors_total")
                                       .Help("Failed proxy attempts, by replica and kind")
                                       .Register(r)),
      router_retries_total(BuildCounter()
                               .Name("kvcascade_router_retries_total")
                               .Help("Requests retried on another replica before the first byte")
                               .Register(r)),
      router_request_seconds(BuildHistogram()
                                 .Name("kvcascade_router_request_seconds")
                                 .Help("Time from request to the end of the proxied response")
                                 .Register(r)),
      router_near_miss_prefixes_total(
          BuildCounter()
              .Name("kvcascade_router_near_miss_prefixes_total")
              .Help("Requests that left a known prefix early (e.g. a timestamp in a system prompt)")
              .Register(r)),
      router_kv_event_resyncs_total(
          BuildCounter()
              .Name("kvcascade_router_kv_event_resyncs_total")
              .Help("KV-event feeds dropped for a fresh snapshot, by replica and reason "
                    "(refused_event: the index refused an event; sequence_gap: events missed)")
              .Register(r)),
      router_responses_total(BuildCounter()
                                 .Name("kvcascade_router_responses_total")
                                 .Help("Responses the router sent, by status class (2xx, 3xx, "
                                       "4xx, 5xx): its own refusals and relayed answers")
                                 .Register(r)),
      // Unlabelled series exist from the start at zero (labelled ones appear with their replica).
      router_prefix_match_ratio_all(router_prefix_match_ratio.Add({}, ratio_buckets())),
      router_request_seconds_all(router_request_seconds.Add({}, seconds_buckets())) {
  router_retries_total.Add({});
  router_near_miss_prefixes_total.Add({});
}

namespace {
constexpr const char* kStatusClass[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
}  // namespace

StatusClassCounters::StatusClassCounters(prometheus::Family<prometheus::Counter>& family) {
  for (int i = 0; i < 5; ++i)
    by_class_[i] = &family.Add({{"code", kStatusClass[i]}});
}

void StatusClassCounters::count(int status) {
  by_class_[std::clamp(status / 100, 1, 5) - 1]->Increment();
}

}  // namespace kvc::metrics
