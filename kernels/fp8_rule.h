// The FP8 rule shared by the CPU twins (kernels/cpu/fp8.h) and the CUDA kernels
// (kernels/cuda/fp8.h): the E4M3 format (OCP "fn": 1 sign, 4 exponent bits of bias 7, 3 mantissa
// bits, no infinities, one NaN per sign, largest finite ±448), how a float is rounded to it, and
// how a row of values is scaled into its range.
//
// Rounding: to nearest, ties to even, saturating to ±448 (also ±inf: the device's
// __NV_SATFINITE conversion), NaN to NaN. Scaling (per row of a weight matrix: per output
// channel; per row of an activation: per token): scale = max|x| / 448 (1 when the row is all zero
// or its maximum is not finite), code = e4m3(x * (1 / scale)), value = decode(code) * scale. Both
// sides compute 1 / scale and x * (1 / scale) in IEEE single precision, so the same inputs give
// the same codes on the CPU and the device.
//
// The FP8 KV cache (--kv-cache-dtype fp8) scales by a fixed factor instead: one for K and one for
// V per layer (1.0 unless a checkpoint gives them), code = e4m3(x * (1 / scale)), value =
// decode(code) * scale. Keys and values past +-448 x scale saturate.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define KVC_FP8_FN __host__ __device__ inline
#else
#define KVC_FP8_FN inline
#endif

namespace kvc::kernels::fp8 {

inline constexpr float kE4M3Max = 448.0f;

KVC_FP8_FN float row_scale(float absmax) {
  return absmax > 0.0f && absmax <= 3.402823466e38f ? absmax / kE4M3Max : 1.0f;
}

// The value of an E4M3 code.
inline float e4m3_to_float(uint8_t code) {
  const float sign = (code & 0x80) != 0 ? -1.0f : 1.0f;
  const int e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -9);
  return sign * std::ldexp(static_cast<float>(8 + m), e - 10);
}

// x rounded to E4M3 (nearest, ties to even, saturating), as its code.
inline uint8_t e4m3_from_float(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= kE4M3Max) return sign | 0x7E;
  int e2 = 0;
  (void)std::frexp(a, &e2);                   // a = f * 2^e2, f in [0.5, 1)
  const int exp = e2 - 1 < -6 ? -6 : e2 - 1;  // floor(log2 a), at least the subnormal exponent
  // 8 steps per binade: a / step is exact (a power of two), nearbyint rounds half to even.
  const float steps = std::nearbyint(std::ldexp(a, 3 - exp));
  if (steps == 0.0f) return sign;
  const int s = static_cast<int>(steps);  // 1..16: 16 carries into the next binade
  if (exp == -6 && s < 8) return sign | static_cast<uint8_t>(s);  // subnormal
  const int e = s == 16 ? exp + 1 : exp, m = s == 16 ? 0 : s - 8;
  return sign | static_cast<uint8_t>(((e + 7) << 3) | m);
}

}  // namespace kvc::kernels::fp8
