// Chunked causal prefill attention (see prefill_attention.h), FlashAttention-2 style on mma.sync
// m16n8k16 (sm_80 and up; no wgmma, so plain sm_90 and sm_80 builds run the same code).
//
// One CTA of 4 warps per plan item (chunk, KV head, tile of 64 stacked query rows): row r of the
// tile is token (row0 + r) / group, query head kv_head * group + (row0 + r) % group, so a K/V tile
// is staged once for the whole GQA group. Warp w owns rows [16w, 16w + 16) and keeps their Q
// fragments, the online softmax state (fp32, base 2) and the O accumulators in registers. K and V
// stream through shared memory in 64-token tiles of one KV head (positions 0, 64, ... of the
// sequence), double-buffered with cp.async; each token row's 16-byte chunks are XOR-swizzled by
// token & 7 so that ldmatrix reads are conflict-free. Each warp folds a stage in two 32-token
// online-softmax steps (S = Q K^T, softmax, O += P V); a step past every row of the warp is skipped
// (the CTA stops loading at its last row's position) and the causal mask is applied only on steps
// that reach past the warp's first row's position. Items are ordered longest first by the plan.
#include "kernels/cuda/prefill_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/fast_div.cuh"

namespace kvc::kernels::cuda {
namespace {

constexpr int kRows = kPrefillRowTile;  // stacked query rows of a CTA
constexpr int kTile = 64;               // KV tokens of a pipeline stage
// KV tokens of one online-softmax step: a stage is two of them. With 32 tokens the scores (16
// fp32 registers) fit beside O and Q under the 168-register cap of three CTAs per SM at head
// dim 128 (64 tokens spilled), and a warp skips the masked half of a diagonal stage.
constexpr int kSub = 32;
constexpr int kWarps = kRows / 16;
constexpr int kThreads = 32 * kWarps;
constexpr int kStages = 2;
// CTAs per SM the register budget is set for: 2 stages x (K + V) x 64 tokens x 128 dims x 2 bytes
// = 64 KB and at most 168 registers at head_dim 128 (three per SM); 32 KB and 128 registers at 64
// (four).
constexpr int ctas_per_sm(int head_dim) {
  return head_dim == 64 ? 4 : 3;
}

// Over an FP8 cache: one fp16 stage and kStages raw stages of codes (the same total).
template <int D, bool kFp8>
constexpr int smem_bytes() {
  constexpr int kStage = 2 * kTile * D * 2;  // K and V of one stage, 2-byte elements
  return (kFp8 ? kStage + kStages * kStage / 2 : kStages * kStage) + 256;  // + alignment slack
}

// ---- index arithmetic (host and device: tests/emulation can check it on the CPU) -------------

// Byte offset in a stage of 16-byte chunk `chunk` of token row `tok` (rows `pitch` bytes apart):
// the chunk index is XOR-swizzled by tok & 7, so the 8 rows of an ldmatrix 8x8 matrix (8
// consecutive tokens, one chunk column) fall in 8 different 16-byte bank groups.
__host__ __device__ constexpr uint32_t stage_offset(int tok, int chunk, int pitch) {
  return static_cast<uint32_t>(tok * pitch + ((chunk ^ (tok & 7)) << 4));
}

// ldmatrix.x4 row address of `lane` for the K fragments of chunk pair (2k, 2k + 1) and tokens
// [0, 16) of a stage: matrices 0..3 = (tokens 0-7, chunk 2k), (0-7, 2k+1), (8-15, 2k), (8-15,
// 2k+1), i.e. B fragments {b0, b1} of n-tile 0 and of n-tile 1 (scores S = Q K^T, K row-major = B
// col-major).
__host__ __device__ constexpr uint32_t k_lane_offset(int lane, int k, int pitch) {
  const int mi = lane >> 3, l = lane & 7;
  return stage_offset((mi >> 1) * 8 + l, 2 * k + (mi & 1), pitch);
}
// ldmatrix.x4.trans row address of `lane` for the V fragments of tokens [0, 16) and chunk pair
// (2m, 2m + 1): matrices 0..3 = (tokens 0-7, chunk 2m), (8-15, 2m), (0-7, 2m+1), (8-15, 2m+1),
// transposed: B fragments {b0, b1} of output n-tiles 2m and 2m + 1 (O += P V).
__host__ __device__ constexpr uint32_t v_lane_offset(int lane, int m, int pitch) {
  const int mi = lane >> 3, l = lane & 7;
  return stage_offset((mi & 1) * 8 + l, 2 * m + (mi >> 1), pitch);
}
// Both offsets for chunk pair k are the pair-0 offset XOR (k << 5): the row's token & 7 is the
// lane's l, (2k + lo) ^ l = (lo ^ l) ^ 2k, and a token row starts on a multiple of 128 bytes
// (256 at head_dim 128, where k < 8 reaches bit 7) so the XOR stays inside the row. A stage
// starts 256-byte aligned, so the XOR can be applied to the shared-memory address itself: one
// register per operand instead of one per chunk pair.
__host__ __device__ constexpr uint32_t pair_offset(uint32_t pair0, int k) {
  return pair0 ^ static_cast<uint32_t>(k << 5);
}

// ---- device helpers -----------------------------------------------------------------------

#include "kernels/cuda/online_softmax.cuh"  // OnlineSoftmax, kLog2e, kLn2
#include "kernels/cuda/warp_ops.cuh"        // pack2, mma16816, ldmatrix, ex2, cp.async

__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::);
}

// ---- parameters ---------------------------------------------------------------------------

struct PrefillParams {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  void* out;
  float* lse;         // null: not written
  const int4* items;  // {chunk, kv_head, row tile, KV tiles}
  const int32_t* q_indptr;
  const int32_t* block_indptr;
  const int32_t* block_indices;
  const int32_t* start_pos;
  int num_q_heads, num_kv_heads, group, block_size;
  int token_stride;   // cache elements per token: num_kv_heads * head_dim
  int block_stride;   // cache elements per block: block_size * token_stride
  FastDiv block_div;  // by block_size
  float scale_log2;  // shape.scale * log2(e) (* an FP8 cache's K scale): the softmax runs in base 2
  float v_scale;     // 1, or an FP8 cache's V scale: applied to the output
};

// ---- K/V tile loader ----------------------------------------------------------------------

// Streams 64-token tiles of one KV head of a paged sequence into shared memory. Thread `tid`
// copies 16-byte chunk tid % (D / 8) of kPer consecutive tokens, tokens tid / (D / 8) * kPer + i
// of a tile, from K and from V. Tokens at or past kv_end are zero-filled (no global read), so a
// masked probability never meets a NaN from an unwritten row. Strides and base pointers stay in
// the kernel parameters (constant bank): the loader keeps few registers beside the softmax state.
// With kOneBlock the tile's one page-table id is fetched a tile ahead; otherwise the kPer ids are
// fetched right before the copies (held across the math they would spill).
// T is the product type (the stage's element). With kFp8 the cache holds E4M3 codes: the threads
// of even chunks copy 16 bytes of codes (theirs and their neighbour's) into a raw stage (token
// rows of D bytes, unswizzled), and widen() turns each thread's 8 codes of a row into its chunk of
// the T stage.
template <int D, typename T, bool kOneBlock, bool kFp8 = false>
struct TileLoader {
  using C = std::conditional_t<kFp8, uint8_t, T>;       // a cache element
  static constexpr int kCpr = D / 8;                    // 16-byte chunks per token row
  static constexpr int kPer = kTile * kCpr / kThreads;  // tokens per thread per tile (8 or 4)
  static constexpr int kPitch = D * static_cast<int>(sizeof(T));
  static_assert(kPer * kThreads == kTile * kCpr && (kPer == 4 || kPer == 8));

  const PrefillParams& p;
  const int32_t* table;  // the chunk's block table
  int col;               // element offset of this thread's chunk in a token row (KV head included)
  int tok0;              // the first of this thread's tokens in a tile (a multiple of kPer)
  uint32_t so0;          // stage_offset(tok0, chunk)
  int kv_end;
  // kOneBlock (block_size % kPer == 0): a thread's kPer rows of a tile lie in one block (tok0
  // and tiles are multiples of kPer), so one id and one address serve the whole tile.
  int32_t ids[kOneBlock ? 1 : kPer];  // block of row i of the tile fetched last; -1 past kv_end

  // Copies tile `tile` into the stage at ks (K) / vs (V). Tiles are loaded in order from 0 on.
  __device__ __forceinline__ void load(int tile, uint32_t ks, uint32_t vs) {
    if constexpr (kOneBlock) {
      if (tile == 0) fetch(0);
      issue(tile, ks, vs);
      fetch(tile + 1);
    } else {
      fetch(tile);
      issue(tile, ks, vs);
    }
  }

  __device__ __forceinline__ TileLoader(const PrefillParams& params, const int32_t* blocks,
                                        int kv_head, int tid, int end)
      : p(params), table(blocks), kv_end(end) {
    const int chunk = tid % kCpr;
    col = kv_head * D + chunk * 8;
    tok0 = tid / kCpr * kPer;
    so0 = stage_offset(tok0, chunk, kPitch);
  }
  // kFp8: byte offset of this thread's codes of row tok0 in a raw stage (token rows of D bytes;
  // col % D is the chunk's first element).
  __device__ __forceinline__ uint32_t raw0() const { return tok0 * D + (col & (D - 1)); }
  // Where row i of a stage lands: its swizzled chunk, or (kFp8) its codes in the raw stage.
  __device__ __forceinline__ uint32_t dst_off(int i) const {
    return kFp8 ? raw0() + i * D : row_offset(so0, i);
  }
  // kFp8: widens this thread's codes of the raw stage at k_raw / v_raw (landed for every thread)
  // into the T stage at ks / vs.
  __device__ __forceinline__ void widen(uint32_t k_raw, uint32_t v_raw, uint32_t ks,
                                        uint32_t vs) const {
#pragma unroll 2  // fully unrolled, it spills at head_dim 128
    for (int i = 0; i < kPer; ++i) {
      widen_e4m3x8(k_raw + raw0() + i * D, ks + row_offset(so0, i));
      widen_e4m3x8(v_raw + raw0() + i * D, vs + row_offset(so0, i));
    }
  }

  // Stage offset of row tok0 + i: (tok0 + i) & 7 = (tok0 & 7) ^ i for i < kPer (tok0 is a
  // multiple of kPer), so the swizzle is so0's XOR i << 4 (bits 4..6, inside the row).
  __host__ __device__ static constexpr uint32_t row_offset(uint32_t so0, int i) {
    return (so0 ^ static_cast<uint32_t>(i << 4)) + i * kPitch;
  }

  __device__ __forceinline__ void fetch(int tile) {
    const int t0 = tile * kTile + tok0;
    if constexpr (kOneBlock) {
      ids[0] = t0 < kv_end ? __ldg(table + p.block_div(t0)) : -1;
    } else {
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        ids[i] = t0 + i < kv_end ? __ldg(table + p.block_div(t0 + i)) : -1;
    }
  }

  // Copies tile `tile` (whose ids were fetched last) into the stage whose K half starts at ks and
  // V half at vs (kFp8: the raw stage).
  __device__ __forceinline__ void issue(int tile, uint32_t ks, uint32_t vs) const {
    if (kFp8 && (col & 8) != 0) return;  // an odd chunk: its neighbour copies it
    const C* kc = static_cast<const C*>(p.k_cache) + col;
    const C* vc = static_cast<const C*>(p.v_cache) + col;
    const int t0 = tile * kTile + tok0;
    if constexpr (kOneBlock) {
      // Past kv_end the address stays inside block 0 (nothing is read).
      const int64_t off = int64_t{max(ids[0], 0)} * p.block_stride +
                          (t0 - p.block_div(t0) * p.block_size) * p.token_stride;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const bool ok = ids[0] >= 0 && t0 + i < kv_end;
        const uint32_t so = dst_off(i);
        cp_async16(ks + so, kc + off + i * p.token_stride, ok);
        cp_async16(vs + so, vc + off + i * p.token_stride, ok);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int t = t0 + i;
        const bool ok = ids[i] >= 0;
        const int64_t off = int64_t{ok ? ids[i] : 0} * p.block_stride +
                            (t - p.block_div(t) * p.block_size) * p.token_stride;
        const uint32_t so = dst_off(i);
        cp_async16(ks + so, kc + off, ok);
        cp_async16(vs + so, vc + off, ok);
      }
    }
  }
};

// ---- the kernel -----------------------------------------------------------------------------

// A work item's geometry, read from the plan and the CSR arrays.
struct Item {
  int kv_head;
  int q0;      // first row of the chunk in q / out (tokens)
  int rows;    // stacked rows of the chunk: tokens x group
  int row0;    // first stacked row of the tile
  int start;   // position of the chunk's first token
  int blocks;  // offset of the chunk's block table in block_indices

  __device__ __forceinline__ static Item load(const PrefillParams& p) {
    const int4 it = p.items[blockIdx.x];  // {chunk, kv_head, row tile, KV tiles}
    Item r;
    r.kv_head = it.y;
    r.q0 = p.q_indptr[it.x];
    r.rows = (p.q_indptr[it.x + 1] - r.q0) * p.group;
    r.row0 = it.z * kRows;
    r.start = p.start_pos[it.x];
    r.blocks = p.block_indptr[it.x];
    return r;
  }
  // Row of q / out / lse of stacked row r (< rows): token r / group, head kv_head * group +
  // r % group.
  __device__ __forceinline__ int q_row(const PrefillParams& p, int r) const {
    return (q0 + r / p.group) * p.num_q_heads + kv_head * p.group + r % p.group;
  }
};

// q and out are in T, the products in M (fp16 over an FP8 cache, kFp8).
template <int D, typename T, bool kOneBlock, bool kFp8>
__global__ void __launch_bounds__(kThreads, ctas_per_sm(D)) prefill_kernel(const PrefillParams p) {
  using M = MmaType<T, kFp8>;
  using Loader = TileLoader<D, M, kOneBlock, kFp8>;
  constexpr int kPitch = Loader::kPitch;
  constexpr int kStageBytes = kTile * kPitch;  // K (or V) of one stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Stages start 256-byte aligned (pair_offset XORs address bits 5..7).
  const uint32_t smem = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 255u) & ~255u;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;

  int kv_end, lim[2], lo_lim, hi_lim, kv_head, table;
  uint32_t qf[D / 16][4];  // Q fragments (A operand, row-major 16 x D), see below
  {
    const Item it = Item::load(p);
    if (it.row0 >= it.rows) return;  // a plan made from other arrays: this tile does not exist
    kv_head = it.kv_head;
    table = it.blocks;
    // Keys the CTA needs: up to its last row's position.
    kv_end = it.start + (min(it.rows, it.row0 + kRows) - 1) / p.group + 1;
    // This thread's rows are r = row0 + 16 warp + qr + 8h (h = 0, 1); lim[h]: the row attends
    // keys at positions < lim[h] (0 for padding, which then sees no key and is never stored).
    // The warp's rows [wr0, wr1]: tiles reaching lo_lim need the mask, tiles from hi_lim on are
    // skipped (hi_lim 0: a warp of padding rows, which only helps with the copies).
    const int wr0 = it.row0 + warp * 16;
    lo_lim = it.start + wr0 / p.group + 1;
    hi_lim = wr0 < it.rows ? it.start + (min(wr0 + 15, it.rows - 1)) / p.group + 1 : 0;
    const uint32_t* q32 = static_cast<const uint32_t*>(p.q);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wr0 + qr + 8 * h;
      const bool ok = r < it.rows;
      lim[h] = ok ? it.start + r / p.group + 1 : 0;
      // qf[k][h], qf[k][2 + h]: columns 16k + 2qc (+1) and 16k + 2qc + 8 (+9) of row h.
      const uint32_t* src = q32 + int64_t{ok ? it.q_row(p, r) : 0} * (D / 2) + qc;
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        qf[k][h] = ok ? to_mma_pair<T, M>(__ldg(src + k * 8)) : 0u;
        qf[k][2 + h] = ok ? to_mma_pair<T, M>(__ldg(src + k * 8 + 4)) : 0u;
      }
    }
  }

  // Stage s's K at stage_at(s), its V v_at bytes on (warp_ops.cuh stage_k).
  constexpr uint32_t v_at = stage_v<kFp8, kStageBytes>;
  auto stage_at = [smem](int s) { return stage_k<kFp8, kStageBytes>(smem, s); };
  Loader ld(p, p.block_indices + table, kv_head, tid, kv_end);
  ld.load(0, stage_at(0), stage_at(0) + v_at);
  cp_async_commit();

  const uint32_t k_off = k_lane_offset(lane, 0, kPitch), v_off = v_lane_offset(lane, 0, kPitch);
  OnlineSoftmax<D> st;

  for (int t0 = 0, stage = 0; t0 < kv_end; t0 += kTile, stage ^= 1) {
    cp_async_wait_all();
    __syncthreads();  // this tile landed for all; the other stage (last tile's) is free
    if (t0 + kTile < kv_end) {
      const uint32_t nb = stage_at(stage ^ 1);
      ld.load(t0 / kTile + 1, nb, nb + v_at);
    }
    cp_async_commit();
    uint32_t base = stage_at(stage);
    if constexpr (kFp8) {  // the codes landed for all: widen them into the one M stage
      ld.widen(base, base + v_at, smem, smem + kStageBytes);
      __syncthreads();
      base = smem;
    }
#pragma unroll
    for (int half = 0; half < kTile / kSub; ++half) {
      const int t = t0 + half * kSub;  // position of the step's first key
      if (t >= hi_lim) break;          // past every row of the warp
      const uint32_t ks = base + half * kSub * kPitch + k_off;
      const uint32_t vs = ks - k_off + kStageBytes + v_off;

      // S = Q K^T: the warp's 16 rows x 32 keys (n-tile j = keys 8j .. 8j + 7).
      float s[kSub / 8][4];
#pragma unroll
      for (int j = 0; j < kSub / 8; ++j)
        s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        const uint32_t a = pair_offset(ks, k);
#pragma unroll
        for (int j = 0; j < kSub / 8; j += 2) {
          uint32_t b[4];
          ldmatrix_x4(b, a + j * 8 * kPitch);
          mma16816<M>(s[j], qf[k], b[0], b[1]);
          mma16816<M>(s[j + 1], qf[k], b[2], b[3]);
        }
      }

      st.fold(s, p.scale_log2, t + kSub > lo_lim, t + 2 * qc, lim);

      // O += P V: P's accumulator layout is the A fragment of the next product (k-step kk =
      // keys 16kk .. 16kk + 15).
#pragma unroll
      for (int kk = 0; kk < kSub / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = pack2<M>(s[2 * kk][0], s[2 * kk][1]);
        pa[1] = pack2<M>(s[2 * kk][2], s[2 * kk][3]);
        pa[2] = pack2<M>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        pa[3] = pack2<M>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int m = 0; m < D / 16; ++m) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, pair_offset(vs, m) + kk * 16 * kPitch);
          mma16816<M>(st.o[2 * m], pa, b[0], b[1]);
          mma16816<M>(st.o[2 * m + 1], pa, b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait_all();  // only empty groups can be left; no copy outlives the CTA

  st.reduce_sums();
  // The item is read again rather than held in registers through the loop.
  const Item it = Item::load(p);
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = it.row0 + warp * 16 + qr + 8 * h;
    if (r >= it.rows) continue;
    const int row = it.q_row(p, r);
    const float inv = st.inv_sum(h) * p.v_scale;
    // Columns 2 qc and 2 qc + 1 of each n-tile.
    uint32_t* dst = reinterpret_cast<uint32_t*>(out + int64_t{row} * D) + qc;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      dst[n * 4] = pack2<T>(st.o[n][2 * h] * inv, st.o[n][2 * h + 1] * inv);
    if (p.lse != nullptr && qc == 0) {
      p.lse[row] = st.lse(h, p.scale_log2);
    }
  }
}

// ---- launch ---------------------------------------------------------------------------------

template <int D, typename T, bool kOneBlock, bool kFp8>
cudaError_t launch_kernel(const PrefillParams& params, int num_items, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D, kFp8>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      prefill_kernel<D, T, kOneBlock, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  prefill_kernel<D, T, kOneBlock, kFp8>
      <<<static_cast<unsigned>(num_items), kThreads, kSmem, stream>>>(params);
  return cudaGetLastError();
}

template <int D, typename T, bool kFp8>
cudaError_t launch_typed(const PrefillParams& params, int num_items, cudaStream_t stream) {
  return params.block_size % TileLoader<D, T, true>::kPer == 0
             ? launch_kernel<D, T, true, kFp8>(params, num_items, stream)
             : launch_kernel<D, T, false, kFp8>(params, num_items, stream);
}

bool shape_supported(const AttentionShape& shape) {
  return (shape.head_dim == 64 || shape.head_dim == 128) && shape.num_kv_heads > 0 &&
         shape.num_q_heads > 0 && shape.num_q_heads % shape.num_kv_heads == 0 &&
         shape.block_size > 0;
}

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

}  // namespace

PrefillPlan make_prefill_plan(const AttentionShape& shape, const int32_t* q_indptr,
                              const int32_t* start_pos, int num_chunks) {
  struct Item {
    int32_t chunk, kv_head, row_tile, kv_tiles;
  };
  PrefillPlan plan;
  plan.num_chunks = num_chunks;
  plan.num_tokens = num_chunks > 0 ? q_indptr[num_chunks] : 0;
  const int g = shape.group();
  std::vector<Item> items;
  for (int c = 0; c < num_chunks; ++c) {
    const int64_t rows = int64_t{q_indptr[c + 1] - q_indptr[c]} * g;
    for (int r = 0; r < ceil_div(rows, kRows); ++r) {
      const int64_t last_row = std::min<int64_t>(rows, int64_t{r + 1} * kRows) - 1;
      const int64_t kv_end = start_pos[c] + last_row / g + 1;
      for (int h = 0; h < shape.num_kv_heads; ++h)
        items.push_back({c, h, r, ceil_div(kv_end, kTile)});
    }
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const Item& a, const Item& b) { return a.kv_tiles > b.kv_tiles; });
  plan.num_items = static_cast<int32_t>(items.size());
  plan.host.reserve(items.size() * 4);
  for (const Item& it : items) {
    plan.host.insert(plan.host.end(), {it.chunk, it.kv_head, it.row_tile, it.kv_tiles});
    plan.num_kv_tiles += it.kv_tiles;
  }
  return plan;
}

size_t prefill_workspace_bytes(const PrefillPlan& plan) {
  return plan.device_bytes();
}

cudaError_t upload_prefill_plan(PrefillPlan& plan, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream) {
  if (workspace_bytes < prefill_workspace_bytes(plan) ||
      reinterpret_cast<uintptr_t>(workspace) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  plan.device = static_cast<const int32_t*>(workspace);
  if (plan.host.empty()) return cudaSuccess;
  return cudaMemcpyAsync(workspace, plan.host.data(), plan.device_bytes(), cudaMemcpyHostToDevice,
                         stream);
}

cudaError_t paged_prefill(const AttentionShape& shape, KvDtype dtype, const PrefillPlan& plan,
                          const void* q, const void* k_cache, const void* v_cache,
                          const int32_t* q_indptr, const int32_t* block_indptr,
                          const int32_t* block_indices, const int32_t* start_pos, void* out,
                          float* lse, cudaStream_t stream, const KvQuant& quant) {
  const bool f16 = dtype == KvDtype::kF16;
  if (!shape_supported(shape) || (plan.num_items > 0 && plan.device == nullptr) ||
      (quant.fp8 && f16)) {
    return cudaErrorInvalidValue;
  }
  if (plan.num_items == 0) return cudaSuccess;
  PrefillParams p{};
  p.q = q;
  p.k_cache = k_cache;
  p.v_cache = v_cache;
  p.out = out;
  p.lse = lse;
  p.items = reinterpret_cast<const int4*>(plan.device);
  p.q_indptr = q_indptr;
  p.block_indptr = block_indptr;
  p.block_indices = block_indices;
  p.start_pos = start_pos;
  p.num_q_heads = shape.num_q_heads;
  p.num_kv_heads = shape.num_kv_heads;
  p.group = shape.group();
  p.block_size = shape.block_size;
  p.token_stride = shape.num_kv_heads * shape.head_dim;
  p.block_stride = shape.block_size * p.token_stride;
  p.block_div = FastDiv::make(shape.block_size);
  p.scale_log2 = shape.scale * kLog2e * (quant.fp8 ? quant.k_scale : 1.0f);
  p.v_scale = quant.fp8 ? quant.v_scale : 1.0f;
  using bf16 = __nv_bfloat16;
  if (shape.head_dim == 64) {
    return quant.fp8 ? launch_typed<64, bf16, true>(p, plan.num_items, stream)
           : f16     ? launch_typed<64, __half, false>(p, plan.num_items, stream)
                     : launch_typed<64, bf16, false>(p, plan.num_items, stream);
  }
  return quant.fp8 ? launch_typed<128, bf16, true>(p, plan.num_items, stream)
         : f16     ? launch_typed<128, __half, false>(p, plan.num_items, stream)
                   : launch_typed<128, bf16, false>(p, plan.num_items, stream);
}

}  // namespace kvc::kernels::cuda
