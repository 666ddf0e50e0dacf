// A replica's step time as it fitted it from the steps it ran (replica/core/step_model.h does the
// fitting), and its JSON form in GET /v1/load ("step_model"), which routers read:
//   seconds = overhead + prefill_token x prefill tokens + decode_seq x decode sequences
//             + kv_gb x GB of KV the step's attention reads.
#pragma once

#include <cstdint>
#include <optional>

#include <nlohmann/json_fwd.hpp>

namespace kvc {

struct StepModel {
  double overhead_s = 0;       // a step's fixed cost (launches, weights read once per step)
  double prefill_token_s = 0;  // per prefill token
  double decode_seq_s = 0;     // per decode sequence
  double kv_gb_s = 0;          // per GB of KV read by attention
  int64_t steps = 0;           // steps fitted so far

  double seconds(double prefill_tokens, double decode_seqs, double kv_gb) const {
    return overhead_s + prefill_token_s * prefill_tokens + decode_seq_s * decode_seqs +
           kv_gb_s * kv_gb;
  }
};

// Seconds per token of work (a prefill token or a decode row) of a reference step that is the
// same for every replica: a 256-token prefill chunk beside 16 decoding sequences reading 0.25 GB
// of KV. Routers compare replicas by it (KvCascadePolicyConfig::costs_by_step_model): a replica
// whose model gives twice the time is twice as slow. Few decode rows: the fit tells the fixed
// cost and the prefill token's apart well, the decode row's and the KV's poorly (more rows read
// more KV); on the A10G sim the figure varied +-14% between replicas after 100 steps, and up to
// 3x before. nullopt: fewer than 100 steps fitted, or a model with no terms.
std::optional<double> seconds_per_work_token(const StepModel& m);

nlohmann::json step_model_json(const StepModel& m);
// nullopt unless `j` is an object whose four terms are finite, non-negative and under 1e6 s.
std::optional<StepModel> read_step_model(const nlohmann::json& j);

}  // namespace kvc
