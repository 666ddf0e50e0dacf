// Decode attention, part 4: the decode item (a sequence's split over a group of KV heads).
// Private to kernels/cuda/attention.cu (one translation unit: the templates live in its
// anonymous namespace); split by section so each part reads on its own.
#pragma once

#include "kernels/cuda/attention_state.cuh"

namespace kvc::kernels::cuda {
namespace {

// ---- decode item ----------------------------------------------------------------------------
//
// One (sequence, split, group of HW KV heads): warp w owns KV head HW * g + w (idle past
// num_kv_heads) with its query heads as rows (padded to 16; group <= 16). A stage is 16 tokens x
// HW heads x D of K and of V, token-major, 16-byte chunks XOR-swizzled by token. q and the
// output are in T; the products in M (fp16 over an FP8 cache, whose codes go through STG raw
// stages after the one M stage: decode_smem_bytes).
template <int D, typename T, int HW, int STG, bool kFp8>
__device__ __forceinline__ void decode_item(const AttendParams& p, int64_t index,
                                            uint32_t smem_base) {
  using M = MmaType<T, kFp8>;
  constexpr int kCpr = D / 8;
  constexpr int kTokChunks = HW * kCpr;  // chunks of one token's HW heads
  constexpr int kThr = 32 * HW;
  constexpr int kStep = kThr / kTokChunks;  // tokens between a thread's copies
  constexpr int kPer = kHeadsTile / kStep;
  constexpr int kPitch = HW * D * sizeof(M);        // bytes per staged token
  constexpr int kStageBytes = kHeadsTile * kPitch;  // one of K or V
  constexpr int kRawBytes = kStageBytes / 2;        // one of K or V as codes (kFp8)
  static_assert(kPer * kStep == kHeadsTile);
  // Stage s's K (its V follows at v_at): the stage itself, or its raw stage.
  constexpr uint32_t v_at = kFp8 ? kRawBytes : kStageBytes;
  auto stage_k = [smem_base](int s) {
    return kFp8 ? smem_base + 2 * kStageBytes + s * 2 * kRawBytes : smem_base + s * 2 * kStageBytes;
  };
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
  StageLoader<kPer, kStep, M, kFp8, HW * D> ld;
  // A thread whose head is past num_kv_heads copies nothing (its rows stay unused).
  ld.template init<D>(p, p.block_indices + p.block_indptr[seq], hg * HW * D + within * 8,
                      tid / kTokChunks, t_begin, ld_head < heads_here ? t_end : t_begin,
                      kHeadsTile);
  ld.sm_row = ld.tok0 * kPitch + ld_head * D * sizeof(M);
  ld.sm_step = kStep * kPitch;
  ld.sm_chunk = within % kCpr;
  ld.raw_row = ld.tok0 * (HW * D) + within * 8;
  // Splits start at multiples of kKvTileTokens, so a stage is one block when block_size is a
  // multiple of the stage.
  static_assert(kKvTileTokens % kHeadsTile == 0);
  ld.one_block = p.block_size % kHeadsTile == 0;

  const int num_tiles = (t_end - t_begin + kHeadsTile - 1) / kHeadsTile;
  ld.fetch(0);
#pragma unroll 1
  for (int s = 0; s < STG - 1; ++s) {
    if (s < num_tiles) {
      ld.issue(s, stage_k(s), stage_k(s) + v_at);
      ld.fetch(s + 1);
    }
    cp_async_commit();
  }

  const bool active = warp < heads_here;
  const int64_t qrow0 = seq * p.num_q_heads + int64_t{kv_head} * p.group;
  uint32_t qf[D / 16][4];
  load_q<D, T, M>(qf, p.q, active && qr < p.group ? qrow0 + qr : -1,
                  active && qr + 8 < p.group ? qrow0 + qr + 8 : -1, qc);
  const LaneOffsets lo(lane, kPitch);
  const uint32_t head_byte = warp * D * sizeof(M);
  RowState<D> st;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<STG - 2>();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + STG - 1 < num_tiles) {
      const uint32_t nb = stage_k((tile + STG - 1) % STG);
      ld.issue(tile + STG - 1, nb, nb + v_at);
      ld.fetch(tile + STG);
    }
    cp_async_commit();
    uint32_t stage = stage_k(tile % STG);
    if constexpr (kFp8) {  // the codes landed for all: widen them into the one M stage
      ld.widen(stage, stage + v_at, smem_base, smem_base + kStageBytes);
      __syncthreads();
      stage = smem_base;
    }
    if (!active) continue;

    const uint32_t ks = stage + head_byte;
    const uint32_t vs = ks + kStageBytes;

    // S = Q K^T: 16 rows x 16 tokens.
    float s[2][4] = {};
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      uint32_t b[4];
      ldmatrix_x4(b, ks + LaneOffsets::at(lo.k_off, k));
      mma16816<M>(s[0], qf[k], b[0], b[1]);
      mma16816<M>(s[1], qf[k], b[2], b[3]);
    }
    const int t0 = t_begin + tile * kHeadsTile;
    st.softmax(s, p.scale_log2, t0 + kHeadsTile > t_end, t0 + qc * 2, t_end);

    // O += P V.
    uint32_t a[4];
    a[0] = pack2<M>(s[0][0], s[0][1]);
    a[1] = pack2<M>(s[0][2], s[0][3]);
    a[2] = pack2<M>(s[1][0], s[1][1]);
    a[3] = pack2<M>(s[1][2], s[1][3]);
#pragma unroll
    for (int m = 0; m < D / 16; ++m) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, vs + LaneOffsets::at(lo.v_off, m));
      mma16816<M>(st.o[2 * m], a, b[0], b[1]);
      mma16816<M>(st.o[2 * m + 1], a, b[2], b[3]);
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

}  // namespace
}  // namespace kvc::kernels::cuda
