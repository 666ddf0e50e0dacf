// The FP8 producers that are not a variant of another op (ops.h silu_mul_fp8,
// quantize_rows_fp8); add_rms_norm_fp8 shares its kernel with add_rms_norm in ops.cu.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/ops.h"
#include "kernels/fp8_rule.h"

namespace kvc::kernels::cuda {
namespace {

#include "kernels/cuda/ops_common.cuh"

// ---- SwiGLU to FP8, and plain rows to FP8 ------------------------------------------------

// One CTA per row: silu(gate) * up in fp32, the row's maximum, then its E4M3 codes (the values
// kept in registers where the row fits them, ops_common.cuh quantize_row).
// dq on: gate_up is a raw FP8 GEMM output.
template <int kVec>
__global__ void __launch_bounds__(1024)
    silu_mul_fp8_kernel(const bf16* gate_up, uint8_t* out, float* scales, Fp8ScaleLayout layout,
                        int inter, Fp8Dequant dq) {
  let_next_gemm_start();
  const int64_t r = blockIdx.x;
  const bf16* gr = gate_up + r * 2 * inter;
  const float x_scale = dq.row != nullptr ? dq.row[r] : 1.0f;
  auto act = [&](int c, float* g) {
    float u[kVec];
    load<kVec>(gr + c, g);
    load<kVec>(gr + inter + c, u);
    if (dq.row != nullptr) {
      dequant<kVec>(g, x_scale, dq.col + c);
      dequant<kVec>(u, x_scale, dq.col + inter + c);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
  };
  quantize_row<kVec>(act, inter, out + r * inter, scales + r, layout.stride, layout.blocks);
}

// One CTA per row of bf16 values: the row's maximum, then its E4M3 codes.
template <int kVec>
__global__ void __launch_bounds__(1024)
    quantize_rows_fp8_kernel(const bf16* x, int64_t stride, int dim, uint8_t* q, float* scales,
                             Fp8ScaleLayout layout) {
  const int64_t r = blockIdx.x;
  const bf16* xr = x + r * stride;
  quantize_row<kVec>([&](int i, float* v) { load<kVec>(xr + i, v); }, dim, q + r * dim, scales + r,
                     layout.stride, layout.blocks);
}

}  // namespace

cudaError_t silu_mul_fp8(const void* gate_up, void* out, float* scales, int rows, int inter,
                         cudaStream_t stream, const Fp8Dequant& dq) {
  if (rows == 0 || inter == 0) return cudaSuccess;
  if (rows < 0 || inter < 0 || scales == nullptr || !dequant_ok(dq)) return cudaErrorInvalidValue;
  const bf16* gu = static_cast<const bf16*>(gate_up);
  auto* o = static_cast<uint8_t*>(out);
  const Fp8ScaleLayout layout = fp8_activation_scales(rows, inter);
  if (inter % 8 == 0 && aligned16(gate_up) && reinterpret_cast<uintptr_t>(out) % 8 == 0) {
    silu_mul_fp8_kernel<8>
        <<<rows, threads_for(inter / 8), 0, stream>>>(gu, o, scales, layout, inter, dq);
  } else {
    silu_mul_fp8_kernel<1>
        <<<rows, threads_for(inter), 0, stream>>>(gu, o, scales, layout, inter, dq);
  }
  return cudaGetLastError();
}

cudaError_t quantize_rows_fp8(const void* x, int64_t stride, int rows, int dim, void* q,
                              float* scales, Fp8ScaleLayout layout, cudaStream_t stream) {
  if (rows == 0 || dim == 0) return cudaSuccess;
  if (rows < 0 || dim < 0 || stride < dim || scales == nullptr || rows > (1 << 30) ||
      layout.blocks < 1 || layout.stride < rows) {
    return cudaErrorInvalidValue;
  }
  const bf16* xb = static_cast<const bf16*>(x);
  auto* qb = static_cast<uint8_t*>(q);
  if (dim % 8 == 0 && stride % 8 == 0 && aligned16(x) && reinterpret_cast<uintptr_t>(q) % 8 == 0) {
    quantize_rows_fp8_kernel<8>
        <<<rows, threads_for(dim / 8), 0, stream>>>(xb, stride, dim, qb, scales, layout);
  } else {
    quantize_rows_fp8_kernel<1>
        <<<rows, threads_for(dim), 0, stream>>>(xb, stride, dim, qb, scales, layout);
  }
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
