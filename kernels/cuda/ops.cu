#include "kernels/cuda/ops.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>

#include "kernels/fp8_rule.h"

namespace kvc::kernels::cuda {
namespace {

#include "kernels/cuda/ops_common.cuh"

// ---- embedding gather -----------------------------------------------------------------------

// One CTA per token; kVec: hidden % 8 == 0 and 16-byte aligned rows.
template <bool kVec>
__global__ void embedding_gather_kernel(const bf16* table, int vocab, int hidden,
                                        const int32_t* tokens, bf16* out) {
  let_next_gemm_start();
  const int32_t id = tokens[blockIdx.x];
  const bool valid = id >= 0 && id < vocab;
  const bf16* src = table + int64_t{valid ? id : 0} * hidden;
  bf16* dst = out + int64_t{blockIdx.x} * hidden;
  if constexpr (kVec) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int i = threadIdx.x; i < hidden / 8; i += blockDim.x)
      d[i] = valid ? s[i] : make_uint4(0, 0, 0, 0);
  } else {
    for (int i = threadIdx.x; i < hidden; i += blockDim.x)
      dst[i] = valid ? src[i] : __float2bfloat16_rn(0.0f);
  }
}

// ---- add + RMSNorm --------------------------------------------------------------------------

// One CTA per row; kVec = 8: hidden % 8 == 0 and 16-byte aligned pointers. Each thread rereads
// only the residual values it wrote itself, so no barrier is needed between the two loops.
// kFp8: y is E4M3 codes with the row's scale in y_scales (gemm.h Fp8ScaleLayout: the
// normalised row's maximum, then the codes), else bf16. dq on: x is a raw FP8 GEMM output. A
// row that fits the threads' registers (row_fits) is read once and kept there; a longer one is
// read again for the norm (and twice for FP8: its maximum, then its codes). kOne: a row of at
// most one vector a thread (hidden <= 8 x 1,024: Llama 3 8B's 4,096 at 512 threads), whose norm
// weights are read with the inputs, before the reduction, instead of a round trip after it.
template <int kVec, bool kFp8, bool kOne = false>
__global__ void __launch_bounds__(1024)
    add_rms_norm_kernel(const bf16* x, float* residual, bool accumulate, const bf16* weight,
                        void* y, float* y_scales, Fp8ScaleLayout y_layout, int hidden, float eps,
                        Fp8Dequant dq) {
  let_next_gemm_start();
  const int64_t row = blockIdx.x;
  float* res = residual + row * hidden;
  const bf16* xr = x != nullptr ? x + row * hidden : nullptr;
  const float x_scale = dq.row != nullptr ? dq.row[row] : 1.0f;
  // The residual's new values: x added (dequantized) when given, stored; their squares summed.
  auto add = [&](int i, float* v, float& sum_sq) {
    if (xr == nullptr || accumulate) {
      load<kVec>(res + i, v);
    } else {
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        v[j] = 0.0f;
    }
    if (xr != nullptr) {
      float xv[kVec];
      load<kVec>(xr + i, xv);
      if (dq.row != nullptr) dequant<kVec>(xv, x_scale, dq.col + i);
#pragma unroll
      for (int j = 0; j < kVec; ++j)
        v[j] += xv[j];
      store<kVec>(res + i, v);
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      sum_sq += v[j] * v[j];
  };
  if constexpr (kOne) {
    const int i = threadIdx.x * kVec;
    const bool mine = i < hidden;
    float v[1][kVec], w[kVec], sum_sq = 0;
    if (mine) {
      load<kVec>(weight + i, w);
      add(i, v[0], sum_sq);
    }
    const float inv = 1.0f / sqrtf(block_sum(sum_sq) / hidden + eps);
    if (mine) {
#pragma unroll
      for (int c = 0; c < kVec; ++c)
        v[0][c] = w[c] * (v[0][c] * inv);
    }
    if constexpr (kFp8) {
      quantize_held<kVec, 1>(v, hidden, static_cast<uint8_t*>(y) + row * hidden, y_scales + row,
                             y_layout.stride, y_layout.blocks);
    } else if (mine) {
      store<kVec>(static_cast<bf16*>(y) + row * hidden + i, v[0]);
    }
    return;
  }
  if (row_fits<kVec>(hidden)) {  // the row stays in registers: one read of each input
    constexpr int kHeld = kHeldVectors<kVec>;
    float v[kHeld][kVec], sum_sq = 0;
#pragma unroll
    for (int j = 0; j < kHeld; ++j)
      if (held_at<kVec>(j) < hidden) add(held_at<kVec>(j), v[j], sum_sq);
    const float inv = 1.0f / sqrtf(block_sum(sum_sq) / hidden + eps);
#pragma unroll
    for (int j = 0; j < kHeld; ++j) {
      if (held_at<kVec>(j) >= hidden) continue;
      float w[kVec];
      load<kVec>(weight + held_at<kVec>(j), w);
#pragma unroll
      for (int c = 0; c < kVec; ++c)
        v[j][c] = w[c] * (v[j][c] * inv);
    }
    if constexpr (kFp8) {
      quantize_held<kVec>(v, hidden, static_cast<uint8_t*>(y) + row * hidden, y_scales + row,
                          y_layout.stride, y_layout.blocks);
    } else {
      bf16* yr = static_cast<bf16*>(y) + row * hidden;
#pragma unroll
      for (int j = 0; j < kHeld; ++j)
        if (held_at<kVec>(j) < hidden) store<kVec>(yr + held_at<kVec>(j), v[j]);
    }
    return;
  }
  float sum_sq = 0;
  for (int i = threadIdx.x * kVec; i < hidden; i += blockDim.x * kVec) {
    float v[kVec];
    add(i, v, sum_sq);
  }
  const float inv = 1.0f / sqrtf(block_sum(sum_sq) / hidden + eps);
  auto normed = [&](int i, float* v) {
    float w[kVec];
    load<kVec>(res + i, v);
    load<kVec>(weight + i, w);
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      v[j] = w[j] * (v[j] * inv);
  };
  if constexpr (kFp8) {
    quantize_row<kVec>(normed, hidden, static_cast<uint8_t*>(y) + row * hidden, y_scales + row,
                       y_layout.stride, y_layout.blocks);
  } else {
    bf16* yr = static_cast<bf16*>(y) + row * hidden;
    for (int i = threadIdx.x * kVec; i < hidden; i += blockDim.x * kVec) {
      float v[kVec];
      normed(i, v);
      store<kVec>(yr + i, v);
    }
  }
}

// ---- rope -----------------------------------------------------------------------------------

struct RopeArgs {
  bf16* q;
  bf16* k;
  bf16* q_out;  // q's rotated rows go here (== q: in place)
  int64_t q_stride, k_stride, q_out_stride;
  int num_q_heads, num_kv_heads;
  const int32_t* positions;
  RopeTable table;
};

// Two adjacent rotary pairs: (x.x, y.x) by angle 0 and (x.y, y.y) by angle 1, each angle given
// as (cos, sin); fp32, rounded once to bf16. Shared by both RoPE kernels (bit-equal results).
__device__ __forceinline__ void rotate_pairs(float2 x, float2 y, float2 a0, float2 a1,
                                             __nv_bfloat162& lo, __nv_bfloat162& hi) {
  lo = __floats2bfloat162_rn(x.x * a0.x - y.x * a0.y, x.y * a1.x - y.y * a1.y);
  hi = __floats2bfloat162_rn(y.x * a0.x + x.x * a0.y, y.y * a1.x + x.y * a1.y);
}

// One CTA per token: cos/sin of its angles in double into shared memory, then every head's pairs
// (two adjacent i at a time, as bf16x2).
__global__ void rope_kernel(const RopeArgs a) {
  __shared__ float cos_t[kMaxRopeHeadDim / 2], sin_t[kMaxRopeHeadDim / 2];
  const int64_t t = blockIdx.x;
  const int head_dim = a.table.head_dim, half = head_dim / 2;
  const double pos = a.positions[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double s, c;
    sincos(pos * a.table.inv_freq[i], &s, &c);
    cos_t[i] = static_cast<float>(c);
    sin_t[i] = static_cast<float>(s);
  }
  __syncthreads();
  const int pairs = half / 2;
  const int heads = a.num_q_heads + (a.k != nullptr ? a.num_kv_heads : 0);
  for (int idx = threadIdx.x; idx < heads * pairs; idx += blockDim.x) {
    const int h = idx / pairs, i = (idx % pairs) * 2;
    const bool is_q = h < a.num_q_heads;
    const bf16* in = is_q ? a.q + t * a.q_stride + int64_t{h} * head_dim
                          : a.k + t * a.k_stride + int64_t{h - a.num_q_heads} * head_dim;
    bf16* out = is_q ? a.q_out + t * a.q_out_stride + int64_t{h} * head_dim : const_cast<bf16*>(in);
    const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(in + i));
    const float2 y = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(in + half + i));
    rotate_pairs(x, y, make_float2(cos_t[i], sin_t[i]), make_float2(cos_t[i + 1], sin_t[i + 1]),
                 *reinterpret_cast<__nv_bfloat162*>(out + i),
                 *reinterpret_cast<__nv_bfloat162*>(out + half + i));
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------------

template <int kVec>
__global__ void silu_mul_kernel(const bf16* gate_up, bf16* out, int rows, int inter) {
  let_next_gemm_start();
  const int64_t per_row = inter / kVec, total = per_row * rows;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < total;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = idx / per_row, c = idx % per_row * kVec;
    float g[kVec], u[kVec];
    load<kVec>(gate_up + r * 2 * inter + c, g);
    load<kVec>(gate_up + r * 2 * inter + inter + c, u);
#pragma unroll
    for (int j = 0; j < kVec; ++j)
      g[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    store<kVec>(out + r * inter + c, g);
  }
}

// ---- KV append ------------------------------------------------------------------------------

// A bf16 value as a cache element of type T: bf16 as it is, fp16 rounded to nearest, or (T =
// uint8_t: an FP8 cache) the E4M3 code of x * inv, inv = 1 / the cache's scale (kernels/fp8_rule.h:
// nearest, ties to even, saturating).
template <typename T>
__device__ __forceinline__ T to_cache(bf16 x, float inv) {
  if constexpr (std::is_same_v<T, bf16>) {
    return x;
  } else if constexpr (std::is_same_v<T, __half>) {
    return __float2half_rn(__bfloat162float(x));
  } else {
    static_assert(std::is_same_v<T, uint8_t>);
    return static_cast<uint8_t>(
        __nv_cvt_float_to_fp8(__bfloat162float(x) * inv, __NV_SATFINITE, __NV_E4M3));
  }
}

// Converts n (8 when vectorised) bf16 values to cache elements (to_cache).
template <typename T, int kVec>
__device__ __forceinline__ void convert_row(const bf16* src, T* dst, float inv) {
  if constexpr (kVec == 8) {
    const uint4 u = *reinterpret_cast<const uint4*>(src);
    const bf16* s = reinterpret_cast<const bf16*>(&u);
    T d[8];
#pragma unroll
    for (int j = 0; j < 8; ++j)
      d[j] = to_cache<T>(s[j], inv);
    if constexpr (sizeof(T) == 1) {
      *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(d);
    } else {
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(d);
    }
  } else {
    *dst = to_cache<T>(*src, inv);
  }
}

// One CTA per token.
template <typename T, int kVec>
__global__ void kv_append_kernel(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                                 const int32_t* slots, int kv_row, T* k_cache, T* v_cache,
                                 float k_inv, float v_inv) {
  const int64_t t = blockIdx.x;
  const int32_t slot = slots[t];
  if (slot < 0) return;
  const int64_t dst = int64_t{slot} * kv_row;
  for (int i = threadIdx.x * kVec; i < kv_row; i += blockDim.x * kVec) {
    convert_row<T, kVec>(k + t * k_stride + i, k_cache + dst + i, k_inv);
    convert_row<T, kVec>(v + t * v_stride + i, v_cache + dst + i, v_inv);
  }
}

// ---- RoPE and KV append in one launch ------------------------------------------------------

__global__ void rope_angles_kernel(const int32_t* positions, int tokens, const RopeTable table,
                                   float2* cs) {
  const int half = table.head_dim / 2;
  const int64_t n = int64_t{tokens} * half;
  for (int64_t idx = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; idx < n;
       idx += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = idx / half;
    const int i = static_cast<int>(idx % half);
    double s, c;
    sincos(static_cast<double>(positions[t]) * table.inv_freq[i], &s, &c);
    cs[idx] = make_float2(static_cast<float>(c), static_cast<float>(s));
  }
}

// One CTA per token; a thread rotates 4 pairs (8 values: 4 at i, 4 at i + half) of one head
// of q or k, or copies 8 values of v. rope_kernel's arithmetic, so the results are bit-equal.
template <typename T>
__global__ void __launch_bounds__(1024)
    rope_kv_append_kernel(const bf16* q, int64_t q_stride, int num_q_heads, const bf16* k,
                          int64_t k_stride, const bf16* v, int64_t v_stride, int num_kv_heads,
                          int head_dim, const float2* cs, bf16* q_out, int64_t q_out_stride,
                          const int32_t* slots, T* k_cache, T* v_cache, float k_inv, float v_inv,
                          Fp8Dequant dq) {
  const int64_t t = blockIdx.x;
  const int half = head_dim / 2, quads = half / 4;
  const int32_t slot = slots[t];
  const int64_t kv_row = int64_t{num_kv_heads} * head_dim;
  const int rot_units = (num_q_heads + num_kv_heads) * quads;
  const int units = rot_units + static_cast<int>(kv_row / 8);
  const float2* c_t = cs + t * half;
  const float x_scale = dq.row != nullptr ? dq.row[t] : 1.0f;
  for (int u = threadIdx.x; u < units; u += blockDim.x) {
    if (u >= rot_units) {  // V: 8 values
      if (slot < 0) continue;
      const int64_t i = int64_t{u - rot_units} * 8;
      const bf16* src = v + t * v_stride + i;
      alignas(16) bf16 values[8];
      if (dq.row != nullptr) {  // the values, rounded to bf16 as the GEMM's would have been
        float f[8];
        load<8>(src, f);
        dequant<8>(f, x_scale, dq.col + int64_t{num_q_heads + num_kv_heads} * head_dim + i);
        store<8>(values, f);
        src = values;
      }
      convert_row<T, 8>(src, v_cache + int64_t{slot} * kv_row + i, v_inv);
      continue;
    }
    const int h = u / quads, i = (u % quads) * 4;
    const bool is_q = h < num_q_heads;
    if (!is_q && slot < 0) continue;
    const bf16* in = is_q ? q + t * q_stride + int64_t{h} * head_dim
                          : k + t * k_stride + int64_t{h - num_q_heads} * head_dim;
    const uint2 xa = *reinterpret_cast<const uint2*>(in + i);
    const uint2 ya = *reinterpret_cast<const uint2*>(in + half + i);
    const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&xa);
    const __nv_bfloat162* y2 = reinterpret_cast<const __nv_bfloat162*>(&ya);
    __nv_bfloat162 lo[2], hi[2];
    // The fused row's columns of these values (q heads, then k heads: h * head_dim either way).
    float4 xs = make_float4(1.f, 1.f, 1.f, 1.f), ys = xs;
    if (dq.row != nullptr) {
      const float* col = dq.col + int64_t{h} * head_dim + i;
      xs = *reinterpret_cast<const float4*>(col);
      ys = *reinterpret_cast<const float4*>(col + half);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      float2 x = __bfloat1622float2(x2[j]);
      float2 y = __bfloat1622float2(y2[j]);
      if (dq.row != nullptr) {
        x.x = dequant(x.x, x_scale, j == 0 ? xs.x : xs.z);
        x.y = dequant(x.y, x_scale, j == 0 ? xs.y : xs.w);
        y.x = dequant(y.x, x_scale, j == 0 ? ys.x : ys.z);
        y.y = dequant(y.y, x_scale, j == 0 ? ys.y : ys.w);
      }
      rotate_pairs(x, y, c_t[i + 2 * j], c_t[i + 2 * j + 1], lo[j], hi[j]);
    }
    if (is_q) {
      bf16* out = q_out + t * q_out_stride + int64_t{h} * head_dim;
      *reinterpret_cast<uint2*>(out + i) = *reinterpret_cast<const uint2*>(lo);
      *reinterpret_cast<uint2*>(out + half + i) = *reinterpret_cast<const uint2*>(hi);
    } else {
      T* out = k_cache + int64_t{slot} * kv_row + int64_t{h - num_q_heads} * head_dim;
      const bf16* l = reinterpret_cast<const bf16*>(lo);
      const bf16* r = reinterpret_cast<const bf16*>(hi);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        out[i + j] = to_cache<T>(l[j], k_inv);
        out[half + i + j] = to_cache<T>(r[j], k_inv);
      }
    }
  }
}

// ---- family options between the QKV projection and RoPE ---------------------------------------

// One row per block, one warp per head (q heads, then k, then v): the bias added and, for q and k
// heads with norms, the RMS normalisation and the norm weight applied, all in fp32 with one
// rounding to bf16 at the end (closer to a float32 model than rounding at every step as a bf16
// transformers model does). v heads are only touched with a bias.
// dq on: the row is a raw FP8 GEMM output; every head (v's too) is dequantized first.
__global__ void qkv_bias_norm_kernel(bf16* qkv, int64_t stride, int q_heads, int kv_heads,
                                     int head_dim, const bf16* bias, const bf16* q_norm,
                                     const bf16* k_norm, float eps, Fp8Dequant dq) {
  constexpr int kMaxPerLane = 8;  // head_dim <= 256
  bf16* row = qkv + blockIdx.x * stride;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int heads =
      bias != nullptr || dq.row != nullptr ? q_heads + 2 * kv_heads : q_heads + kv_heads;
  const float x_scale = dq.row != nullptr ? dq.row[blockIdx.x] : 1.0f;
  for (int h = warp; h < heads; h += warps) {
    const bf16* w = h < q_heads ? q_norm : h < q_heads + kv_heads ? k_norm : nullptr;
    bf16* x = row + int64_t{h} * head_dim;
    float v[kMaxPerLane];
    float sum_sq = 0;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      v[j] = 0;
      if (i >= head_dim) continue;
      v[j] = __bfloat162float(x[i]);
      if (dq.row != nullptr) v[j] = dequant(v[j], x_scale, dq.col[int64_t{h} * head_dim + i]);
      if (bias != nullptr) v[j] += __bfloat162float(bias[int64_t{h} * head_dim + i]);
      sum_sq += v[j] * v[j];
    }
    if (w != nullptr) {
#pragma unroll
      for (int o = 16; o > 0; o /= 2)
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
      const float inv = rsqrtf(sum_sq / head_dim + eps);
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j) {
        const int i = lane + 32 * j;
        if (i < head_dim) v[j] = v[j] * inv * __bfloat162float(w[i]);
      }
    }
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      const int i = lane + 32 * j;
      if (i < head_dim) x[i] = __float2bfloat16_rn(v[j]);
    }
  }
}

// ---- vocab-parallel LM head -----------------------------------------------------------------

// blockIdx.y: the sample row; each thread copies ids of it (a grid-stride loop over the vocab).
__global__ void gather_vocab_parts_kernel(const float* ranks, int rows, int part, int vocab,
                                          float* out) {
  const int64_t row = blockIdx.y;
  for (int id = blockIdx.x * blockDim.x + threadIdx.x; id < vocab; id += gridDim.x * blockDim.x) {
    const int r = id / part;
    out[row * vocab + id] = ranks[(int64_t{r} * rows + row) * part + (id - r * part)];
  }
}

}  // namespace

cudaError_t embedding_gather(const void* table, int vocab, int hidden, const int32_t* tokens,
                             int num_tokens, void* out, cudaStream_t stream) {
  if (num_tokens == 0 || hidden == 0) return cudaSuccess;
  if (num_tokens < 0 || hidden < 0) return cudaErrorInvalidValue;
  const bf16* t = static_cast<const bf16*>(table);
  bf16* o = static_cast<bf16*>(out);
  if (hidden % 8 == 0 && aligned16(table) && aligned16(out)) {
    embedding_gather_kernel<true>
        <<<num_tokens, threads_for(hidden / 8), 0, stream>>>(t, vocab, hidden, tokens, o);
  } else {
    embedding_gather_kernel<false>
        <<<num_tokens, threads_for(hidden), 0, stream>>>(t, vocab, hidden, tokens, o);
  }
  return cudaGetLastError();
}

namespace {

template <bool kFp8>
cudaError_t launch_add_rms_norm(const void* x, float* residual, bool accumulate, const void* weight,
                                void* y, float* y_scales, int rows, int hidden, float eps,
                                cudaStream_t stream, const Fp8Dequant& dq) {
  if (!dequant_ok(dq) || (dq.on() && x == nullptr)) return cudaErrorInvalidValue;
  const bf16* xb = static_cast<const bf16*>(x);
  const bf16* w = static_cast<const bf16*>(weight);
  const bool y_aligned = kFp8 ? reinterpret_cast<uintptr_t>(y) % 8 == 0 : aligned16(y);
  const bool vec = hidden % 8 == 0 && (x == nullptr || aligned16(x)) && aligned16(residual) &&
                   aligned16(weight) && y_aligned;
  const Fp8ScaleLayout layout = kFp8 ? fp8_activation_scales(rows, hidden) : Fp8ScaleLayout{};
  if (vec && hidden / 8 <= 1024) {
    add_rms_norm_kernel<8, kFp8, true><<<rows, threads_for(hidden / 8), 0, stream>>>(
        xb, residual, accumulate, w, y, y_scales, layout, hidden, eps, dq);
  } else if (vec) {
    add_rms_norm_kernel<8, kFp8><<<rows, threads_for(hidden / 8), 0, stream>>>(
        xb, residual, accumulate, w, y, y_scales, layout, hidden, eps, dq);
  } else {
    add_rms_norm_kernel<1, kFp8><<<rows, threads_for(hidden), 0, stream>>>(
        xb, residual, accumulate, w, y, y_scales, layout, hidden, eps, dq);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_rms_norm(const void* x, float* residual, bool accumulate, const void* weight,
                         void* y, int rows, int hidden, float eps, cudaStream_t stream,
                         const Fp8Dequant& dq) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || hidden <= 0) return cudaErrorInvalidValue;
  return launch_add_rms_norm<false>(x, residual, accumulate, weight, y, nullptr, rows, hidden, eps,
                                    stream, dq);
}

cudaError_t add_rms_norm_fp8(const void* x, float* residual, bool accumulate, const void* weight,
                             void* y, float* y_scales, int rows, int hidden, float eps,
                             cudaStream_t stream, const Fp8Dequant& dq) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || hidden <= 0 || y_scales == nullptr) return cudaErrorInvalidValue;
  return launch_add_rms_norm<true>(x, residual, accumulate, weight, y, y_scales, rows, hidden, eps,
                                   stream, dq);
}

RopeTable make_rope_table(int head_dim, const cpu::RopeConfig& cfg) {
  RopeTable t;
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxRopeHeadDim) return t;  // head_dim 0
  t.head_dim = head_dim;
  cpu::rope_inv_freq(head_dim, cfg, t.inv_freq);
  return t;
}

cudaError_t rope(void* q, int64_t q_stride, int num_q_heads, void* k, int64_t k_stride,
                 int num_kv_heads, const int32_t* positions, int tokens, const RopeTable& table,
                 cudaStream_t stream, void* q_out, int64_t q_out_stride) {
  if (tokens == 0) return cudaSuccess;
  const int d = table.head_dim;
  if (q_out == nullptr) {
    q_out = q;
    q_out_stride = q_stride;
  }
  if (tokens < 0 || d <= 0 || d % 4 != 0 || d > kMaxRopeHeadDim || q_stride % 2 != 0 ||
      q_out_stride % 2 != 0 || (k != nullptr && k_stride % 2 != 0)) {
    return cudaErrorInvalidValue;
  }
  const RopeArgs a{static_cast<bf16*>(q),
                   static_cast<bf16*>(k),
                   static_cast<bf16*>(q_out),
                   q_stride,
                   k_stride,
                   q_out_stride,
                   num_q_heads,
                   num_kv_heads,
                   positions,
                   table};
  const int units = (num_q_heads + (k != nullptr ? num_kv_heads : 0)) * (d / 4);
  rope_kernel<<<tokens, std::min(threads_for(units), 256), 0, stream>>>(a);
  return cudaGetLastError();
}

cudaError_t silu_mul(const void* gate_up, void* out, int rows, int inter, cudaStream_t stream) {
  if (rows == 0 || inter == 0) return cudaSuccess;
  if (rows < 0 || inter < 0) return cudaErrorInvalidValue;
  const bf16* gu = static_cast<const bf16*>(gate_up);
  bf16* o = static_cast<bf16*>(out);
  const bool vec = inter % 8 == 0 && aligned16(gate_up) && aligned16(out);
  const int64_t units = int64_t{rows} * (vec ? inter / 8 : inter);
  const int threads = 256;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((units + threads - 1) / threads, int64_t{1} << 16));
  if (vec) {
    silu_mul_kernel<8><<<blocks, threads, 0, stream>>>(gu, o, rows, inter);
  } else {
    silu_mul_kernel<1><<<blocks, threads, 0, stream>>>(gu, o, rows, inter);
  }
  return cudaGetLastError();
}

cudaError_t kv_append(const void* k, int64_t k_stride, const void* v, int64_t v_stride,
                      const int32_t* slots, int tokens, int num_kv_heads, int head_dim,
                      KvDtype cache_dtype, void* k_cache, void* v_cache, cudaStream_t stream,
                      const KvQuant& quant) {
  if (tokens == 0) return cudaSuccess;
  if (tokens < 0 || num_kv_heads <= 0 || head_dim <= 0) return cudaErrorInvalidValue;
  const float k_inv = 1.0f / quant.k_scale, v_inv = 1.0f / quant.v_scale;
  const int kv_row = num_kv_heads * head_dim;
  const bool vec = kv_row % 8 == 0 && k_stride % 8 == 0 && v_stride % 8 == 0 && aligned16(k) &&
                   aligned16(v) && aligned16(k_cache) && aligned16(v_cache);
  const bf16* kb = static_cast<const bf16*>(k);
  const bf16* vb = static_cast<const bf16*>(v);
  const int threads = threads_for(vec ? kv_row / 8 : kv_row);
  auto launch = [&](auto* kc, auto* vc) {
    using T = std::remove_pointer_t<decltype(kc)>;
    if (vec) {
      kv_append_kernel<T, 8><<<tokens, threads, 0, stream>>>(kb, k_stride, vb, v_stride, slots,
                                                             kv_row, kc, vc, k_inv, v_inv);
    } else {
      kv_append_kernel<T, 1><<<tokens, threads, 0, stream>>>(kb, k_stride, vb, v_stride, slots,
                                                             kv_row, kc, vc, k_inv, v_inv);
    }
  };
  if (quant.fp8) {
    launch(static_cast<uint8_t*>(k_cache), static_cast<uint8_t*>(v_cache));
  } else if (cache_dtype == KvDtype::kF16) {
    launch(static_cast<__half*>(k_cache), static_cast<__half*>(v_cache));
  } else {
    launch(static_cast<bf16*>(k_cache), static_cast<bf16*>(v_cache));
  }
  return cudaGetLastError();
}

cudaError_t rope_angles(const int32_t* positions, int tokens, const RopeTable& table, void* cs,
                        cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (tokens < 0 || table.head_dim <= 0 || table.head_dim % 2 != 0) return cudaErrorInvalidValue;
  const int64_t n = int64_t{tokens} * (table.head_dim / 2);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  rope_angles_kernel<<<blocks, 256, 0, stream>>>(positions, tokens, table,
                                                 static_cast<float2*>(cs));
  return cudaGetLastError();
}

cudaError_t rope_kv_append(const void* q, int64_t q_stride, int num_q_heads, const void* k,
                           int64_t k_stride, const void* v, int64_t v_stride, int num_kv_heads,
                           int head_dim, const void* cs, int tokens, void* q_out,
                           int64_t q_out_stride, const int32_t* slots, KvDtype cache_dtype,
                           void* k_cache, void* v_cache, cudaStream_t stream, const KvQuant& quant,
                           const Fp8Dequant& dq) {
  if (tokens == 0) return cudaSuccess;
  if (!dequant_ok(dq)) return cudaErrorInvalidValue;
  if (tokens < 0 || head_dim <= 0 || head_dim % 8 != 0 || head_dim > kMaxRopeHeadDim ||
      num_q_heads < 0 || num_kv_heads <= 0 || q_stride % 4 != 0 || k_stride % 4 != 0 ||
      v_stride % 8 != 0 || q_out_stride % 4 != 0 || !aligned16(v) || !aligned16(k_cache) ||
      !aligned16(v_cache) || reinterpret_cast<uintptr_t>(q) % 8 != 0 ||
      reinterpret_cast<uintptr_t>(k) % 8 != 0 || reinterpret_cast<uintptr_t>(q_out) % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  const int units = (num_q_heads + num_kv_heads) * (head_dim / 8) + num_kv_heads * head_dim / 8;
  // One pass over a token's units where they fit 1,024 threads (Llama 3 8B: 768; at 512 a third
  // of the threads made a second pass, a second round trip: 0.3-0.5 us a launch on an H100).
  const int threads = threads_for(units);
  auto launch = [&](auto* kc, auto* vc) {
    using T = std::remove_pointer_t<decltype(kc)>;
    rope_kv_append_kernel<T><<<tokens, threads, 0, stream>>>(
        static_cast<const bf16*>(q), q_stride, num_q_heads, static_cast<const bf16*>(k), k_stride,
        static_cast<const bf16*>(v), v_stride, num_kv_heads, head_dim,
        static_cast<const float2*>(cs), static_cast<bf16*>(q_out), q_out_stride, slots, kc, vc,
        1.0f / quant.k_scale, 1.0f / quant.v_scale, dq);
  };
  if (quant.fp8) {
    launch(static_cast<uint8_t*>(k_cache), static_cast<uint8_t*>(v_cache));
  } else if (cache_dtype == KvDtype::kF16) {
    launch(static_cast<__half*>(k_cache), static_cast<__half*>(v_cache));
  } else {
    launch(static_cast<bf16*>(k_cache), static_cast<bf16*>(v_cache));
  }
  return cudaGetLastError();
}

cudaError_t qkv_bias_norm(void* qkv, int64_t stride, int rows, int q_heads, int kv_heads,
                          int head_dim, const void* bias, const void* q_norm, const void* k_norm,
                          float eps, cudaStream_t stream, const Fp8Dequant& dq) {
  if (!dequant_ok(dq)) return cudaErrorInvalidValue;
  if (rows == 0 || (bias == nullptr && q_norm == nullptr && !dq.on())) return cudaSuccess;
  if (rows < 0 || q_heads < 0 || kv_heads <= 0 || head_dim <= 0 || head_dim > 256 ||
      (q_norm == nullptr) != (k_norm == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int heads = bias != nullptr || dq.on() ? q_heads + 2 * kv_heads : q_heads + kv_heads;
  const int threads = 32 * std::min(heads, 16);
  qkv_bias_norm_kernel<<<rows, threads, 0, stream>>>(
      static_cast<bf16*>(qkv), stride, q_heads, kv_heads, head_dim, static_cast<const bf16*>(bias),
      static_cast<const bf16*>(q_norm), static_cast<const bf16*>(k_norm), eps, dq);
  return cudaGetLastError();
}

cudaError_t gather_vocab_parts(const float* ranks, int num_ranks, int rows, int part, int vocab,
                               float* out, cudaStream_t stream) {
  if (rows == 0 || vocab == 0) return cudaSuccess;
  if (rows < 0 || vocab < 0 || num_ranks < 1 || part < 1 || int64_t{part} * num_ranks < vocab ||
      rows > 65535) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>(std::min((vocab + 255) / 256, 64)),
                  static_cast<unsigned>(rows));
  gather_vocab_parts_kernel<<<grid, 256, 0, stream>>>(ranks, rows, part, vocab, out);
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
