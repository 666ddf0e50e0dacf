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

// The online softmax of a CTA's warp rows (online_softmax.cuh), with the decode and prefix
// items' output: a normalised partial and its LSE, merged later by merge_state.
template <int D>
struct RowState : OnlineSoftmax<D> {
  // Folds one tile of raw scores s (NJ n-tiles of 8 tokens; element c of s[j] is token
  // tbase + 8j + (c & 1)) into the state and turns s into the tile's probabilities. Tokens at or
  // past t_end are masked when `partial`.
  template <int NJ>
  __device__ __forceinline__ void softmax(float (&s)[NJ][4], float scale_log2, bool partial,
                                          int tbase, int t_end) {
    const int lim[2] = {t_end, t_end};
    this->fold(s, scale_log2, partial, tbase, lim);
  }

  // Writes row h (0: qr, 1: qr + 8) as a normalised partial at part row pr (after the sums were
  // reduced across the quad).
  __device__ __forceinline__ void store(const AttendParams& p, int h, int64_t pr, int qc,
                                        float scale_log2) const {
    const float inv = this->inv_sum(h);
    float* dst = p.part_o + pr * D + qc * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) =
          make_float2(this->o[n][2 * h] * inv, this->o[n][2 * h + 1] * inv);
    if (qc == 0) p.part_lse[pr] = this->lse(h, scale_log2);
  }
};

}  // namespace
}  // namespace kvc::kernels::cuda
