// The online softmax of the attention kernels (decode: attention.cu; prefill:
// prefill_attention.cu), one copy: the running state of a thread's two rows of an m16n8k16 tile
// (base 2, fp32) and the fold of a tile of raw scores into it. Included inside each kernel
// file's anonymous namespace, like warp_ops.cuh.
#pragma once

#include <type_traits>

#include "kernels/cuda/warp_ops.cuh"  // ex2

// The including file has <math_constants.h> (CUDART_INF_F) at its top.

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
// Lazy rescaling threshold (log2 units): a row's reference maximum moves only when a tile's
// maximum exceeds it by more than this, so probabilities stay below 2^8 (l and O are fp32) and
// most tiles skip the O rescale.
constexpr float kRescaleLog2 = 8.f;

// v[0] op v[1] op ... op v[N - 1] as a balanced tree (pairs of neighbours, then of pairs), in a
// fixed order; v is overwritten.
template <int N, typename Op>
__device__ __forceinline__ float tree_reduce(float (&v)[N], Op op) {
#pragma unroll
  for (int step = 1; step < N; step *= 2) {
#pragma unroll
    for (int j = 0; j + step < N; j += 2 * step)
      v[j] = op(v[j], v[j + step]);
  }
  return v[0];
}

// How fold rescales O when a row's reference maximum moves: at once by default (RescaleNow);
// the pipelined prefix pass defers it (its P V products may still be writing O) by passing a
// callable that keeps the two rows' factors for OnlineSoftmax::scale_o after their wait.
struct RescaleNow {};

// This thread's share of its warp's 16 rows: rows qr (h = 0) and qr + 8 (h = 1), with raw-score
// reference maxima m, sums l of 2^(s * scale_log2 - m * scale_log2) over this thread's columns,
// and O accumulators (D / 8 n-tiles of the m16n8 layout: o[n][2h], o[n][2h + 1] are row h,
// columns 8n + 2 qc and + 1).
template <int D>
struct OnlineSoftmax {
  float o[D / 8][4];
  float m[2], l[2];

  __device__ __forceinline__ OnlineSoftmax() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m[h] = -CUDART_INF_F;
      l[h] = 0.f;
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  }

  // Folds NJ n-tiles of raw scores into the state and turns s into their probabilities. Element
  // c of s[j] is row c / 2, token tbase + 8j + (c & 1); when `masked`, tokens at or past the
  // row's limit lim[c / 2] get probability 0. O is rescaled as `rescale` says (RescaleNow: here).
  template <int NJ, typename Rescale = RescaleNow>
  __device__ __forceinline__ void fold(float (&s)[NJ][4], float scale_log2, bool masked, int tbase,
                                       const int (&lim)[2], Rescale rescale = {}) {
    if (masked) {
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (tbase + j * 8 + (c & 1) >= lim[c >> 1]) s[j][c] = -CUDART_INF_F;
      }
    }
    // Row maxima as trees (a chain of NJ dependent steps would leave the scheduler idle).
    float mj[2][NJ];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      mj[0][j] = fmaxf(s[j][0], s[j][1]);
      mj[1][j] = fmaxf(s[j][2], s[j][3]);
    }
    float mx[2] = {tree_reduce<NJ>(mj[0], [](float a, float b) { return fmaxf(a, b); }),
                   tree_reduce<NJ>(mj[1], [](float a, float b) { return fmaxf(a, b); })};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1)
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], off));
    }
    // The quad shares mx (reduced above), so its four threads agree on every decision; the
    // branch is taken when any row of the warp moves. A row with no key yet has m = -inf: any
    // finite maximum moves it; -inf - -inf is NaN, not > kRescaleLog2.
    bool up[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      up[h] = (mx[h] - m[h]) * scale_log2 > kRescaleLog2;
    if (__any_sync(0xffffffffu, up[0] || up[1])) {
      float a[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mn = up[h] ? mx[h] : m[h];
        // A row that has seen only masked keys keeps reference 0: no -inf - -inf.
        a[h] = ex2(fmaf(m[h], scale_log2, mn == -CUDART_INF_F ? 0.f : -mn * scale_log2));
        m[h] = mn;
        l[h] *= a[h];
      }
      if constexpr (std::is_same_v<Rescale, RescaleNow>) {
        scale_o(a);
      } else {
        rescale(a);
      }
    }
    float ref[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      ref[h] = m[h] == -CUDART_INF_F ? 0.f : m[h] * scale_log2;
    float lj[2][NJ];
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c)
        s[j][c] = ex2(fmaf(s[j][c], scale_log2, -ref[c >> 1]));
      lj[0][j] = s[j][0] + s[j][1];
      lj[1][j] = s[j][2] + s[j][3];
    }
    l[0] += tree_reduce<NJ>(lj[0], [](float a, float b) { return a + b; });
    l[1] += tree_reduce<NJ>(lj[1], [](float a, float b) { return a + b; });
  }

  // O's rows times a[0] (row qr) and a[1] (row qr + 8).
  __device__ __forceinline__ void scale_o(const float (&a)[2]) {
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= a[0];
      o[n][1] *= a[0];
      o[n][2] *= a[1];
      o[n][3] *= a[1];
    }
  }

  // Each thread summed its own columns: the row sums are the quad's.
  __device__ __forceinline__ void reduce_sums() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1)
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], off);
    }
  }

  // 1 / the sum of row h (0 for a row that saw no key), after reduce_sums.
  __device__ __forceinline__ float inv_sum(int h) const {
    return l[h] > 0.f ? 1.f / l[h] : 0.f;
  }
  // The natural-log LSE of row h (-inf for a row that saw no key), after reduce_sums.
  __device__ __forceinline__ float lse(int h, float scale_log2) const {
    return l[h] > 0.f ? (m[h] * scale_log2 + log2f(l[h])) * kLn2 : -CUDART_INF_F;
  }
};
