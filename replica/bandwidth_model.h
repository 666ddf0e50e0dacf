// The seed's bandwidth arithmetic of a decode step (shared-prefix-kv-caching.txt, "The arithmetic
// of a decode step"): decode is memory-bound, so a step costs the bytes it must move. Used by
// `kvcascade plan`, by the cascade planner's cost model, and by the kv_bytes metrics.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "replica/model_config.h"

namespace kvc {

// A decode batch of `groups` sibling groups of `siblings` sequences each; every sequence holds the
// group's `prefix_tokens` shared prompt and `suffix_tokens` private tokens.
struct DecodeWorkload {
  int64_t groups = 1;
  int64_t siblings = 1;
  int64_t prefix_tokens = 0;
  int64_t suffix_tokens = 0;
  int64_t batch() const { return groups * siblings; }
};

struct Hardware {
  double bandwidth_bytes_per_s = 3.35e12;  // the seed's H100 figure
  int kv_bytes_per_element = 2;            // fp16 / bf16 KV
  int weight_bytes_per_element = 2;        // bf16 weights
};

struct StepReport {
  int64_t kv_bytes_per_token = 0;
  int64_t prefix_bytes = 0;          // one copy of one group's prefix
  int64_t flat_prefix_bytes = 0;     // per-sequence attention: prefix read batch times
  int64_t cascade_prefix_bytes = 0;  // cascade: once per group
  int64_t suffix_bytes = 0;          // private KV, the same either way
  int64_t weight_bytes = 0;
  double flat_attention_ms = 0, cascade_attention_ms = 0, weights_ms = 0;
  double flat_step_ms = 0, cascade_step_ms = 0, step_gain = 0;
  // Mean gain over a whole generation, suffix growing 1..suffix_tokens (early steps gain more).
  double mean_gain_over_generation = 0;
  // Redundant prefix traffic (what cascade removes) relative to the weight traffic: the seed's
  // test of whether cascade is worth it ("if the prefix term is not comparable to the weights,
  // stop here").
  double redundant_prefix_to_weights = 0;
  bool prefix_term_comparable_to_weights = false;

  int64_t flat_kv_bytes() const { return flat_prefix_bytes + suffix_bytes; }
  int64_t cascade_kv_bytes() const { return cascade_prefix_bytes + suffix_bytes; }
};

StepReport plan_decode_step(const ModelConfig& model, const DecodeWorkload& work,
                            const Hardware& hw);

nlohmann::json to_json(const ModelConfig& model, const DecodeWorkload& work, const Hardware& hw,
                       const StepReport& report);
std::string format_report(const ModelConfig& model, const DecodeWorkload& work, const Hardware& hw,
                          const StepReport& report);

}  // namespace kvc
