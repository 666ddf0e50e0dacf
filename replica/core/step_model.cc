#include "replica/core/step_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace kvc {

StepModelFit::StepModelFit(double forget, int64_t min_steps)
    : forget_(std::clamp(forget, 1e-6, 1.0)), min_steps_(std::max<int64_t>(min_steps, 1)) {}

void StepModelFit::add(double seconds, double prefill_tokens, double decode_seqs, double kv_gb) {
  if (!std::isfinite(seconds) || seconds < 0) return;
  const std::array<double, kTerms> x = {1.0, prefill_tokens, decode_seqs, kv_gb};
  for (int i = 0; i < kTerms; ++i) {
    for (int j = 0; j < kTerms; ++j)
      xx_[i][j] = forget_ * xx_[i][j] + x[i] * x[j];
    xy_[i] = forget_ * xy_[i] + x[i] * seconds;
  }
  yy_ = forget_ * yy_ + seconds * seconds;
  ++steps_;
}

namespace {

// Solves the normal equations restricted to the terms in `on` (Gaussian elimination with partial
// pivoting, a small ridge for terms the steps barely exercised); the others are 0.
template <size_t N>
std::array<double, N> solve(const std::array<std::array<double, N>, N>& a,
                            const std::array<double, N>& b, const std::array<bool, N>& on) {
  std::array<int, N> idx{};
  int n = 0;
  for (int i = 0; i < static_cast<int>(N); ++i)
    if (on[i]) idx[n++] = i;
  std::array<std::array<double, N + 1>, N> m{};
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c)
      m[r][c] = a[idx[r]][idx[c]];
    m[r][r] += 1e-12 * (1.0 + std::fabs(a[idx[r]][idx[r]]));
    m[r][n] = b[idx[r]];
  }
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(m[r][c]) > std::fabs(m[p][c])) p = r;
    std::swap(m[c], m[p]);
    if (std::fabs(m[c][c]) < 1e-300) continue;
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (int k = c; k <= n; ++k)
        m[r][k] -= f * m[c][k];
    }
  }
  std::array<double, N> out{};
  for (int r = 0; r < n; ++r)
    out[idx[r]] = std::fabs(m[r][r]) < 1e-300 ? 0.0 : m[r][n] / m[r][r];
  return out;
}

}  // namespace

std::optional<StepModel> StepModelFit::model() const {
  constexpr double kMinJitter = 0.05;
  if (steps_ < min_steps_) return std::nullopt;
  // Non-negative least squares by elimination: a term whose coefficient comes out negative (the
  // steps cannot tell it apart from the others, or never exercised it) is dropped, and the rest
  // refitted. A term never exercised (its sum of squares ~0) is off from the start.
  std::array<bool, kTerms> on{};
  for (int i = 0; i < kTerms; ++i)
    on[i] = xx_[i][i] > 1e-12 * std::max(xx_[0][0], 1e-300);
  std::array<double, kTerms> beta{};
  for (int round = 0; round < kTerms; ++round) {
    beta = solve(xx_, xy_, on);
    int worst = -1;
    for (int i = 0; i < kTerms; ++i)
      if (on[i] && beta[i] < 0 && (worst < 0 || beta[i] < beta[worst])) worst = i;
    if (worst < 0) break;
    on[worst] = false;
    beta[worst] = 0;
  }
  StepModel m;
  // The reference step's leverage over every term (what the steps exercised, not what the
  // non-negative fit kept): x' (X'WX)^-1 x times the steps' weight (api/step_model.h). A term the
  // steps never exercised leaves the matrix singular but for solve()'s ridge: huge.
  const std::array<double, kTerms> ref = {1.0, kReferencePrefillTokens, kReferenceDecodeSeqs,
                                          kReferenceKvGb};
  std::array<bool, kTerms> all{};
  all.fill(true);
  const std::array<double, kTerms> z = solve(xx_, ref, all);
  double leverage = 0;
  for (int i = 0; i < kTerms; ++i)
    leverage += ref[i] * z[i];
  leverage *= xx_[0][0];
  m.reference_leverage =
      std::isfinite(leverage) && leverage >= 0 ? leverage : std::numeric_limits<double>::infinity();
  m.overhead_s = std::max(beta[0], 0.0);
  m.prefill_token_s = std::max(beta[1], 0.0);
  m.decode_seq_s = std::max(beta[2], 0.0);
  m.kv_gb_s = std::max(beta[3], 0.0);
  m.steps = steps_;
  // The reference step's standard error, relative to the replica's mean step (not to the
  // prediction itself: a fit that puts the reference step too high would shrink its own error):
  // the steps' residual variance (weighted, over the weight less the terms kept; at least that
  // of a 5% jitter of the mean step, so that steps a model fits exactly still say how far they
  // reach) times x' (X'WX)^-1 x.
  const std::array<double, kTerms> fitted = {m.overhead_s, m.prefill_token_s, m.decode_seq_s,
                                             m.kv_gb_s};
  double rss = yy_, kept = 0;
  for (int i = 0; i < kTerms; ++i) {
    rss -= 2 * fitted[i] * xy_[i];
    for (int j = 0; j < kTerms; ++j)
      rss += fitted[i] * fitted[j] * xx_[i][j];
    kept += on[i] ? 1 : 0;
  }
  const double mean_step = xy_[0] / xx_[0][0];
  const double variance = std::max(std::max(rss, 0.0) / std::max(xx_[0][0] - kept, 1.0),
                                   kMinJitter * kMinJitter * mean_step * mean_step);
  const double error = std::sqrt(variance * m.reference_leverage / xx_[0][0]) / mean_step;
  m.reference_error =
      std::isfinite(error) && error >= 0 ? error : std::numeric_limits<double>::infinity();
  return m;
}

std::optional<StepModel> StepModelFit::published() {
  std::optional<StepModel> m = model();
  if (!m) return m;
  if (seconds_per_work_token(*m)) {
    last_trusted_ = m;
    return m;
  }
  return last_trusted_ ? last_trusted_ : m;
}

}  // namespace kvc
