// Device helpers shared by the model-op kernels (ops.cu, fp8_ops.cu, kv_blocks.cu): 16-byte
// bf16/fp32 loads and stores, CTA sizing, block reductions, the decode GEMM's early launch, and the
// E4M3 row quantization of kernels/fp8_rule.h. Included inside each file's anonymous namespace, so
// every file keeps its own copy (as warp_ops.cuh); the includes below must come first in the file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "kernels/fp8_rule.h"

using bf16 = __nv_bfloat16;

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Threads for a CTA that walks `units` items once: a multiple of 32 in [32, 1024].
int threads_for(int64_t units) {
  return static_cast<int>(std::clamp<int64_t>((units + 31) / 32 * 32, 32, 1024));
}

// kVec consecutive values in fp32 (kVec = 8: one 16-byte load of bf16, two of fp32).
template <int kVec>
__device__ __forceinline__ void load(const bf16* p, float* v) {
  if constexpr (kVec == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = __bfloat1622float2(h[j]);
      v[2 * j] = f.x;
      v[2 * j + 1] = f.y;
    }
  } else {
    v[0] = __bfloat162float(*p);
  }
}
template <int kVec>
__device__ __forceinline__ void load(const float* p, float* v) {
  if constexpr (kVec == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0],
                 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {
    v[0] = *p;
  }
}
template <int kVec>
__device__ __forceinline__ void store(bf16* p, const float* v) {
  if constexpr (kVec == 8) {
    uint4 u;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
    *reinterpret_cast<uint4*>(p) = u;
  } else {
    *p = __float2bfloat16_rn(v[0]);
  }
}
template <int kVec>
__device__ __forceinline__ void store(float* p, const float* v) {
  if constexpr (kVec == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *p = v[0];
  }
}

// A dequantization the kernels can take: off, or both scale vectors with 16-byte aligned columns
// (read 4 or 8 at a time; the kernels test dq.row alone).
bool dequant_ok(const Fp8Dequant& dq) {
  return (dq.row == nullptr) == (dq.col == nullptr) && (dq.col == nullptr || aligned16(dq.col));
}

// A raw FP8 GEMM output's value (ops.h Fp8Dequant): raw * row_scale * col_scale, in that order,
// each product rounded (never fused into a following add: the CPU twins add the value itself).
__device__ __forceinline__ float dequant(float raw, float row_scale, float col_scale) {
  return __fmul_rn(__fmul_rn(raw, row_scale), col_scale);
}
// kVec values at columns [col, col + kVec) of a row whose activation scale is row_scale.
template <int kVec>
__device__ __forceinline__ void dequant(float* v, float row_scale, const float* col) {
  float c[kVec];
  load<kVec>(col, c);
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    v[j] = dequant(v[j], row_scale, c[j]);
}

// The kernels a decode GEMM follows (embedding gather for the LM head, add + RMSNorm, SwiGLU)
// let it launch at once: it is launched as a programmatic dependent (decode_gemm.h), streams
// its weights in while they run and waits (griddepcontrol.wait) before it reads their output.
// A no-op when the next kernel is launched without the attribute.
__device__ __forceinline__ void let_next_gemm_start() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

#include "kernels/cuda/block_reduce.cuh"  // block_sum, block_max

// ---- FP8 E4M3 (kernels/fp8_rule.h) ----------------------------------------------------------

__device__ __forceinline__ uint8_t to_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
// kVec values times inv as E4M3 codes (kVec = 8: one 8-byte store).
template <int kVec>
__device__ __forceinline__ void store_e4m3(uint8_t* p, const float* v, float inv) {
  if constexpr (kVec == 8) {
    uint2 u;
    auto* h = reinterpret_cast<__nv_fp8x2_storage_t*>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      h[j] = __nv_cvt_float2_to_fp8x2(make_float2(v[2 * j] * inv, v[2 * j + 1] * inv),
                                      __NV_SATFINITE, __NV_E4M3);
    *reinterpret_cast<uint2*>(p) = u;
  } else {
    *p = to_e4m3(v[0] * inv);
  }
}
template <int kVec>
__device__ __forceinline__ float abs_max(float m, const float* v) {
#pragma unroll
  for (int j = 0; j < kVec; ++j)
    m = fmaxf(m, fabsf(v[j]));
  return m;
}

// A thread's share of a row held in registers: kHeld vectors of kVec values, vector j at
// i = threadIdx.x * kVec + j * blockDim.x * kVec (those at or past the row's end unused). A row
// of up to kHeld x blockDim.x x kVec values fits (14,336 at 1,024 threads and kVec = 8 needs 2).
// The kernels that hold rows are launched with up to 1,024 threads: __launch_bounds__(1024)
// keeps them at 64 registers.
template <int kVec>
inline constexpr int kHeldVectors = kVec == 8 ? 4 : 8;
template <int kVec>
__device__ __forceinline__ bool row_fits(int dim) {
  return dim <= kHeldVectors<kVec> * static_cast<int>(blockDim.x) * kVec;
}
template <int kVec>
__device__ __forceinline__ int held_at(int j) {
  return (threadIdx.x + j * blockDim.x) * kVec;
}

// The E4M3 codes of a row held as above (row_fits), with its scale: the row's maximum over the
// CTA, then every held vector's codes into q, the scale to scale_out[b * scale_stride] for
// b < scale_blocks (the layout of gemm.h Fp8ScaleLayout, scale_out at the row's first entry).
// kHeld: the vectors a thread holds (fewer than kHeldVectors where the row needs fewer).
template <int kVec, int kHeld = kHeldVectors<kVec>>
__device__ __forceinline__ void quantize_held(const float (&v)[kHeld][kVec], int dim, uint8_t* q,
                                              float* scale_out, int64_t scale_stride,
                                              int scale_blocks) {
  float m = 0;
#pragma unroll
  for (int j = 0; j < kHeld; ++j)
    if (held_at<kVec>(j) < dim) m = abs_max<kVec>(m, v[j]);
  const float scale = fp8::row_scale(block_max(m)), qinv = 1.0f / scale;
#pragma unroll
  for (int j = 0; j < kHeld; ++j)
    if (held_at<kVec>(j) < dim) store_e4m3<kVec>(q + held_at<kVec>(j), v[j], qinv);
  for (int b = threadIdx.x; b < scale_blocks; b += blockDim.x)
    scale_out[b * scale_stride] = scale;
}

// One CTA quantizes one row of `dim` values: values(i, v) computes the kVec values at i, once
// each when the row fits the threads' registers (row_fits), else twice (for the row's maximum,
// then for its codes); q gets the codes and the scale goes as in quantize_held.
template <int kVec, class Values>
__device__ __forceinline__ void quantize_row(const Values& values, int dim, uint8_t* q,
                                             float* scale_out, int64_t scale_stride,
                                             int scale_blocks) {
  if (row_fits<kVec>(dim)) {
    float v[kHeldVectors<kVec>][kVec];
#pragma unroll
    for (int j = 0; j < kHeldVectors<kVec>; ++j)
      if (held_at<kVec>(j) < dim) values(held_at<kVec>(j), v[j]);
    quantize_held<kVec>(v, dim, q, scale_out, scale_stride, scale_blocks);
    return;
  }
  float m = 0;
  for (int i = threadIdx.x * kVec; i < dim; i += blockDim.x * kVec) {
    float v[kVec];
    values(i, v);
    m = abs_max<kVec>(m, v);
  }
  const float scale = fp8::row_scale(block_max(m)), qinv = 1.0f / scale;
  for (int i = threadIdx.x * kVec; i < dim; i += blockDim.x * kVec) {
    float v[kVec];
    values(i, v);
    store_e4m3<kVec>(q + i, v, qinv);
  }
  for (int b = threadIdx.x; b < scale_blocks; b += blockDim.x)
    scale_out[b * scale_stride] = scale;
}
