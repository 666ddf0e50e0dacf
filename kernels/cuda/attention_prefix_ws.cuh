// Decode attention, part 4: the warp-specialised prefix pass (sm_90a; FlashAttention-3's shape).
// Private to kernels/cuda/attention.cu (one translation unit: the templates live in its
// anonymous namespace); split by section so each part reads on its own.
//
// One CTA per SM, persistent over the prefix items of 128 stacked rows (kWsNodeRowTile):
//  - warpgroup 0, the producer, copies each 64-token K/V tile of the item's chunk into a ring of
//    kWsStages stages (today's StageLoader and stage layout; over an FP8 cache the codes go
//    through a ring of raw stages and the producer widens them into the ring) and hands a stage
//    over through its `full` mbarrier; it gives registers back (setmaxnreg);
//  - warpgroups 1 and 2, the consumers, own 64 rows each and share every stage (one copy of K and
//    V for 128 rows: half the L2 reads of the 64-row items). Each runs FA3's intra-warpgroup
//    pipeline: S = Q K^T of tile t is issued with O += P V of tile t - 1, and tile t's softmax
//    runs while P V is on the tensor cores (O is rescaled only after it lands); a stage goes back
//    to the producer through its `empty` mbarrier once P V has read it.
// Both sides walk the same items and tiles, so a tile's running index (across the CTA's items)
// names its stage and phase. The items' partials and merge are the 64-row items' exactly.
#pragma once

#include "kernels/cuda/attention_prefix.cuh"

namespace kvc::kernels::cuda {
namespace {

#include "kernels/cuda/mbarrier.cuh"  // mbar_init, mbar_arrive, mbar_wait

constexpr int kWsThreads = 3 * kThreads;  // producer + two consumer warpgroups
constexpr int kWsProducerRegs = 64;
constexpr int kWsConsumerRegs = 208;  // 64 x 128 + 208 x 256 <= 64 K registers
static_assert(kWsNodeRowTile == 2 * 64);

// How many tiles the producer's copies run ahead of the tile it hands over, the ring of
// product-type stages (K and V of 64 tokens) and the ring of raw FP8 stages. Tile t is handed
// over first, then the copies of tile t + kWsAhead are issued: over a 16-bit cache into the
// stage of tile t - 2, whose release is waited there while the consumers work on t - 1 and t;
// over FP8 into the raw stage of tile t - 1, whose widening every producer thread finished
// before this iteration's barrier (the fp16 stage of tile t - 4 is waited before widening t). So
// a hand-over never waits on the consumers' latest tiles.
inline constexpr int kWsAhead = 4;
template <bool kFp8>
inline constexpr int kWsStages = kFp8 ? 4 : kWsAhead + 2;
inline constexpr int kWsRawStages = kWsAhead + 1;

template <int D>
constexpr int ws_stage_bytes() {  // one of K or V of a product-type stage
  return kTile * D * 2;
}
// The rings, then the 2 x kWsStages barriers.
template <int D, bool kFp8>
constexpr int ws_rings_bytes() {
  return kWsStages<kFp8> * 2 * ws_stage_bytes<D>() +
         (kFp8 ? kWsRawStages * ws_stage_bytes<D>() : 0);
}
// K of tile j's product-type stage (its V ws_stage_bytes on), in the rings from `base`.
template <int D, bool kFp8>
__device__ __forceinline__ uint32_t ws_stage(uint32_t base, int j) {
  return base + (j % kWsStages<kFp8>)*2 * ws_stage_bytes<D>();
}
template <int D, bool kFp8>
constexpr int ws_smem_bytes() {
  return ws_rings_bytes<D, kFp8>() + 2 * kWsStages<kFp8> * 8 + 1024;  // + alignment slack
}

// The producer warpgroup (threads 0..127).
template <int D, typename T, bool kFp8>
__device__ __forceinline__ void ws_produce(const AttendParams& p, uint32_t base, uint64_t* full,
                                           uint64_t* empty) {
  using M = MmaType<T, kFp8>;
  constexpr int kS = kWsStages<kFp8>, kA = kWsAhead;
  constexpr uint32_t kStageBytes = ws_stage_bytes<D>();
  const int tid = threadIdx.x;
  auto m_at = [base](int j) { return ws_stage<D, kFp8>(base, j); };
  // kFp8: K codes of tile j's raw stage; its V codes kStageBytes / 2 on.
  auto raw_at = [base](int j) {
    return base + kS * 2 * kStageBytes + (j % kWsRawStages) * kStageBytes;
  };
  int g = 0;  // tiles of the CTA's earlier items
  for (int item = blockIdx.x; item < p.num_node_items; item += gridDim.x) {
    const int4 it = p.node_items[item];
    const PrefixSpan sp(p, it);
    auto ld = prefix_loader<D, M, kFp8>(p, sp, tid);
    const int n = sp.num_tiles;
    // Copies tile t of the item (its block ids fetched) and fetches tile t + 1's.
    auto issue = [&](int t) {
      const int j = g + t;
      if constexpr (kFp8) {
        ld.issue(t, raw_at(j), raw_at(j) + kStageBytes / 2);
      } else {
        mbar_wait(empty + j % kS, ((j / kS) & 1) ^ 1);
        ld.issue(t, m_at(j), m_at(j) + kStageBytes);
      }
      ld.fetch(t + 1);
    };
    ld.fetch(0);
#pragma unroll
    for (int t = 0; t < kA; ++t) {
      if (t < n) issue(t);
      cp_async_commit();
    }
    for (int t = 0; t < n; ++t) {
      const int j = g + t;
      cp_async_wait<kA - 1>();  // this thread's copies of tile t landed
      if constexpr (kFp8) {
        // Every producer thread's codes of tile t landed (a thread widens codes its neighbour
        // copied), and every thread is done widening tile t - 1. The fp16 stage of tile t - 4 is
        // free once its consumers released it.
        named_barrier(1, kThreads);
        mbar_wait(empty + j % kS, ((j / kS) & 1) ^ 1);
        ld.widen(raw_at(j), raw_at(j) + kStageBytes / 2, m_at(j), m_at(j) + kStageBytes);
      }
      fence_proxy_async();  // the stage's generic-proxy writes before the consumers' wgmma reads
      mbar_arrive(full + j % kS);
      if (t + kA < n) issue(t + kA);
      cp_async_commit();
    }
    g += n;
  }
  cp_async_wait<0>();
}

// Consumer warpgroup wg (0 or 1: threads 128 (wg + 1) ..) over rows [64 wg, 64 wg + 64) of each
// item.
template <int D, typename T, bool kFp8>
__device__ __forceinline__ void ws_consume(const AttendParams& p, uint32_t base, uint64_t* full,
                                           uint64_t* empty, int wg) {
  using M = MmaType<T, kFp8>;
  constexpr int kS = kWsStages<kFp8>;
  constexpr uint32_t kStageBytes = ws_stage_bytes<D>();
  const int tid = threadIdx.x - kThreads * (wg + 1), lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;
  auto m_at = [base](int j) { return ws_stage<D, kFp8>(base, j); };
  auto wait_full = [full](int j) { mbar_wait(full + j % kS, (j / kS) & 1); };
  // P V of tile j has read its stage (this warp's wait returned): one of the 8 warps' arrivals.
  auto release = [empty, lane](int j) {
    if (lane == 0) mbar_arrive(empty + j % kS);
  };
  // Ping-pong: the two warpgroups take turns issuing their products (named barriers 2 + wg), so
  // that one's softmax runs while the other's products keep the tensor cores busy. Each issue
  // round is a wait for this warpgroup's turn and a hand-over to the other's; warpgroup 0 goes
  // first.
  constexpr int kTurnThreads = 2 * kThreads;
  auto my_turn = [wg] { named_barrier(2 + wg, kTurnThreads); };
  auto their_turn = [wg] { named_barrier_arrive(3 - wg, kTurnThreads); };
  if (wg == 1) their_turn();
  int g = 0;
  for (int item = blockIdx.x; item < p.num_node_items; item += gridDim.x) {
    const int4 it = p.node_items[item];
    const PrefixSpan sp(p, it);
    const int n = sp.num_tiles;
    const int row0 = it.w * kWsNodeRowTile + wg * 64;
    PrefixRows rows(p, it);
    if (!rows.any(row0)) {  // all padding: keep the ring's count and the turns
      for (int t = 0; t < n; ++t) {
        wait_full(g + t);
        my_turn();
        their_turn();
        release(g + t);
      }
      if (n > 0) {
        my_turn();
        their_turn();
      }
      g += n;
      continue;
    }
    rows.load(p, it, row0, warp, qr);
    rows.locate(p);
    uint32_t qf[D / 16][4];
    load_q<D, T, M>(qf, p.q, rows.q_row[0], rows.q_row[1], qc);
    RowState<D> st;
    uint32_t pa[kTile / 16][4];  // P of the previous tile
    uint32_t vs_prev = 0;        // its V
    for (int t = 0; t < n; ++t) {
      const int j = g + t;
      wait_full(j);
      const uint32_t ks = m_at(j);
      float s[kTile / 8][4];
      my_turn();
      wgmma_scores<D, M>(s, qf, ks);
      if (t > 0) {
        wgmma_pv<D, M>(st.o, pa, vs_prev);
        their_turn();
        wgmma_wait<1>();  // the scores; P V of tile t - 1 may still run
      } else {
        their_turn();
        wgmma_wait<0>();
      }
      fence_regs(s);
      const int t0 = sp.t_begin + t * kTile;
      // O is rescaled after P V of tile t - 1 has landed (no wgmma wait on a divergent path).
      bool rescale = false;
      float a[2];
      st.softmax(s, p.scale_log2, t0 + kTile > sp.t_end, t0 + qc * 2, sp.t_end,
                 [&](const float(&f)[2]) {
                   rescale = true;
                   a[0] = f[0];
                   a[1] = f[1];
                 });
      wgmma_wait<0>();
      fence_o(st.o);
      if (t > 0) release(j - 1);
      if (rescale) st.scale_o(a);
      pack_p<M>(pa, s);
      vs_prev = ks + kStageBytes;
    }
    if (n > 0) {
      my_turn();
      wgmma_pv<D, M>(st.o, pa, vs_prev);
      their_turn();
      wgmma_wait<0>();
      fence_o(st.o);
      release(g + n - 1);
    }
    st.reduce_sums();
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (rows.part_row[h] >= 0) st.store(p, h, rows.part_row[h], qc, p.scale_log2);
    g += n;
  }
  if (wg == 0) my_turn();  // warpgroup 1's last hand-over
}

// The warp-specialised prefix pass: gridDim.x persistent CTAs over the plan's 128-row items.
template <int D, typename T, bool kFp8>
__global__ void __launch_bounds__(kWsThreads, 1) prefix_ws_kernel(const AttendParams p) {
#if KVC_WGMMA
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem_raw + (base - raw) + ws_rings_bytes<D, kFp8>());
  uint64_t* empty = full + kWsStages<kFp8>;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWsStages<kFp8>; ++s) {
      mbar_init(full + s, kThreads);     // every producer thread
      mbar_init(empty + s, 2 * kWarps);  // every consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const int wg = threadIdx.x / kThreads;
  if (wg == 0) {
    setmaxnreg_dec<kWsProducerRegs>();
    ws_produce<D, T, kFp8>(p, base, full, empty);
  } else {
    setmaxnreg_inc<kWsConsumerRegs>();
    ws_consume<D, T, kFp8>(p, base, full, empty, wg - 1);
  }
#else
  (void)p;
  __trap();  // no sm_90a code in this build: the plan must not have chosen this pass
#endif
}

}  // namespace
}  // namespace kvc::kernels::cuda
