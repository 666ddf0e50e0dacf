// Decode attention kernels (see attention.h and docs/kernels-cuda.md). Two kinds of work, each a
// 4-warp CTA that streams paged KV through a 3-stage cp.async pipeline in shared memory (16-byte
// chunks, XOR-swizzled for ldmatrix) and runs scores and P·V on tensor cores (mma.sync m16n8k16,
// fp32 accumulate) with an online softmax in fp32 registers (base 2):
//  - prefix item (node, kv_head, chunk, row tile): 64 stacked query rows (members x GQA group),
//    each warp 16 rows x all 64 tokens of a stage;
//  - decode item (sequence, split, group of HW KV heads): warp w owns KV head HW * g + w (its query
//    heads are the rows, padded to 16) over 16-token stages that hold every head of the group, so
//    each token's heads are one contiguous HW x D run. Flat decode and the cascade's suffix pass.
// cascade_kernel runs both in one grid: its first CTAs are persistent prefix CTAs that loop over
// the prefix items, the rest are decode items (HW = 4, the same 96 KB of shared memory as a prefix
// CTA), so a memory-bound suffix CTA can share an SM with a tensor-core prefix CTA.
// decode_wide_kernel is the flat path with HW = 8 (one 8-warp CTA per SM).
// Everything writes normalised fp32 partials (O, natural-log LSE); merge_kernel folds them in a
// fixed order and writes out in the KV dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention.h"

namespace kvc::kernels::cuda {
namespace {

constexpr int kTile = kKvTileTokens;  // tokens of a prefix stage
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Pipeline stages of the cascade kernel (prefix and 4-head decode CTAs: 2 x 32 KB + 1 KB at
// d = 128, so three CTAs share an SM) and of the 8-head flat decode CTAs (3 x 64 KB, one per SM).
constexpr int kStages = 2;
constexpr int kWideStages = 3;
constexpr int kCascadeCtasPerSm = 3;
constexpr int kHeadsTile = 16;  // tokens of a decode stage
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kRescaleLog2 = 8.f;

// Shared memory of a cascade_kernel CTA: 3 stages of K and V, 64 x D elements each (a prefix
// stage is 64 tokens of one head, a decode stage 16 tokens x 4 heads).
template <int D, typename T>
constexpr int smem_bytes() {
  return kStages * 2 * kTile * D * static_cast<int>(sizeof(T)) + 1024;  // + alignment slack
}
template <int D, typename T, int HW>
constexpr int decode_smem_bytes() {
  return kWideStages * 2 * kHeadsTile * HW * D * static_cast<int>(sizeof(T));
}
static_assert(kHeadsTile * kCascadeHeadsPerCta == kTile);

// ---- small device helpers -------------------------------------------------------------------

#include "kernels/cuda/warp_ops.cuh"  // pack2, mma16816, ldmatrix, ex2, cp.async

// Programmatic dependent launch (sm_90): the attention kernels let the merge launch early; the
// merge waits for their completion (and memory) before it reads a partial. No-ops elsewhere and
// when the merge is launched without the attribute.
__device__ __forceinline__ void launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_primary() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---- wgmma (sm_90a) --------------------------------------------------------------------------

// Shared-memory matrix descriptor of a 128-byte-swizzled operand (PTX ISA, "matrix descriptor"):
// start address, leading and stride byte offsets (each >> 4), layout type 1 (128B swizzle). The
// operand's 1024-byte swizzle atoms must start 1024-byte aligned.
__device__ __forceinline__ uint64_t sw128_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
  return uint64_t{(saddr & 0x3FFFF) >> 4} | (uint64_t{(lbo >> 4) & 0x3FFF} << 16) |
         (uint64_t{(sbo >> 4) & 0x3FFF} << 32) | (uint64_t{1} << 62);
}
// Device code for sm_90a uses wgmma for the prefix pass; other targets (sm_80, plain sm_90) the
// mma.sync path. The wgmma helpers are declared everywhere and empty off sm_90a.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVC_WGMMA 1
#else
#define KVC_WGMMA 0
#endif
constexpr bool kWgmmaPrefix = KVC_WGMMA;

__device__ __forceinline__ void wgmma_fence() {
#if KVC_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if KVC_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_wait_all() {
#if KVC_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}
// Orders this thread's generic-proxy shared-memory writes (cp.async) before async-proxy reads.
__device__ __forceinline__ void fence_proxy_async() {
#if KVC_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Pins accumulator registers in program order around the asynchronous products.
__device__ __forceinline__ void fence_regs(float (&c)[8][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int x = 0; x < 4; ++x)
      asm volatile("" : "+f"(c[j][x])::"memory");
}

// D[64 x 64] (+)= A[64 x 16] x B[16 x 64] for the warpgroup (the CTA's 4 warps). This thread's
// share of D and of A has the mma.sync m16n8k16 layouts of its warp's 16 rows (d[j] = n-tile j);
// B is a shared-memory descriptor, stored K-major (kTransB = 0) or N-major (kTransB = 1).
template <typename T, int kTransB>
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[8][4], const uint32_t (&a)[4],
                                                uint64_t b, int accumulate) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
#if KVC_WGMMA
  // One asm statement per input type: 32 accumulators in, A from registers, B descriptor.
#define KVC_WGMMA_M64N64K16(TYPE)                                                                 \
  asm volatile(                                                                                   \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %38, 0;\n"                                                \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE                                 \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, "   \
      "%19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, "  \
      "%36, p, 1, 1, %37;\n}\n"                                                                   \
      : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), \
        "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), \
        "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), \
        "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), \
        "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), \
        "+f"(d[7][2]), "+f"(d[7][3])                                                              \
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB), "r"(accumulate))
  if constexpr (std::is_same_v<T, __half>)
    KVC_WGMMA_M64N64K16("f16");
  else
    KVC_WGMMA_M64N64K16("bf16");
#undef KVC_WGMMA_M64N64K16
#else
  (void)d, (void)a, (void)b, (void)accumulate;
#endif
}

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

// t / d for 0 <= t < 2^31 by a multiply-high and a shift (mul == 0 encodes d == 1).
struct FastDiv {
  uint32_t mul, shr;
  static FastDiv make(int d) {
    if (d == 1) return {0, 0};
    int log2_up = 0;
    while ((1 << log2_up) < d)
      ++log2_up;
    const int p = 31 + log2_up;
    return {static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d), static_cast<uint32_t>(p - 32)};
  }
  __device__ __forceinline__ int operator()(int t) const {
    return mul == 0 ? t : static_cast<int>(__umulhi(static_cast<uint32_t>(t), mul) >> shr);
  }
};

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

// ---- prefix item ----------------------------------------------------------------------------
//
// CTA row r is stacked row R = row0 + r of the node: member R / group, query head
// kv_head * group + R % group; rows at or past members x group are padding. Warp w owns rows
// [16w, 16w + 16) and sees every token of the chunk.
// On sm_90a the 4 warps are one warpgroup: S = Q K^T and O += P V are wgmma m64n64k16 products (Q
// and P from registers, K and V from shared memory), and a stage holds K and V as D / 64 column
// blocks of [64 tokens x 128 bytes] in the 128-byte-swizzle canonical layout (16-byte chunk c of
// token t at t * 128 + ((c ^ (t & 7)) << 4)): K-major for the scores, N-major (transposed) for
// P V. Elsewhere each warp runs mma.sync m16n8k16 over [64 tokens x D] rows swizzled the same way.
template <int D, typename T>
__device__ __forceinline__ void prefix_item(const AttendParams& p, int item, uint32_t smem_base) {
  constexpr int kCpr = D / 8;                         // 16-byte chunks per token row
  constexpr int kPer = kTile * kCpr / kThreads;       // consecutive rows per thread (8 or 4)
  constexpr int kPitch = D * sizeof(T);               // bytes per token row (mma.sync layout)
  constexpr int kStageBytes = kTile * D * sizeof(T);  // one of K or V
  constexpr int kBlockBytes = kTile * 128;            // one 64-column block (wgmma layout)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;

  const int4 it = p.node_items[item];  // {node, kv_head, chunk, row tile}
  const int node = it.x, kv_head = it.y;
  const int seq_begin = p.node_seq_indptr[node];
  const int members = p.node_seq_indptr[node + 1] - seq_begin;
  const int tokens = (p.node_block_indptr[node + 1] - p.node_block_indptr[node]) * p.block_size;
  const int t_begin = it.z * p.node_chunk_tokens;
  const int t_end = min(tokens, t_begin + p.node_chunk_tokens);
  const int end = members * p.group;  // stacked rows
  const int row0 = it.w * kNodeRowTile;
  const int32_t* seqs = p.node_seq_indices + seq_begin;
  const int64_t unit = p.node_unit_base[node] + int64_t{it.z} * members;

  StageLoader<kPer, 1, T> ld;
  ld.template init<D>(p, p.node_block_indices + p.node_block_indptr[node],
                      kv_head * D + (tid % kCpr) * 8, tid / kCpr * kPer, t_begin, t_end, kTile);
  ld.one_block = p.block_size % kPer == 0;
  if constexpr (kWgmmaPrefix) {
    ld.sm_row = (tid % kCpr) / 8 * kBlockBytes + ld.tok0 * 128;
    ld.sm_step = 128;
    ld.sm_chunk = tid % 8;
  } else {
    ld.sm_row = ld.tok0 * kPitch;
    ld.sm_step = kPitch;
    ld.sm_chunk = tid % kCpr;
  }

  const int num_tiles = (t_end - t_begin + kTile - 1) / kTile;
  ld.fetch(0);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      ld.issue(s, smem_base + s * 2 * kStageBytes, smem_base + s * 2 * kStageBytes + kStageBytes);
      ld.fetch(s + 1);
    }
    cp_async_commit();
  }

  // Rows of this thread: R_lo = row0 + 16 warp + qr, R_hi = R_lo + 8.
  int64_t q_row[2], part_row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int R = row0 + warp * 16 + qr + 8 * h;
    const bool ok = R < end;
    const int member = ok ? R / p.group : 0, head = kv_head * p.group + (ok ? R % p.group : 0);
    q_row[h] = ok ? int64_t{__ldg(seqs + member)} * p.num_q_heads + head : -1;
    part_row[h] = ok ? (unit + member) * p.num_q_heads + head : -1;
  }
  // wgmma needs all 4 warps; mma.sync skips warps whose 16 rows are all padding.
  const bool warp_active = kWgmmaPrefix || row0 + warp * 16 < end;
  uint32_t qf[D / 16][4];
  load_q<D>(qf, p.q, q_row[0], q_row[1], qc);
  const LaneOffsets lo(lane, kPitch);
  RowState<D> st;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + kStages - 1 < num_tiles) {
      const uint32_t nb = smem_base + ((tile + kStages - 1) % kStages) * 2 * kStageBytes;
      ld.issue(tile + kStages - 1, nb, nb + kStageBytes);
      // wgmma.fence waits for every outstanding register write, the page-table load included:
      // with wgmma it is issued after the P V products instead (below).
      if constexpr (!kWgmmaPrefix) ld.fetch(tile + kStages);
    }
    cp_async_commit();
    if (!warp_active) continue;

    const uint32_t ks = smem_base + (tile % kStages) * 2 * kStageBytes;
    const uint32_t vs = ks + kStageBytes;

    // S = Q K^T: 16 rows (a warp's share of 64) x 64 tokens.
    float s[kTile / 8][4];
    if constexpr (kWgmmaPrefix) {
      // k-steps of 16 columns (32 bytes) within a 64-column block.
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        const uint64_t b = sw128_desc(ks + (k / 4) * kBlockBytes + (k % 4) * 32, 16, 1024);
        wgmma_m64n64k16<T, 0>(s, qf[k], b, k > 0);
      }
      wgmma_commit();
      wgmma_wait_all();
      fence_regs(s);
    } else {
#pragma unroll
      for (int j = 0; j < kTile / 8; ++j)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        const uint32_t a = ks + LaneOffsets::at(lo.k_off, k);
#pragma unroll
        for (int j = 0; j < kTile / 8; j += 2) {
          uint32_t b[4];
          ldmatrix_x4(b, a + j * 8 * kPitch);
          mma16816<T>(s[j], qf[k], b[0], b[1]);
          mma16816<T>(s[j + 1], qf[k], b[2], b[3]);
        }
      }
    }

    const int t0 = t_begin + tile * kTile;
    st.softmax(s, p.scale_log2, t0 + kTile > t_end, t0 + qc * 2, t_end);

    // O += P V: P's accumulator layout is the A fragment of the next product. All of P is packed
    // before wgmma.fence (a register written after it makes ptxas insert another fence).
    uint32_t pa[kTile / 16][4];
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      pa[kk][0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      pa[kk][1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      pa[kk][2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      pa[kk][3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
    if constexpr (kWgmmaPrefix) wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      const uint32_t(&a)[4] = pa[kk];
      if constexpr (kWgmmaPrefix) {
        // V's 16-token k-steps are 2048 bytes apart, its 64-column blocks kBlockBytes.
#pragma unroll
        for (int h = 0; h < D / 64; ++h) {
          const uint64_t b = sw128_desc(vs + h * kBlockBytes + kk * 2048, kBlockBytes, 1024);
          wgmma_m64n64k16<T, 1>(reinterpret_cast<float(&)[8][4]>(st.o[h * 8]), a, b, 1);
        }
      } else {
#pragma unroll
        for (int m = 0; m < D / 16; ++m) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vs + LaneOffsets::at(lo.v_off, m) + kk * 16 * kPitch);
          mma16816<T>(st.o[2 * m], a, b[0], b[1]);
          mma16816<T>(st.o[2 * m + 1], a, b[2], b[3]);
        }
      }
    }
    if constexpr (kWgmmaPrefix) {
      wgmma_commit();
      if (tile + kStages - 1 < num_tiles) ld.fetch(tile + kStages);
      wgmma_wait_all();
#pragma unroll
      for (int h = 0; h < D / 64; ++h)
        fence_regs(reinterpret_cast<float(&)[8][4]>(st.o[h * 8]));
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages before the next item refills them

  st.reduce_sums();
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (part_row[h] >= 0) st.store(p, h, part_row[h], qc, p.scale_log2);
}

// ---- decode item ----------------------------------------------------------------------------
//
// One (sequence, split, group of HW KV heads): warp w owns KV head HW * g + w (idle past
// num_kv_heads) with its query heads as rows (padded to 16; group <= 16). A stage is 16 tokens x
// HW heads x D of K and of V, token-major, 16-byte chunks XOR-swizzled by token.
template <int D, typename T, int HW, int STG>
__device__ __forceinline__ void decode_item(const AttendParams& p, int64_t index,
                                            uint32_t smem_base) {
  constexpr int kCpr = D / 8;
  constexpr int kTokChunks = HW * kCpr;  // chunks of one token's HW heads
  constexpr int kThr = 32 * HW;
  constexpr int kStep = kThr / kTokChunks;  // tokens between a thread's copies
  constexpr int kPer = kHeadsTile / kStep;
  constexpr int kPitch = HW * D * sizeof(T);        // bytes per staged token
  constexpr int kStageBytes = kHeadsTile * kPitch;  // one of K or V
  static_assert(kPer * kStep == kHeadsTile);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;

  const int head_groups = (p.num_kv_heads + HW - 1) / HW;
  const int hg = static_cast<int>(index % head_groups);
  const int64_t piece = index / head_groups;
  const int split = static_cast<int>(piece % p.num_splits);
  const int64_t seq = piece / p.num_splits;
  const int kv_head = hg * HW + warp;
  const int heads_here = min(HW, p.num_kv_heads - hg * HW);
  const int64_t unit = p.decode_unit_base + seq * p.num_splits + split;
  const int len = p.seq_lens[seq];
  const int t_begin = split * p.split_tokens;
  const int t_end = min(len, t_begin + p.split_tokens);
  if (t_begin >= t_end) {  // an empty split is the identity state
    if (warp < heads_here) {
      for (int e = lane; e < p.group * D; e += 32) {
        const int64_t pr = unit * p.num_q_heads + kv_head * p.group + e / D;
        p.part_o[pr * D + e % D] = 0.f;
        if (e % D == 0) p.part_lse[pr] = -CUDART_INF_F;
      }
    }
    return;
  }

  const int within = tid % kTokChunks;  // chunk within the token's HW heads
  const int ld_head = within / kCpr;
  StageLoader<kPer, kStep, T> ld;
  // A thread whose head is past num_kv_heads copies nothing (its rows stay unused).
  ld.template init<D>(p, p.block_indices + p.block_indptr[seq], hg * HW * D + within * 8,
                      tid / kTokChunks, t_begin, ld_head < heads_here ? t_end : t_begin,
                      kHeadsTile);
  ld.sm_row = ld.tok0 * kPitch + ld_head * D * sizeof(T);
  ld.sm_step = kStep * kPitch;
  ld.sm_chunk = within % kCpr;
  // Splits start at multiples of kKvTileTokens, so a stage is one block when block_size is a
  // multiple of the stage.
  static_assert(kKvTileTokens % kHeadsTile == 0);
  ld.one_block = p.block_size % kHeadsTile == 0;

  const int num_tiles = (t_end - t_begin + kHeadsTile - 1) / kHeadsTile;
  ld.fetch(0);
#pragma unroll 1
  for (int s = 0; s < STG - 1; ++s) {
    if (s < num_tiles) {
      ld.issue(s, smem_base + s * 2 * kStageBytes, smem_base + s * 2 * kStageBytes + kStageBytes);
      ld.fetch(s + 1);
    }
    cp_async_commit();
  }

  const bool active = warp < heads_here;
  const int64_t qrow0 = seq * p.num_q_heads + int64_t{kv_head} * p.group;
  uint32_t qf[D / 16][4];
  load_q<D>(qf, p.q, active && qr < p.group ? qrow0 + qr : -1,
            active && qr + 8 < p.group ? qrow0 + qr + 8 : -1, qc);
  const LaneOffsets lo(lane, kPitch);
  const uint32_t head_byte = warp * D * sizeof(T);
  RowState<D> st;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<STG - 2>();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + STG - 1 < num_tiles) {
      const uint32_t nb = smem_base + ((tile + STG - 1) % STG) * 2 * kStageBytes;
      ld.issue(tile + STG - 1, nb, nb + kStageBytes);
      ld.fetch(tile + STG);
    }
    cp_async_commit();
    if (!active) continue;

    const uint32_t ks = smem_base + (tile % STG) * 2 * kStageBytes + head_byte;
    const uint32_t vs = ks + kStageBytes;

    // S = Q K^T: 16 rows x 16 tokens.
    float s[2][4] = {};
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t b[4];
      ldmatrix_x4(b, ks + LaneOffsets::at(lo.k_off, k));
      mma16816<T>(s[0], qf[k], b[0], b[1]);
      mma16816<T>(s[1], qf[k], b[2], b[3]);
    }
    const int t0 = t_begin + tile * kHeadsTile;
    st.softmax(s, p.scale_log2, t0 + kHeadsTile > t_end, t0 + qc * 2, t_end);

    // O += P V.
    uint32_t a[4];
    a[0] = pack2<T>(s[0][0], s[0][1]);
    a[1] = pack2<T>(s[0][2], s[0][3]);
    a[2] = pack2<T>(s[1][0], s[1][1]);
    a[3] = pack2<T>(s[1][2], s[1][3]);
#pragma unroll
    for (int m = 0; m < D / 16; ++m) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vs + LaneOffsets::at(lo.v_off, m));
      mma16816<T>(st.o[2 * m], a, b[0], b[1]);
      mma16816<T>(st.o[2 * m + 1], a, b[2], b[3]);
    }
  }
  cp_async_wait<0>();
  if (!active) return;

  st.reduce_sums();
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = qr + 8 * h;
    if (r < p.group)
      st.store(p, h, unit * p.num_q_heads + int64_t{kv_head} * p.group + r, qc, p.scale_log2);
  }
}

// ---- kernels --------------------------------------------------------------------------------

// The cascade's one attention launch (and flat decode when num_kv_heads % 8 != 0): CTAs
// [0, num_prefix_ctas) loop over the prefix items, the others are 4-head decode items.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads, kCascadeCtasPerSm)
    cascade_kernel(const AttendParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // wgmma's 128-byte swizzle is a function of the address: stages start 1024-byte aligned.
  const uint32_t smem_base =
      (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  launch_dependents();
  const int bid = static_cast<int>(blockIdx.x);
  if (bid < p.num_prefix_ctas) {
    for (int item = bid; item < p.num_node_items; item += p.num_prefix_ctas)
      prefix_item<D, T>(p, item, smem_base);
    return;
  }
  decode_item<D, T, kCascadeHeadsPerCta, kStages>(p, bid - p.num_prefix_ctas, smem_base);
}

// Flat decode over 8 KV heads per CTA (num_kv_heads % 8 == 0).
template <int D, typename T>
__global__ void __launch_bounds__(32 * kDecodeHeadsPerCta)
    decode_wide_kernel(const AttendParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  launch_dependents();
  decode_item<D, T, kDecodeHeadsPerCta, kWideStages>(p, blockIdx.x, smem_base);
}

// One warp per (sequence, query head) row: its node units in plan order, then its splits in
// order. Launched as a programmatic dependent of the attention launch: the unit list (plan data)
// is read before griddepcontrol.wait, the partials after it. The units' LSEs are loaded one per
// lane (32 at a time), so the row's maximum is known before any O is read; the O rows are then
// loaded four at a time with no dependence on the running sum, and folded in the fixed order
// (weights exp(lse - max); identity: LSE -inf).
template <int D, typename T>
__global__ void __launch_bounds__(128) merge_kernel(const MergeParams p) {
  constexpr int kPer = D / 32;
  constexpr int kUnroll = 4;
  constexpr int kFewUnits = 8;
  const int row = blockIdx.x * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.num_rows) return;
  const int64_t seq = row / p.num_q_heads;
  const int head = row % p.num_q_heads;
  const int node_begin = p.seq_unit_indptr != nullptr ? p.seq_unit_indptr[seq] : 0;
  const int num_node = p.seq_unit_indptr != nullptr ? p.seq_unit_indptr[seq + 1] - node_begin : 0;
  const int total = num_node + p.num_splits;
  // Partial row of unit i (merge order); past `total`: -1.
  auto part_row = [&](int i) -> int64_t {
    if (i >= total) return -1;
    const int64_t unit = i < num_node ? int64_t{p.seq_units[node_begin + i]}
                                      : p.decode_unit_base + seq * p.num_splits + (i - num_node);
    return unit * p.num_q_heads + head;
  };
  auto lse_of = [&](int64_t pr) { return pr < 0 ? -CUDART_INF_F : p.part_lse[pr]; };

  const int64_t pr0 = part_row(lane);  // this lane's unit of the first 32 (kept for both passes)
  auto load_row = [&](int64_t pr, float(&v)[kPer]) {
    const float* src = p.part_o + pr * D + lane * kPer;
    if constexpr (kPer == 4) {
      const float4 x = *reinterpret_cast<const float4*>(src);
      v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src);
      v[0] = x.x, v[1] = x.y;
    }
  };
  float acc[kPer] = {};
  float sum = 0.f, m;
  wait_for_primary();
  if (total <= kFewUnits) {
    // Few units (the common case): every O row is loaded with the LSEs, one round trip; every
    // unit row is written by the attention launch, so reading one of weight 0 is harmless.
    float v[kFewUnits][kPer];
#pragma unroll
    for (int u = 0; u < kFewUnits; ++u) {
      const int64_t prj = __shfl_sync(0xffffffffu, pr0, u);
      if (u < total) {
        load_row(prj, v[u]);
      } else {
#pragma unroll
        for (int i = 0; i < kPer; ++i)
          v[u][i] = 0.f;
      }
    }
    const float l0 = lse_of(pr0);
    m = l0;
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    const float w = l0 == -CUDART_INF_F ? 0.f : __expf(l0 - m);
#pragma unroll
    for (int u = 0; u < kFewUnits; ++u) {
      const float wu = __shfl_sync(0xffffffffu, w, u);  // 0 past total
      sum += wu;
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        acc[i] = fmaf(wu, v[u][i], acc[i]);
    }
  } else {
    const float l0 = lse_of(pr0);
    m = l0;
    for (int base = 32; base < total; base += 32)
      m = fmaxf(m, lse_of(part_row(base + lane)));
#pragma unroll
    for (int off = 16; off >= 1; off >>= 1)
      m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));

    for (int base = 0; base < total; base += 32) {
      const int64_t pr = base == 0 ? pr0 : part_row(base + lane);
      const float l = base == 0 ? l0 : lse_of(pr);
      const float w = l == -CUDART_INF_F ? 0.f : __expf(l - m);
      const int n = min(32, total - base);
      for (int j = 0; j < n; j += kUnroll) {
        float wj[kUnroll], v[kUnroll][kPer];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          wj[u] = __shfl_sync(0xffffffffu, w, j + u);  // 0 past n (lanes past total)
          const int64_t prj = __shfl_sync(0xffffffffu, pr, j + u);
          if (wj[u] != 0.f) {
            load_row(prj, v[u]);
          } else {
#pragma unroll
            for (int i = 0; i < kPer; ++i)
              v[u][i] = 0.f;
          }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          sum += wj[u];
#pragma unroll
          for (int i = 0; i < kPer; ++i)
            acc[i] = fmaf(wj[u], v[u][i], acc[i]);
        }
      }
    }
  }
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  T* out = static_cast<T*>(p.out) + int64_t{row} * D + lane * kPer;
#pragma unroll
  for (int i = 0; i < kPer; i += 2) {
    const uint32_t packed = pack2<T>(acc[i] * inv, acc[i + 1] * inv);
    *reinterpret_cast<uint32_t*>(out + i) = packed;
  }
  if (p.lse != nullptr && lane == 0) p.lse[row] = sum > 0.f ? m + logf(sum) : -CUDART_INF_F;
}

// ---- launch ---------------------------------------------------------------------------------

template <int D, typename T>
cudaError_t launch_typed(const AttendParams& ap, int64_t grid, int64_t wide_grid,
                         const MergeParams& mp, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D, T>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      cascade_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  constexpr int kWideSmem = decode_smem_bytes<D, T, kDecodeHeadsPerCta>();
  static const cudaError_t wide_attr = cudaFuncSetAttribute(
      decode_wide_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWideSmem);
  if (wide_attr != cudaSuccess) return wide_attr;
  if (grid > 0) {
    cascade_kernel<D, T><<<static_cast<unsigned>(grid), kThreads, kSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (wide_grid > 0) {
    decode_wide_kernel<D, T>
        <<<static_cast<unsigned>(wide_grid), 32 * kDecodeHeadsPerCta, kWideSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (mp.num_rows > 0) {
    // A programmatic dependent launch: its CTAs may start (and read the plan) while the attention
    // launch drains; griddepcontrol.wait in the kernel orders the partials.
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>((mp.num_rows + 3) / 4));
    cfg.blockDim = dim3(128);
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, merge_kernel<D, T>, mp);
  }
  return cudaSuccess;
}

// grid: cascade_kernel CTAs (prefix CTAs, then 4-head decode items); wide_grid:
// decode_wide_kernel CTAs (8-head decode items).
cudaError_t launch(const AttentionShape& shape, KvDtype dtype, const AttendParams& ap, int64_t grid,
                   int64_t wide_grid, const MergeParams& mp, cudaStream_t stream) {
  const bool f16 = dtype == KvDtype::kF16;
  switch (shape.head_dim) {
    case 64:
      return f16 ? launch_typed<64, __half>(ap, grid, wide_grid, mp, stream)
                 : launch_typed<64, __nv_bfloat16>(ap, grid, wide_grid, mp, stream);
    case 128:
      return f16 ? launch_typed<128, __half>(ap, grid, wide_grid, mp, stream)
                 : launch_typed<128, __nv_bfloat16>(ap, grid, wide_grid, mp, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

bool shape_supported(const AttentionShape& shape) {
  return (shape.head_dim == 64 || shape.head_dim == 128) && shape.num_kv_heads > 0 &&
         shape.num_q_heads % shape.num_kv_heads == 0 && shape.group() <= 16 && shape.block_size > 0;
}

AttendParams base_params(const AttentionShape& shape, const void* q, const void* k_cache,
                         const void* v_cache, float* part_o, float* part_lse) {
  AttendParams p{};
  p.q = q;
  p.k_cache = k_cache;
  p.v_cache = v_cache;
  p.num_q_heads = shape.num_q_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.group = shape.group();
  p.block_size = shape.block_size;
  const FastDiv div = FastDiv::make(shape.block_size);
  p.block_mul = div.mul;
  p.block_shr = div.shr;
  p.scale_log2 = shape.scale * kLog2e;
  p.part_o = part_o;
  p.part_lse = part_lse;
  p.num_splits = 1;
  p.split_tokens = kTile;
  return p;
}

}  // namespace

cudaError_t cascade_decode(const AttentionShape& shape, KvDtype dtype,
                           const DeviceCascadePlan& plan, const void* q, const void* k_cache,
                           const void* v_cache, void* out, float* lse, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
  if (!shape_supported(shape) || (plan.device == nullptr && !plan.host.empty()) ||
      workspace_bytes < cascade_workspace_bytes(plan, shape)) {
    return cudaErrorInvalidValue;
  }
  const int64_t units = plan.num_units();
  float* part_o = static_cast<float*>(workspace);
  float* part_lse = part_o + units * shape.num_q_heads * shape.head_dim;
  const int32_t* dp = plan.device;
  const auto& off = plan.offsets;

  AttendParams ap = base_params(shape, q, k_cache, v_cache, part_o, part_lse);
  ap.num_node_items = plan.num_node_items;
  ap.num_prefix_ctas = plan.num_prefix_ctas;
  ap.node_items = reinterpret_cast<const int4*>(dp + off.node_items);
  ap.node_block_indptr = dp + off.node_block_indptr;
  ap.node_block_indices = dp + off.node_block_indices;
  ap.node_seq_indptr = dp + off.node_seq_indptr;
  ap.node_seq_indices = dp + off.node_seq_indices;
  ap.node_unit_base = dp + off.node_unit_base;
  ap.node_chunk_tokens = plan.node_chunk_tokens;
  ap.block_indptr = dp + off.suffix_block_indptr;
  ap.block_indices = dp + off.suffix_block_indices;
  ap.seq_lens = dp + off.suffix_len;
  ap.num_splits = plan.suffix.num_splits;
  ap.split_tokens = plan.suffix.split_tokens;
  ap.decode_unit_base = plan.num_node_units;
  const int per_cta = plan.wide_path ? kDecodeHeadsPerCta : kCascadeHeadsPerCta;
  const int64_t decode_ctas = int64_t{plan.num_seqs} * plan.suffix.num_splits *
                              ((shape.num_kv_heads + per_cta - 1) / per_cta);
  const int64_t grid = plan.num_prefix_ctas + (plan.wide_path ? 0 : decode_ctas);
  const int64_t wide_grid = plan.wide_path ? decode_ctas : 0;

  MergeParams mp{};
  mp.part_o = part_o;
  mp.part_lse = part_lse;
  mp.num_rows = plan.num_seqs * shape.num_q_heads;
  mp.num_q_heads = shape.num_q_heads;
  mp.seq_unit_indptr = plan.num_node_units > 0 ? dp + off.seq_unit_indptr : nullptr;
  mp.seq_units = dp + off.seq_units;
  mp.decode_unit_base = plan.num_node_units;
  mp.num_splits = plan.suffix.num_splits;
  mp.out = out;
  mp.lse = lse;
  return launch(shape, dtype, ap, grid, wide_grid, mp, stream);
}

cudaError_t paged_decode(const AttentionShape& shape, KvDtype dtype, const void* q,
                         const void* k_cache, const void* v_cache, const int32_t* block_indptr,
                         const int32_t* block_indices, const int32_t* seq_lens, int num_seqs,
                         int max_seq_len, void* out, float* lse, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream) {
  if (!shape_supported(shape) ||
      workspace_bytes < paged_decode_workspace_bytes(shape, num_seqs, max_seq_len)) {
    return cudaErrorInvalidValue;
  }
  const DecodeSplit split = choose_decode_split(shape, num_seqs, max_seq_len, current_device_sms());
  const bool wide = decode_wide_path(shape);
  const int64_t units = int64_t{num_seqs} * split.num_splits;
  float* part_o = static_cast<float*>(workspace);
  float* part_lse = part_o + units * shape.num_q_heads * shape.head_dim;

  AttendParams ap = base_params(shape, q, k_cache, v_cache, part_o, part_lse);
  ap.block_indptr = block_indptr;
  ap.block_indices = block_indices;
  ap.seq_lens = seq_lens;
  ap.num_splits = split.num_splits;
  ap.split_tokens = split.split_tokens;

  MergeParams mp{};
  mp.part_o = part_o;
  mp.part_lse = part_lse;
  mp.num_rows = num_seqs * shape.num_q_heads;
  mp.num_q_heads = shape.num_q_heads;
  mp.num_splits = split.num_splits;
  mp.out = out;
  mp.lse = lse;
  const int per_cta = wide ? kDecodeHeadsPerCta : kCascadeHeadsPerCta;
  const int64_t ctas = units * ((shape.num_kv_heads + per_cta - 1) / per_cta);
  return wide ? launch(shape, dtype, ap, 0, ctas, mp, stream)
              : launch(shape, dtype, ap, ctas, 0, mp, stream);
}

}  // namespace kvc::kernels::cuda
