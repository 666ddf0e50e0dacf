// Decode attention, part 3: the prefix item (a cascade node's chunk for 64 stacked query rows).
// Private to kernels/cuda/attention.cu (one translation unit: the templates live in its
// anonymous namespace); split by section so each part reads on its own.
#pragma once

#include "kernels/cuda/attention_state.cuh"

namespace kvc::kernels::cuda {
namespace {

// ---- the prefix item's products (sm_90a: wgmma; the warpgroup is the CTA's 4 warps) ----------

// Issues S = Q K^T for 64 rows x 64 tokens from the K stage at ks (D / 64 column blocks of
// [64 tokens x 128 B], 128-byte swizzle) and commits it; the caller waits. One descriptor for
// the stage, each 16-column k-step's an offset of it (desc_at).
template <int D, typename M>
__device__ __forceinline__ void wgmma_scores(float (&s)[kTile / 8][4],
                                             const uint32_t (&qf)[D / 16][4], uint32_t ks) {
  constexpr int kBlockBytes = kTile * 128;
  const uint64_t kd = sw128_desc(ks, 16, 1024);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < D / 16; ++k)  // k-steps of 16 columns (32 bytes) within a column block
    wgmma_m64n64k16<M, 0>(s, qf[k], desc_at(kd, (k / 4) * kBlockBytes + (k % 4) * 32), k > 0);
  wgmma_commit();
}

// Issues O += P V from the V stage at vs (read N-major: V's 16-token k-steps are 2048 bytes
// apart, its 64-column blocks kTile * 128) and commits it; the caller waits. All of P is packed
// before wgmma.fence (a register written after it makes ptxas insert another fence).
template <int D, typename M>
__device__ __forceinline__ void wgmma_pv(float (&o)[D / 8][4], const uint32_t (&pa)[kTile / 16][4],
                                         uint32_t vs) {
  constexpr int kBlockBytes = kTile * 128;
  const uint64_t vd = sw128_desc(vs, kBlockBytes, 1024);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
#pragma unroll
    for (int h = 0; h < D / 64; ++h)
      wgmma_m64n64k16<M, 1>(reinterpret_cast<float(&)[8][4]>(o[h * 8]), pa[kk],
                            desc_at(vd, h * kBlockBytes + kk * 2048), 1);
  }
  wgmma_commit();
}

// P (the softmax's probabilities in the scores' accumulator layout) as the A fragments of
// O += P V.
template <typename M>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[kTile / 16][4],
                                       const float (&s)[kTile / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    pa[kk][0] = pack2<M>(s[2 * kk][0], s[2 * kk][1]);
    pa[kk][1] = pack2<M>(s[2 * kk][2], s[2 * kk][3]);
    pa[kk][2] = pack2<M>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
    pa[kk][3] = pack2<M>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
  }
}

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
// q and the output are in T, the products in M (fp16 over an FP8 cache, whose codes go through
// kStages raw stages after the one M stage: smem_bytes).

// A prefix item's KV range: node, KV head, tokens [t_begin, t_end) of the node's chunk, tiles.
struct PrefixSpan {
  int node, kv_head, t_begin, t_end, num_tiles;
  __device__ __forceinline__ PrefixSpan(const AttendParams& p, const int4& it)
      : node(it.x), kv_head(it.y) {
    const int tokens = (p.node_block_indptr[node + 1] - p.node_block_indptr[node]) * p.block_size;
    t_begin = it.z * p.node_chunk_tokens;
    t_end = min(tokens, t_begin + p.node_chunk_tokens);
    num_tiles = (t_end - t_begin + kTile - 1) / kTile;
  }
};

// The stage loader of a prefix item for the loading thread `tid` of 128 (one warpgroup): its
// kPer token rows and 16-byte column of each 64-token stage, at the offsets of the stage layout
// above (wgmma on sm_90a, mma.sync elsewhere).
template <int D, typename M, bool kFp8>
using PrefixLoader = StageLoader<kTile*(D / 8) / kThreads, 1, M, kFp8, D>;
template <int D, typename M, bool kFp8>
__device__ __forceinline__ PrefixLoader<D, M, kFp8> prefix_loader(const AttendParams& p,
                                                                  const PrefixSpan& sp, int tid) {
  constexpr int kCpr = D / 8;                    // 16-byte chunks per token row
  constexpr int kPer = kTile * kCpr / kThreads;  // consecutive rows per thread (8 or 4)
  constexpr int kPitch = D * sizeof(M);          // bytes per token row (mma.sync layout)
  constexpr int kBlockBytes = kTile * 128;       // one 64-column block (wgmma layout)
  PrefixLoader<D, M, kFp8> ld;
  ld.template init<D>(p, p.node_block_indices + p.node_block_indptr[sp.node],
                      sp.kv_head * D + (tid % kCpr) * 8, tid / kCpr * kPer, sp.t_begin, sp.t_end,
                      kTile);
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
  ld.raw_row = ld.tok0 * D + (tid % kCpr) * 8;
  return ld;
}

// An item's node (read once: its first sequence entry, members, stacked rows members x group and
// the chunk's first partial unit) and the two stacked rows of a thread in a warpgroup whose 64
// rows start at row0 (R_lo = row0 + 16 warp + qr, R_hi = R_lo + 8): their query rows in q and
// partial rows in the workspace (-1: padding). The sequences are loaded first (load), so that
// the page-table and sequence-index loads share one round trip when the caller issues its first
// copies before the rows are located (locate).
struct PrefixRows {
  int seq_begin, members, end;
  int64_t unit;
  int32_t seq[2];
  int head[2], member[2];
  int64_t q_row[2], part_row[2];

  __device__ __forceinline__ PrefixRows(const AttendParams& p, const int4& it)
      : seq_begin(p.node_seq_indptr[it.x]),
        members(p.node_seq_indptr[it.x + 1] - seq_begin),
        end(members * p.group),
        unit(p.node_unit_base[it.x] + int64_t{it.z} * members) {}

  // Whether any of the 64 rows from row0 is a query row.
  __device__ __forceinline__ bool any(int row0) const { return row0 < end; }

  __device__ __forceinline__ void load(const AttendParams& p, const int4& it, int row0, int warp,
                                       int qr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int R = row0 + warp * 16 + qr + 8 * h;
      const bool ok = R < end;
      member[h] = ok ? R / p.group : -1;
      head[h] = it.y * p.group + (ok ? R % p.group : 0);
      seq[h] = ok ? __ldg(p.node_seq_indices + seq_begin + member[h]) : 0;
    }
  }
  __device__ __forceinline__ void locate(const AttendParams& p) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool ok = member[h] >= 0;
      q_row[h] = ok ? int64_t{seq[h]} * p.num_q_heads + head[h] : -1;
      part_row[h] = ok ? (unit + member[h]) * p.num_q_heads + head[h] : -1;
    }
  }
};

template <int D, typename T, bool kFp8>
__device__ __forceinline__ void prefix_item(const AttendParams& p, int item, uint32_t smem_base) {
  using M = MmaType<T, kFp8>;
  constexpr int kPitch = D * sizeof(M);               // bytes per token row (mma.sync layout)
  constexpr int kStageBytes = kTile * D * sizeof(M);  // one of K or V
  // Stage s's K at stage_at(s), its V v_at bytes on (warp_ops.cuh stage_k).
  constexpr uint32_t v_at = stage_v<kFp8, kStageBytes>;
  auto stage_at = [smem_base](int s) { return stage_k<kFp8, kStageBytes>(smem_base, s); };
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;

  const int4 it = p.node_items[item];  // {node, kv_head, chunk, row tile}
  const PrefixSpan sp(p, it);
  const int row0 = it.w * kNodeRowTile;
  PrefixRows rows(p, it);
  rows.load(p, it, row0, warp, qr);
  auto ld = prefix_loader<D, M, kFp8>(p, sp, tid);
  const int num_tiles = sp.num_tiles;
  ld.fetch(0);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      ld.issue(s, stage_at(s), stage_at(s) + v_at);
      ld.fetch(s + 1);
    }
    cp_async_commit();
  }
  rows.locate(p);
  // wgmma needs all 4 warps; mma.sync skips warps whose 16 rows are all padding.
  const bool warp_active = kWgmmaPrefix || rows.any(row0 + warp * 16);
  uint32_t qf[D / 16][4];
  load_q<D, T, M>(qf, p.q, rows.q_row[0], rows.q_row[1], qc);
  const LaneOffsets lo(lane, kPitch);
  RowState<D> st;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + kStages - 1 < num_tiles) {
      const uint32_t nb = stage_at((tile + kStages - 1) % kStages);
      ld.issue(tile + kStages - 1, nb, nb + v_at);
      // wgmma.fence waits for every outstanding register write, the page-table load included:
      // with wgmma it is issued after the P V products instead (below).
      if constexpr (!kWgmmaPrefix) ld.fetch(tile + kStages);
    }
    cp_async_commit();
    uint32_t ks = stage_at(tile % kStages);
    if constexpr (kFp8) {  // the codes landed for all: widen them into the one M stage
      ld.widen(ks, ks + v_at, smem_base, smem_base + kStageBytes);
      fence_proxy_async();
      __syncthreads();
      ks = smem_base;
    }
    if (!warp_active) continue;
    const uint32_t vs = ks + kStageBytes;

    // S = Q K^T: 16 rows (a warp's share of 64) x 64 tokens.
    float s[kTile / 8][4];
    if constexpr (kWgmmaPrefix) {
      wgmma_scores<D, M>(s, qf, ks);
      wgmma_wait<0>();
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
          mma16816<M>(s[j], qf[k], b[0], b[1]);
          mma16816<M>(s[j + 1], qf[k], b[2], b[3]);
        }
      }
    }

    const int t0 = sp.t_begin + tile * kTile;
    st.softmax(s, p.scale_log2, t0 + kTile > sp.t_end, t0 + qc * 2, sp.t_end);

    // O += P V: P's accumulator layout is the A fragment of the next product.
    uint32_t pa[kTile / 16][4];
    pack_p<M>(pa, s);
    if constexpr (kWgmmaPrefix) {
      wgmma_pv<D, M>(st.o, pa, vs);
      if (tile + kStages - 1 < num_tiles) ld.fetch(tile + kStages);
      wgmma_wait<0>();
      fence_o(st.o);
    } else {
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
#pragma unroll
        for (int m = 0; m < D / 16; ++m) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vs + LaneOffsets::at(lo.v_off, m) + kk * 16 * kPitch);
          mma16816<M>(st.o[2 * m], pa[kk], b[0], b[1]);
          mma16816<M>(st.o[2 * m + 1], pa[kk], b[2], b[3]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages before the next item refills them

  st.reduce_sums();
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (rows.part_row[h] >= 0) st.store(p, h, rows.part_row[h], qc, p.scale_log2);
}

}  // namespace
}  // namespace kvc::kernels::cuda
