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
  int64_t steps = 0;           // steps fitted so far (a sim's predicted steps included)
  // How far the reference step (below) lies from the steps fitted: x' (X'WX)^-1 x times the
  // steps' weight, i.e. 1 + its squared Mahalanobis distance from their weighted mean. 0: not
  // reported.
  double reference_leverage = 0;
  // The standard error of the reference step's predicted seconds, relative to the replica's
  // mean step (not to the prediction: a fit that puts the reference step too high would shrink
  // its own error): the steps' residual variance (at least a 5% jitter of the mean step's: a sim
  // or a steady device can fit its steps exactly and still not reach the reference step) times
  // the leverage over the steps' weight. A replica that only ever decoded one sequence at a time
  // has no measure of what 16 rows cost: its fit splits the step's fixed cost between the
  // overhead and the decode row at random, and the reference step's prediction with it (on the
  // A10G sim, up to 5.6x the fleet's; such a replica looked slow, was sent less, and kept
  // decoding alone). 0: not reported.
  double reference_error = 0;

  double seconds(double prefill_tokens, double decode_seqs, double kv_gb) const {
    return overhead_s + prefill_token_s * prefill_tokens + decode_seq_s * decode_seqs +
           kv_gb_s * kv_gb;
  }
};

// The reference step that is the same for every replica: a 256-token prefill chunk beside 16
// decoding sequences reading 0.25 GB of KV.
inline constexpr double kReferencePrefillTokens = 256, kReferenceDecodeSeqs = 16,
                        kReferenceKvGb = 0.25;
// The most StepModel::reference_error with which the reference step's prediction is used. On
// the A10G sim's Mooncake replay the replicas' figures within it were 0.91-1.09x their median,
// those at 0.1-0.2 up to 1.3x, those over 0.2 up to 1.7x (a third of them beyond the routers'
// 25% tolerance); on 8 H200 + 8 A10G sim replicas 97% of the H200s' fits and 84% of the A10Gs'
// were within it (bench/results/runs/2026-12-07-s26-leverage). The leverage alone would not do:
// the mixed fleet's H200s reach 1,000-10,000 with fits that are right.
inline constexpr double kMaxReferenceError = 0.1;

// Seconds per token of work (a prefill token or a decode row) of the reference step. Routers
// compare replicas by it (KvCascadePolicyConfig::costs_by_step_model): a replica whose model
// gives twice the time is twice as slow. Few decode rows: the fit tells the fixed cost and the
// prefill token's apart well, the decode row's and the KV's poorly (more rows read more KV); on
// the A10G sim the figure varied +-14% between replicas after 100 steps, up to 3x before, and
// 3.6-5.6x for a replica decoding alone (reference_error).
// nullopt: fewer than 100 steps fitted, a model with no terms, or a reference step too far from
// the steps fitted for their scatter (reference_error over kMaxReferenceError).
std::optional<double> seconds_per_work_token(const StepModel& m);
// The same figure whatever reference_error says (nullopt: fewer than 100 steps, or no terms).
std::optional<double> uncertain_seconds_per_work_token(const StepModel& m);

nlohmann::json step_model_json(const StepModel& m);
// nullopt unless `j` is an object whose four terms are finite, non-negative and under 1e6 s.
std::optional<StepModel> read_step_model(const nlohmann::json& j);

}  // namespace kvc
