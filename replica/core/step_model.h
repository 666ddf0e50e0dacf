// A replica's own step model, fitted from the steps it runs (issue 28 §1: routers compare
// candidates in each replica's own predicted seconds). One linear model for every backend:
//   seconds = overhead + prefill_token x prefill tokens + decode_seq x decode sequences
//             + kv_gb x GB of KV the step's attention reads,
// fitted by least squares over the steps, each weighted by forget^age (recent steps count most),
// with non-negative coefficients (a term the steps never exercised stays 0). The CPU, CUDA and
// sim backends all publish theirs this way in GET /v1/load ("step_model").
#pragma once

#include <array>
#include <cstdint>
#include <optional>

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

class StepModelFit {
 public:
  // forget: the weight of a step one step older (0 < forget <= 1); min_steps: no model before.
  explicit StepModelFit(double forget = 0.999, int64_t min_steps = 16);

  void add(double seconds, double prefill_tokens, double decode_seqs, double kv_gb);
  std::optional<StepModel> model() const;

 private:
  static constexpr int kTerms = 4;
  double forget_;
  int64_t min_steps_;
  int64_t steps_ = 0;
  std::array<std::array<double, kTerms>, kTerms> xx_{};  // sum of w x x^T
  std::array<double, kTerms> xy_{};                      // sum of w x y
};

}  // namespace kvc
