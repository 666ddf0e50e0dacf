// The FP8 rule (kernels/fp8_rule.h) and its CPU twins (kernels/cpu/fp8.h): every E4M3 code
// decodes and re-encodes to itself, rounding is to nearest with ties to even and saturates,
// per-row scaling maps each row's maximum to ±448 and keeps every value within half a step.
#include "kernels/cpu/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/fp8_rule.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using fp8::e4m3_from_float;
using fp8::e4m3_to_float;

TEST(Fp8RuleTest, EveryCodeRoundTrips) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float v = e4m3_to_float(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      ++nans;
      EXPECT_EQ(e4m3_from_float(v) & 0x7F, 0x7F);
      continue;
    }
    EXPECT_EQ(e4m3_from_float(v), c) << "code " << c << " value " << v;
  }
  EXPECT_EQ(nans, 2);  // 0x7F and 0xFF
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));      // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));      // smallest normal
  EXPECT_EQ(e4m3_to_float(0x07), 7 * std::ldexp(1.0f, -9));  // largest subnormal
}

TEST(Fp8RuleTest, RoundsToNearestEvenAndSaturates) {
  // Between consecutive positive codes: below the midpoint rounds down, above rounds up, the
  // midpoint itself to the even code.
  for (int c = 0; c < 0x7E; ++c) {
    const float lo = e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;  // exact: both have few mantissa bits
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, lo)), c);
    EXPECT_EQ(e4m3_from_float(std::nextafter(mid, hi)), c + 1);
    EXPECT_EQ(e4m3_from_float(mid), c % 2 == 0 ? c : c + 1)
        << "tie between " << lo << " and " << hi;
    EXPECT_EQ(e4m3_from_float(-mid), 0x80 | (c % 2 == 0 ? c : c + 1));
  }
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);  // past the largest: saturates (satfinite)
  EXPECT_EQ(e4m3_from_float(1e30f), 0x7E);
  EXPECT_EQ(e4m3_from_float(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(e4m3_from_float(-std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(e4m3_from_float(std::nanf("")), 0x7F);
  EXPECT_EQ(e4m3_from_float(std::ldexp(1.0f, -11)), 0x00);  // under half the smallest
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
}

TEST(Fp8RuleTest, QuantizedRowsStayWithinHalfAStep) {
  std::mt19937 rng(20261202);
  for (int dim : {1, 7, 256, 4096}) {
    const int rows = 9;
    std::vector<float> x = testutil::random_vector(rng, size_t(rows) * dim, 3.0f);
    for (int i = 0; i < dim; ++i)
      x[size_t(3) * dim + i] = 0.0f;               // an all-zero row: scale 1, every code 0
    if (dim > 1) x[size_t(5) * dim + 1] = 1e-30f;  // tiny next to large values
    std::vector<uint8_t> q(x.size(), 0xAA);
    std::vector<float> scales(rows, -1.0f), back(x.size(), testutil::kNaN);
    cpu::quantize_rows_fp8(x.data(), rows, dim, q.data(), scales.data());
    cpu::dequantize_rows_fp8(q.data(), scales.data(), rows, dim, back.data());
    std::vector<float> fake = x;
    cpu::fake_quantize_rows_fp8(fake.data(), rows, dim);
    EXPECT_EQ(fake, back) << "fake quantization is quantize then dequantize";
    for (int r = 0; r < rows; ++r) {
      float absmax = 0;
      for (int i = 0; i < dim; ++i)
        absmax = std::max(absmax, std::fabs(x[size_t(r) * dim + i]));
      ASSERT_EQ(scales[r], fp8::row_scale(absmax));
      if (r == 3) {
        EXPECT_EQ(scales[r], 1.0f);
      }
      bool saw_max = false;
      for (int i = 0; i < dim; ++i) {
        const size_t k = size_t(r) * dim + i;
        saw_max |= (q[k] & 0x7F) == 0x7E;
        // Half a step: 2^-4 of the value in the normal range, 2^-10 of the scale below it.
        const double tol = std::max(std::fabs(x[k]) / 16.0, scales[r] * std::ldexp(1.0, -10));
        EXPECT_LE(std::fabs(double(back[k]) - x[k]), tol * 1.0001) << "row " << r << " i " << i;
      }
      if (r != 3) {
        EXPECT_TRUE(saw_max) << "row " << r << ": its maximum maps to ±448";
      }
    }
  }
}

// The FP8 KV cache's rule: a fixed scale, values rounded to E4M3 steps of it, saturating at
// +-448 x scale; idempotent (a cached value rewritten stays the same).
TEST(Fp8RuleTest, ScaledQuantizationRoundsToStepsOfTheScaleAndSaturates) {
  std::mt19937 rng(7);
  for (const float scale : {1.0f, 0.25f, 3.0f}) {
    std::vector<float> x = testutil::random_vector(rng, 2000, 4.0f);
    x[0] = 500.0f * scale;  // saturates
    x[1] = -1e6f;           // saturates
    x[2] = 0.0f;
    x[3] = 1e-6f * scale;  // below the smallest subnormal step: 0
    std::vector<float> q = x;
    cpu::fake_quantize_scaled_fp8(q.data(), static_cast<int64_t>(q.size()), scale);
    EXPECT_EQ(q[0], 448.0f * scale);
    EXPECT_EQ(q[1], -448.0f * scale);
    EXPECT_EQ(q[2], 0.0f);
    EXPECT_EQ(q[3], 0.0f);
    for (size_t i = 0; i < x.size(); ++i) {
      const float code_value = q[i] / scale;
      ASSERT_EQ(fp8::e4m3_to_float(fp8::e4m3_from_float(code_value)), code_value) << i;
      if (std::fabs(x[i]) < 448.0f * scale) {
        const double tol = std::max(std::fabs(x[i]) / 16.0, scale * std::ldexp(1.0, -10));
        ASSERT_LE(std::fabs(double(q[i]) - x[i]), tol * 1.0001) << i;
      }
    }
    std::vector<float> again = q;
    cpu::fake_quantize_scaled_fp8(again.data(), static_cast<int64_t>(again.size()), scale);
    EXPECT_EQ(again, q);
  }
}

}  // namespace
}  // namespace kvc::kernels
