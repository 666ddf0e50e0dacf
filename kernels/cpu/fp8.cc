#include "kernels/cpu/fp8.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/parallel.h"
#include "kernels/fp8_rule.h"

namespace kvc::kernels::cpu {

namespace {

float row_absmax(const float* x, int64_t dim) {
  float m = 0.0f;
  for (int64_t i = 0; i < dim; ++i)
    m = std::fmax(m, std::fabs(x[i]));  // fmax ignores NaN, as the device's max does
  return m;
}

}  // namespace

void quantize_rows_fp8(const float* x, int64_t rows, int64_t dim, uint8_t* q, float* scales) {
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      const float scale = fp8::row_scale(row_absmax(xr, dim));
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < dim; ++i)
        q[r * dim + i] = fp8::e4m3_from_float(xr[i] * inv);
      scales[r] = scale;
    }
  });
}

void dequantize_rows_fp8(const uint8_t* q, const float* scales, int64_t rows, int64_t dim,
                         float* x) {
  float table[256];
  for (int c = 0; c < 256; ++c)
    table[c] = fp8::e4m3_to_float(static_cast<uint8_t>(c));
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t i = 0; i < dim; ++i)
        x[r * dim + i] = table[q[r * dim + i]] * scales[r];
    }
  });
}

void fake_quantize_rows_fp8(float* x, int64_t rows, int64_t dim) {
  float table[256];
  for (int c = 0; c < 256; ++c)
    table[c] = fp8::e4m3_to_float(static_cast<uint8_t>(c));
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* xr = x + r * dim;
      const float scale = fp8::row_scale(row_absmax(xr, dim));
      const float inv = 1.0f / scale;
      for (int64_t i = 0; i < dim; ++i)
        xr[i] = table[fp8::e4m3_from_float(xr[i] * inv)] * scale;
    }
  });
}

void fake_quantize_scaled_fp8(float* x, int64_t n, float scale) {
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i)
    x[i] = fp8::e4m3_to_float(fp8::e4m3_from_float(x[i] * inv)) * scale;
}

}  // namespace kvc::kernels::cpu
