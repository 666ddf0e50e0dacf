// The step model a replica fits from its own steps (replica/core/step_model.h).
#include "replica/core/step_model.h"

#include <random>

#include <gtest/gtest.h>

namespace kvc {
namespace {

// Steps of a known linear cost with 2% noise: the fit recovers every coefficient.
TEST(StepModelFit, RecoversTheCoefficientsOfNoisySteps) {
  const StepModel truth{0.004, 20e-6, 50e-6, 0.22, 0};
  StepModelFit fit;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> prefill(0, 2048), seqs(1, 256);
  std::uniform_real_distribution<double> kv(0.0, 4.0), noise(0.98, 1.02);
  EXPECT_FALSE(fit.model().has_value());  // no steps yet
  for (int i = 0; i < 2000; ++i) {
    const double p = i % 3 == 0 ? prefill(rng) : 0;  // most steps decode only
    const double s = seqs(rng), g = kv(rng);
    fit.add(truth.seconds(p, s, g) * noise(rng), p, s, g);
  }
  const auto m = fit.model();
  ASSERT_TRUE(m.has_value());
  EXPECT_NEAR(m->overhead_s, truth.overhead_s, 0.1 * truth.overhead_s);
  EXPECT_NEAR(m->prefill_token_s, truth.prefill_token_s, 0.05 * truth.prefill_token_s);
  EXPECT_NEAR(m->decode_seq_s, truth.decode_seq_s, 0.05 * truth.decode_seq_s);
  EXPECT_NEAR(m->kv_gb_s, truth.kv_gb_s, 0.05 * truth.kv_gb_s);
  EXPECT_EQ(m->steps, 2000);
}

// A term the steps never exercised (no prefill at all) stays 0, and a term that would come out
// negative is dropped: coefficients are never negative, and the others still fit.
TEST(StepModelFit, UnexercisedOrNegativeTermsAreZero) {
  StepModelFit fit;
  for (int i = 0; i < 100; ++i) {
    const double s = 1 + i % 50;
    fit.add(0.002 + 1e-4 * s, 0, s, 0);
  }
  auto m = fit.model();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->prefill_token_s, 0);
  EXPECT_EQ(m->kv_gb_s, 0);
  EXPECT_NEAR(m->decode_seq_s, 1e-4, 1e-7);
  EXPECT_NEAR(m->overhead_s, 0.002, 1e-5);

  StepModelFit negative;  // time falls with prefill tokens (noise a fit must not believe)
  for (int i = 0; i < 100; ++i) {
    const double p = (i % 10) * 100;
    negative.add(0.01 - 1e-6 * p, p, 4, 0);
  }
  m = negative.model();
  ASSERT_TRUE(m.has_value());
  EXPECT_GE(m->prefill_token_s, 0);
  EXPECT_GE(m->overhead_s, 0);
  EXPECT_GE(m->decode_seq_s, 0);
}

// Recent steps count most: after the device slows down, the model follows.
TEST(StepModelFit, FollowsAChangeInTheDevice) {
  StepModelFit fit(0.99);
  for (int i = 0; i < 1000; ++i)
    fit.add(0.001 + 1e-5 * (i % 64), 0, i % 64, 0);
  for (int i = 0; i < 1000; ++i)
    fit.add(0.003 + 3e-5 * (i % 64), 0, i % 64, 0);
  const auto m = fit.model();
  ASSERT_TRUE(m.has_value());
  EXPECT_NEAR(m->decode_seq_s, 3e-5, 1e-6);
  EXPECT_NEAR(m->overhead_s, 0.003, 1e-4);
}

}  // namespace
}  // namespace kvc
