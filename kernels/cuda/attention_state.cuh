// Decode attention, part 2: kernel parameters, the stage loader (paged KV -> swizzled shared
// memory) and the online-softmax state every CTA shares.
// Private to kernels/cuda/attention.cu (one translation unit: the templates live in its
// anonymous namespace); split by section so each part reads on its own.
#pragma once

#include "kernels/cuda/attention_ptx.cuh"

namespace kvc::kernels::cuda {
namespace {

// ---- parameters -----------------------------------------------------------------------------

struct AttendParams {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  int num_q_heads, num_kv_heads, group, block_size;
  uint32_t block_mul, block_shr;  // token / block_size as a multiply-high (FastDiv)
  float scale_log2;               // shape.scale * log2(e): softmax in the base-2 domain
  float* part_o;                  // [units, num_q_heads, head_dim]
  float* part_lse;                // [units, num_q_heads]

  // Prefix items, run by the first num_prefix_ctas CTAs of cascade_kernel (item i by CTA
  // i % num_prefix_ctas, in order).
  int num_node_items, num_prefix_ctas;
  const int4* node_items;  // {node, kv_head, chunk, row tile}
  const int32_t* node_block_indptr;
  const int32_t* node_block_indices;
  const int32_t* node_seq_indptr;
  const int32_t* node_seq_indices;
  const int32_t* node_unit_base;
  int node_chunk_tokens;

  // Decode items: (sequence, split, head group), head group fastest.
  const int32_t* block_indptr;
  const int32_t* block_indices;
  const int32_t* seq_lens;
  int num_splits, split_tokens;
  int64_t decode_unit_base;  // unit of (sequence 0, split 0)
};

struct MergeParams {
  const float* part_o;
  const float* part_lse;
  int num_rows, num_q_heads;
  const int32_t* seq_unit_indptr;  // null: no node units
  const int32_t* seq_units;
  int64_t decode_unit_base;
  int num_splits;
  void* out;
  float* lse;  // null: not written
};

// ---- the pieces every CTA shares ------------------------------------------------------------

// Streams this thread's kPer token rows of each stage into shared memory. Row i of a stage is
// token tok0 + i * kStep of that stage (the stage's first token is t_begin + tile * stage_tokens);
// the thread copies 16 bytes at element `col` of the token's K and V rows. Block ids are fetched
// one stage before the copies that use them, so the page-table load is off the critical path.
template <int kPer, int kStep, typename T>
struct StageLoader {
  const T* __restrict__ kc;
  const T* __restrict__ vc;
  const int32_t* __restrict__ blocks;
  int64_t block_stride;
  int token_stride, col, tok0, t_begin, t_end, stage_tokens, block_size;
  FastDiv div;  // by block_size
  // Byte offset of row i within a K (or V) stage: sm_row + i * sm_step, 16-byte chunk sm_chunk
  // XOR-swizzled by the row's token & 7.
  uint32_t sm_row, sm_step, sm_chunk;
  int32_t ids[kPer];  // block of row i in the tile fetched last; -1 past t_end
  // A thread's kPer rows of a stage lie in one block (the caller checks: prefix stages, kStep 1,
  // rows from a multiple of kPer and block_size % kPer == 0; decode stages start at a multiple of
  // kPer * kStep and block_size % (kPer * kStep) == 0): one id and one address per stage.
  bool one_block = false;

  // Cache geometry of `p` (head_dim D), this thread's column (element offset within a token) and
  // first row, the token range [begin, end) and the tokens of one stage.
  template <int D>
  __device__ __forceinline__ void init(const AttendParams& p, const int32_t* table, int column,
                                       int first_row, int begin, int end, int tokens_per_stage) {
    kc = static_cast<const T*>(p.k_cache);
    vc = static_cast<const T*>(p.v_cache);
    blocks = table;
    token_stride = p.num_kv_heads * D;
    block_stride = int64_t{token_stride} * p.block_size;
    col = column;
    tok0 = first_row;
    t_begin = begin;
    t_end = end;
    stage_tokens = tokens_per_stage;
    block_size = p.block_size;
    div = {p.block_mul, p.block_shr};
  }

  __device__ __forceinline__ uint32_t sm_off(int i) const {
    return sm_row + i * sm_step + ((sm_chunk ^ ((tok0 + i * kStep) & 7)) << 4);
  }

  __device__ __forceinline__ int token(int tile, int i) const {
    return t_begin + tile * stage_tokens + tok0 + i * kStep;
  }
  __device__ __forceinline__ void fetch(int tile) {
    if (one_block) {
      const int t = token(tile, 0);
      ids[0] = t < t_end ? __ldg(blocks + div(t)) : -1;
      return;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int t = token(tile, i);
      ids[i] = t < t_end ? __ldg(blocks + div(t)) : -1;
    }
  }
  // Copies tile `tile` (whose ids were fetched last) into the stage at ks / vs.
  __device__ __forceinline__ void issue(int tile, uint32_t ks, uint32_t vs) const {
    if (one_block) {
      const int t = token(tile, 0);
      const int64_t off =
          int64_t{max(ids[0], 0)} * block_stride + (t - div(t) * block_size) * token_stride + col;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const bool ok = ids[0] >= 0 && t + i * kStep < t_end;
        cp_async16(ks + sm_off(i), kc + off + i * kStep * token_stride, ok);
        cp_async16(vs + sm_off(i), vc + off + i * kStep * token_stride, ok);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int t = token(tile, i);
      const int in_block = (t - div(t) * block_size) * token_stride + col;
      const bool ok = ids[i] >= 0;
      const int64_t off = int64_t{ok ? ids[i] : 0} * block_stride + in_block;
      cp_async16(ks + sm_off(i), kc + off, ok);
      cp_async16(vs + sm_off(i), vc + off, ok);
    }
  }
};

// Per-lane ldmatrix offsets (bytes) for a staged tile whose rows are `pitch` bytes apart and whose
// 16-byte chunks are XOR-swizzled by (token & 7): k_off[x] addresses the K fragment of chunk pair
// 2x (+ 8 more chunks per 128 bytes), v_off[x] the transposed V fragment of chunk pair 2x.
struct LaneOffsets {
  uint32_t k_off[4], v_off[4];
  __device__ __forceinline__ LaneOffsets(int lane, int pitch) {
    const int mi = lane >> 3, l = lane & 7, lo = mi & 1, hi = mi >> 1;
#pragma unroll
    for (int x = 0; x < 4; ++x) {
      k_off[x] = (hi * 8 + l) * pitch + (((2 * x + lo) ^ l) << 4);
      v_off[x] = (lo * 8 + l) * pitch + (((2 * x + hi) ^ l) << 4);
    }
  }
  // Chunk pair 2k (k < D / 16) of fragment offsets `off`.
  __device__ __forceinline__ static uint32_t at(const uint32_t (&off)[4], int k) {
    return off[k & 3] + (k >> 2) * 128;
  }
};

// Query fragments (A operand, row-major 16 x D) of rows q_lo and q_hi (-1: padding, zeros).
template <int D>
__device__ __forceinline__ void load_q(uint32_t (&qf)[D / 16][4], const void* q, int64_t q_lo,
                                       int64_t q_hi, int qc) {
  const uint32_t* q32 = static_cast<const uint32_t*>(q);
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const int c = k * 8 + qc;
    qf[k][0] = q_lo >= 0 ? __ldg(q32 + q_lo * (D / 2) + c) : 0u;
    qf[k][1] = q_hi >= 0 ? __ldg(q32 + q_hi * (D / 2) + c) : 0u;
    qf[k][2] = q_lo >= 0 ? __ldg(q32 + q_lo * (D / 2) + c + 4) : 0u;
    qf[k][3] = q_hi >= 0 ? __ldg(q32 + q_hi * (D / 2) + c + 4) : 0u;
  }
}

// The running softmax state of this thread's two rows (qr and qr + 8 of the warp's 16): raw-score
// maxima, sums of 2^(score * scale_log2 - max * scale_log2), and O accumulators (D / 8 n-tiles).
template <int D>
struct RowState {
  float o[D / 8][4];
  float m_lo, m_hi, l_lo, l_hi;

  __device__ __forceinline__ RowState() {
    m_lo = m_hi = -CUDART_INF_F;
    l_lo = l_hi = 0.f;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  }

  // Folds one tile of raw scores s (NJ n-tiles of 8 tokens; element c of s[j] is token
  // tbase + 8j + (c & 1)) into the state and turns s into the tile's probabilities. Tokens at or
  // past t_end are masked when `partial`.
  template <int NJ>
  __device__ __forceinline__ void softmax(float (&s)[NJ][4], float scale_log2, bool partial,
                                          int tbase, int t_end) {
    float mx_lo = -CUDART_INF_F, mx_hi = -CUDART_INF_F;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      if (partial) {
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (tbase + j * 8 + (c & 1) >= t_end) s[j][c] = -CUDART_INF_F;
      }
      mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    // Lazy rescaling: a row's reference maximum moves only when the tile's maximum exceeds it by
    // more than 2^kRescaleLog2 after scaling, so probabilities stay below 2^kRescaleLog2 (l and O
    // are fp32) and most tiles skip the O rescale. The quad shares mx (reduced above), so its
    // threads agree; the branch is taken when any row of the warp moves. First tile: m is -inf.
    const bool up_lo = (mx_lo - m_lo) * scale_log2 > kRescaleLog2;  // false for -inf - -inf
    const bool up_hi = (mx_hi - m_hi) * scale_log2 > kRescaleLog2;
    if (__any_sync(0xffffffffu, up_lo || up_hi)) {
      const float mn_lo = up_lo ? mx_lo : m_lo, mn_hi = up_hi ? mx_hi : m_hi;
      // A row that has seen only masked tokens keeps reference 0 so that no -inf - -inf appears.
      const float a_lo =
          ex2(fmaf(m_lo, scale_log2, mn_lo == -CUDART_INF_F ? 0.f : -mn_lo * scale_log2));
      const float a_hi =
          ex2(fmaf(m_hi, scale_log2, mn_hi == -CUDART_INF_F ? 0.f : -mn_hi * scale_log2));
      m_lo = mn_lo;
      m_hi = mn_hi;
      l_lo *= a_lo;
      l_hi *= a_hi;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= a_lo;
        o[n][1] *= a_lo;
        o[n][2] *= a_hi;
        o[n][3] *= a_hi;
      }
    }
    const float ref_lo = m_lo == -CUDART_INF_F ? 0.f : m_lo * scale_log2;
    const float ref_hi = m_hi == -CUDART_INF_F ? 0.f : m_hi * scale_log2;
#pragma unroll
    for (int j = 0; j < NJ; ++j) {
      s[j][0] = ex2(fmaf(s[j][0], scale_log2, -ref_lo));
      s[j][1] = ex2(fmaf(s[j][1], scale_log2, -ref_lo));
      s[j][2] = ex2(fmaf(s[j][2], scale_log2, -ref_hi));
      s[j][3] = ex2(fmaf(s[j][3], scale_log2, -ref_hi));
      l_lo += s[j][0] + s[j][1];
      l_hi += s[j][2] + s[j][3];
    }
  }

  // Writes row h (0: qr, 1: qr + 8) as a normalised partial at part row pr (after the sums were
  // reduced across the quad).
  __device__ __forceinline__ void store(const AttendParams& p, int h, int64_t pr, int qc,
                                        float scale_log2) const {
    const float l = h == 0 ? l_lo : l_hi;
    const float m = h == 0 ? m_lo : m_hi;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    float* dst = p.part_o + pr * D + qc * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) =
          make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    if (qc == 0) p.part_lse[pr] = l > 0.f ? (m * scale_log2 + log2f(l)) * kLn2 : -CUDART_INF_F;
  }
  __device__ __forceinline__ void reduce_sums() {
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
      l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
    }
  }
};

}  // namespace
}  // namespace kvc::kernels::cuda
