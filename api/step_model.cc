#include "api/step_model.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace kvc {

std::optional<double> uncertain_seconds_per_work_token(const StepModel& m) {
  constexpr int64_t kMinSteps = 100;
  if (m.steps < kMinSteps) return std::nullopt;
  const double s = m.seconds(kReferencePrefillTokens, kReferenceDecodeSeqs, kReferenceKvGb);
  if (!std::isfinite(s) || s <= 0) return std::nullopt;
  return s / (kReferencePrefillTokens + kReferenceDecodeSeqs);
}

std::optional<double> seconds_per_work_token(const StepModel& m) {
  if (!(m.reference_error <= kMaxReferenceError)) return std::nullopt;
  return uncertain_seconds_per_work_token(m);
}

nlohmann::json step_model_json(const StepModel& m) {
  return {{"overhead_s", m.overhead_s},
          {"prefill_token_s", m.prefill_token_s},
          {"decode_seq_s", m.decode_seq_s},
          {"kv_gb_s", m.kv_gb_s},
          {"steps", m.steps},
          {"reference_leverage", m.reference_leverage},
          {"reference_error", m.reference_error}};
}

std::optional<StepModel> read_step_model(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  auto seconds = [&](const char* key) -> std::optional<double> {
    const auto v = j.find(key);
    if (v == j.end() || !v->is_number()) return std::nullopt;
    const double d = v->get<double>();
    return std::isfinite(d) && d >= 0 && d < 1e6 ? std::optional<double>(d) : std::nullopt;
  };
  const auto o = seconds("overhead_s"), p = seconds("prefill_token_s"), d = seconds("decode_seq_s"),
             k = seconds("kv_gb_s");
  if (!o || !p || !d || !k) return std::nullopt;
  const auto steps = j.find("steps");
  StepModel m{*o, *p, *d, *k,
              steps != j.end() && steps->is_number_integer() && steps->get<int64_t>() > 0
                  ? steps->get<int64_t>()
                  : 0};
  // Not reported (an older replica): 0. Not a finite non-negative number: the reference step's
  // prediction is not to be trusted.
  auto reference = [&](const char* key, double& out) {
    if (const auto v = j.find(key); v != j.end()) {
      const double d = v->is_number() ? v->get<double>() : -1;
      out = std::isfinite(d) && d >= 0 ? d : std::numeric_limits<double>::infinity();
    }
  };
  reference("reference_leverage", m.reference_leverage);
  reference("reference_error", m.reference_error);
  return m;
}

}  // namespace kvc
