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
  float scale_log2;  // shape.scale * log2(e) (* the K scale of an FP8 cache): softmax in base 2
  float v_scale;     // 1, or the V scale of an FP8 cache: applied to each normalised partial
  float* part_o;     // [units, num_q_heads, head_dim]
  float* part_lse;   // [units, num_q_heads]

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
  float* lse;      // null: not written
  Fp8RowsOut fp8;  // q non-null: the output as FP8 rows (attention.h) instead of `out`
};

// ---- the pieces every CTA shares ------------------------------------------------------------

// Streams this thread's kPer token rows of each stage into shared memory. Row i of a stage is
// token tok0 + i * kStep of that stage (the stage's first token is t_begin + tile * stage_tokens);
// the thread copies 16 bytes at element `col` of the token's K and V rows. Block ids are fetched
// one stage before the copies that use them, so the page-table load is off the critical path.
// T is the product type (the stage's element). With kFp8 the cache holds E4M3 codes: a stage is
// first copied as codes into a raw stage (unswizzled token rows of kRawPitch bytes; this thread's
// 8 codes of row i at raw_row + i * kStep * kRawPitch), by the threads of even chunks only (16
// bytes: their 8 codes and their neighbour's), then widen() turns this thread's 8 codes of each
// row into its 16-byte chunk of the T stage, at the offsets a T cache would have been copied to.
template <int kPer, int kStep, typename T, bool kFp8 = false, int kRawPitch = 0>
struct StageLoader {
  static constexpr uint32_t kRawStep = kStep * kRawPitch;
  using C = std::conditional_t<kFp8, uint8_t, T>;  // a cache element
  const C* __restrict__ kc;
  const C* __restrict__ vc;
  const int32_t* __restrict__ blocks;
  int64_t block_stride;
  int token_stride, col, tok0, t_begin, t_end, stage_tokens, block_size;
  FastDiv div;  // by block_size
  // Byte offset of row i within a K (or V) stage: sm_row + i * sm_step, 16-byte chunk sm_chunk
  // XOR-swizzled by the row's token & 7.
  uint32_t sm_row, sm_step, sm_chunk;
  // kFp8: this thread's codes of row 0 in a raw stage (a multiple of 16 for an even chunk).
  uint32_t raw_row = 0;
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
    kc = static_cast<const C*>(p.k_cache);
    vc = static_cast<const C*>(p.v_cache);
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
  // Where row i of a stage lands: its swizzled chunk, or (kFp8) its codes in the raw stage.
  __device__ __forceinline__ uint32_t dst_off(int i) const {
    return kFp8 ? raw_row + i * kRawStep : sm_off(i);
  }
  // Copies tile `tile` (whose ids were fetched last) into the stage at ks / vs (kFp8: the raw
  // stage).
  __device__ __forceinline__ void issue(int tile, uint32_t ks, uint32_t vs) const {
    if (kFp8 && (raw_row & 8) != 0) return;  // an odd chunk: its neighbour copies it
    if (one_block) {
      const int t = token(tile, 0);
      const int64_t off =
          int64_t{max(ids[0], 0)} * block_stride + (t - div(t) * block_size) * token_stride + col;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const bool ok = ids[0] >= 0 && t + i * kStep < t_end;
        cp_async16(ks + dst_off(i), kc + off + i * kStep * token_stride, ok);
        cp_async16(vs + dst_off(i), vc + off + i * kStep * token_stride, ok);
      }
      return;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int t = token(tile, i);
      const int in_block = (t - div(t) * block_size) * token_stride + col;
      const bool ok = ids[i] >= 0;
      const int64_t off = int64_t{ok ? ids[i] : 0} * block_stride + in_block;
      cp_async16(ks + dst_off(i), kc + off, ok);
      cp_async16(vs + dst_off(i), vc + off, ok);
    }
  }
  // kFp8: widens this thread's codes of the raw stage at k_raw / v_raw (landed for every thread)
  // into the T stage at ks / vs.
  __device__ __forceinline__ void widen(uint32_t k_raw, uint32_t v_raw, uint32_t ks,
                                        uint32_t vs) const {
#pragma unroll 2  // fully unrolled, the prefix item spills under three CTAs per SM
    for (int i = 0; i < kPer; ++i) {
      widen_e4m3x8(k_raw + raw_row + i * kRawStep, ks + sm_off(i));
      widen_e4m3x8(v_raw + raw_row + i * kRawStep, vs + sm_off(i));
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

// Query fragments (A operand, row-major 16 x D, in the product type M) of rows q_lo and q_hi of
// q (in T; -1: padding, zeros).
template <int D, typename T, typename M>
__device__ __forceinline__ void load_q(uint32_t (&qf)[D / 16][4], const void* q, int64_t q_lo,
                                       int64_t q_hi, int qc) {
  const uint32_t* q32 = static_cast<const uint32_t*>(q);
  auto at = [&](int64_t row, int c) {
    return row >= 0 ? to_mma_pair<T, M>(__ldg(q32 + row * (D / 2) + c)) : 0u;
  };
#pragma unroll
  for (int k = 0; k < D / 16; ++k) {
    const int c = k * 8 + qc;
    qf[k][0] = at(q_lo, c);
    qf[k][1] = at(q_hi, c);
    qf[k][2] = at(q_lo, c + 4);
    qf[k][3] = at(q_hi, c + 4);
  }
}

// The online softmax of a CTA's warp rows (online_softmax.cuh), with the decode and prefix
// items' output: a normalised partial and its LSE, merged later by merge_state.
template <int D>
struct RowState : OnlineSoftmax<D> {
  // Folds one tile of raw scores s (NJ n-tiles of 8 tokens; element c of s[j] is token
  // tbase + 8j + (c & 1)) into the state and turns s into the tile's probabilities. Tokens at or
  // past t_end are masked when `partial`. rescale: as OnlineSoftmax::fold's.
  template <int NJ, typename Rescale = RescaleNow>
  __device__ __forceinline__ void softmax(float (&s)[NJ][4], float scale_log2, bool partial,
                                          int tbase, int t_end, Rescale rescale = {}) {
    const int lim[2] = {t_end, t_end};
    this->fold(s, scale_log2, partial, tbase, lim, rescale);
  }

  // Writes row h (0: qr, 1: qr + 8) as a normalised partial at part row pr (after the sums were
  // reduced across the quad).
  __device__ __forceinline__ void store(const AttendParams& p, int h, int64_t pr, int qc,
                                        float scale_log2) const {
    const float inv = this->inv_sum(h) * p.v_scale;
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
