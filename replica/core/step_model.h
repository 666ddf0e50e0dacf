// A replica's own step model (api/step_model.h), fitted from the steps it runs (after those its
// backend times without running them, Backend::predicted_steps, where it can: the sim), so that
// routers can compare candidates in each replica's own predicted seconds. One linear model, fitted
// by least squares over the steps, each weighted by forget^age (recent steps count most), with
// non-negative coefficients (a term the steps never exercised stays 0). The CPU, CUDA and sim
// backends all publish theirs this way in GET /v1/load ("step_model").
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "api/step_model.h"

namespace kvc {

class StepModelFit {
 public:
  // forget: the weight of a step one step older (0 < forget <= 1); min_steps: no model before.
  explicit StepModelFit(double forget = 0.999, int64_t min_steps = 16);

  void add(double seconds, double prefill_tokens, double decode_seqs, double kv_gb);
  // The fit of the steps so far (nullopt before min_steps), with its reference step's leverage
  // and relative standard error.
  std::optional<StepModel> model() const;
  // What the replica publishes (GET /v1/load): the fit while routers may take its figure
  // (seconds_per_work_token: 100 steps, the reference step's error within kMaxReferenceError),
  // else the last fit they could (the device is no faster or slower for
  // decoding alone a while), else the fit (whose figure routers withhold).
  std::optional<StepModel> published();

 private:
  static constexpr int kTerms = 4;
  double forget_;
  int64_t min_steps_;
  int64_t steps_ = 0;
  std::array<std::array<double, kTerms>, kTerms> xx_{};  // sum of w x x^T
  std::array<double, kTerms> xy_{};                      // sum of w x y
  double yy_ = 0;                                        // sum of w y^2
  std::optional<StepModel> last_trusted_;                // published()
};

}  // namespace kvc
