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

nlohmann::json step_model_json(const StepModel& m);
// nullopt unless `j` is an object whose four terms are finite, non-negative and under 1e6 s.
std::optional<StepModel> read_step_model(const nlohmann::json& j);

}  // namespace kvc
