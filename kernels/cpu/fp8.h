// CPU twins of the FP8 kernels (kernels/cuda/fp8.h): per-row E4M3 quantization by the rule of
// kernels/fp8_rule.h, its inverse, and the two in one step for the CPU backend's FP8 model (whose
// GEMMs then run on the quantized values in float32: the same products the device's FP8 GEMM
// sums, up to the order of the sum).
#pragma once

#include <cstdint>

namespace kvc::kernels::cpu {

// Per row r of x [rows, dim]: scales[r] = fp8::row_scale(max |x[r, :]|) and q[r, i] =
// e4m3(x[r, i] * (1 / scales[r])). q: [rows, dim] codes; scales: [rows].
void quantize_rows_fp8(const float* x, int64_t rows, int64_t dim, uint8_t* q, float* scales);

// x[r, i] = value(q[r, i]) * scales[r].
void dequantize_rows_fp8(const uint8_t* q, const float* scales, int64_t rows, int64_t dim,
                         float* x);

// x replaced in place by its quantized value (quantize, then dequantize), row by row; threaded.
void fake_quantize_rows_fp8(float* x, int64_t rows, int64_t dim);

// x[i] replaced by its E4M3 value under a fixed scale, value(e4m3(x[i] * (1 / scale))) * scale:
// the FP8 KV cache's rule (kernels/fp8_rule.h). scale > 0.
void fake_quantize_scaled_fp8(float* x, int64_t n, float scale);

}  // namespace kvc::kernels::cpu
