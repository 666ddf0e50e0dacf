// The step model a replica fits from its own steps (replica/core/step_model.h).
#include "replica/core/step_model.h"

#include <cmath>
#include <optional>
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

// What routers compare replicas by (api/step_model.h): a model's seconds per token of work at
// one reference step. A device twice as slow in every term gives twice the figure; a fit of
// fewer than 100 steps, or one with no terms, gives none (early fits extrapolate badly).
TEST(StepModelFit, SecondsPerWorkTokenComparesDevicesAtOneReferenceStep) {
  const StepModel fast{0.005, 25e-6, 8e-6, 2.2e-4, 500};
  StepModel slow = fast;
  slow.overhead_s *= 2, slow.prefill_token_s *= 2, slow.decode_seq_s *= 2, slow.kv_gb_s *= 2;
  const auto f = seconds_per_work_token(fast), s = seconds_per_work_token(slow);
  ASSERT_TRUE(f.has_value() && s.has_value());
  EXPECT_NEAR(*s / *f, 2.0, 1e-12);
  // 256 prefill tokens, 16 decode rows, 0.25 GB of KV: (5 ms + 6.4 ms + 0.128 ms + 0.055 ms) /
  // 272 tokens.
  EXPECT_NEAR(*f, (0.005 + 256 * 25e-6 + 16 * 8e-6 + 0.25 * 2.2e-4) / 272, 1e-15);
  StepModel young = fast;
  young.steps = 99;
  EXPECT_FALSE(seconds_per_work_token(young).has_value());
  EXPECT_FALSE(seconds_per_work_token(StepModel{0, 0, 0, 0, 500}).has_value());
}

// The reference step's error is relative to the replica's mean step, not to the prediction
// (which a wrong fit inflates): steps a model fits exactly give the 5% jitter floor,
// 0.05 x sqrt(leverage / weight), whatever the reference step costs.
TEST(StepModelFit, ReferenceErrorIsTheJitterFloorForExactSteps) {
  for (const double overhead : {0.001, 0.02, 0.5}) {  // the reference step 0.03-0.53 s
    const StepModel truth{overhead, 1e-4, 2e-5, 1.6e-3, 0};
    StepModelFit fit;
    constexpr int kSteps = 300;
    double weight = 0, mean = 0;
    for (int i = 0; i < kSteps; ++i) {
      const double p = i % 4 == 0 ? 64.0 * (1 + i % 8) : 0, rows = 1 + i % 24,
                   kv = 0.05 * (1 + i % 13);
      fit.add(truth.seconds(p, rows, kv), p, rows, kv);
      weight = 0.999 * weight + 1;
      mean = 0.999 * mean + truth.seconds(p, rows, kv);
    }
    const auto m = fit.model();
    ASSERT_TRUE(m.has_value());
    EXPECT_NEAR(m->reference_error, 0.05 * std::sqrt(m->reference_leverage / weight),
                1e-6 * m->reference_error)
        << overhead;
    EXPECT_GT(m->seconds(256, 16, 0.25), mean / weight);  // the prediction is not the divisor
  }
}

StepModel truth_with_steps(StepModel m, int64_t steps) {
  m.steps = steps;
  return m;
}

// What a replica publishes: the fit while its figure may be used, else the last fit that could
// be (a device decoding alone a while is no slower), else the fit without a usable figure. The
// engine asks at every step.
TEST(StepModelFit, PublishesTheLastFitWhoseReferenceStepTheStepsTold) {
  const StepModel truth{0.02, 1e-4, 2e-5, 1.6e-3, 0};
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> noise(0.98, 1.02);
  StepModelFit fit;
  std::optional<StepModel> published;
  auto step = [&](double prefill, double rows, double kv) {
    fit.add(truth.seconds(prefill, rows, kv) * noise(rng), prefill, rows, kv);
    published = fit.published();
  };
  auto spread = [&](int steps) {  // 1-24 rows, a chunk every fourth step
    for (int i = 0; i < steps; ++i)
      step(i % 4 == 0 ? 64.0 * (1 + i % 8) : 0, 1 + i % 24, 0.05 * (1 + i % 13));
  };
  spread(400);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->steps, 400);
  EXPECT_LE(published->reference_error, kMaxReferenceError);
  const auto told = seconds_per_work_token(*published);
  ASSERT_TRUE(told.has_value());
  EXPECT_NEAR(*told, *seconds_per_work_token(truth_with_steps(truth, 400)), 0.03 * *told);
  // Then one row a step for a long while, at one context: the fit can no longer tell what 16
  // rows cost, and the last fit that could (from early in this phase) is what goes out.
  for (int i = 0; i < 8000; ++i)
    step(0, 1, 2.0);
  ASSERT_TRUE(fit.model().has_value());
  EXPECT_GT(fit.model()->reference_error, kMaxReferenceError);
  ASSERT_TRUE(published.has_value());
  EXPECT_LT(published->steps, 8400);
  EXPECT_LE(published->reference_error, kMaxReferenceError);
  EXPECT_NEAR(*seconds_per_work_token(*published), *told, 0.03 * *told);
  // Busy again: the fresh fit goes out.
  spread(3000);
  ASSERT_TRUE(published.has_value());
  EXPECT_EQ(published->steps, 11400);

  // Never told (a prompt in chunks of two sizes, then one row a step): the fit goes out, its
  // figure withheld.
  StepModelFit alone;
  for (int i = 0; i < 500; ++i) {
    const double prefill = i < 20 ? (i % 2 ? 512 : 256) : 0, rows = i < 20 ? 0 : 1,
                 kv = i < 20 ? 0 : 2.0 + 1e-4 * i;
    alone.add(truth.seconds(prefill, rows, kv) * noise(rng), prefill, rows, kv);
  }
  const auto lone = alone.published();
  ASSERT_TRUE(lone.has_value());
  EXPECT_EQ(lone->steps, 500);
  EXPECT_GT(lone->reference_error, kMaxReferenceError);
  EXPECT_FALSE(seconds_per_work_token(*lone).has_value());
}

}  // namespace
}  // namespace kvc
