// Decode attention, part 4: the decode item (a sequence's split over a group of KV heads), over a
// cache in the KvDtype and over an FP8 cache.
// Private to kernels/cuda/attention.cu (one translation unit: the templates live in its
// anonymous namespace); split by section so each part reads on its own.
#pragma once

#include "kernels/cuda/attention_state.cuh"

namespace kvc::kernels::cuda {
namespace {

// ---- decode item ----------------------------------------------------------------------------

// What decode item `index` covers: (sequence, split, group of HW KV heads), head group fastest;
// warp w's KV head; its partial unit and token range.
struct DecodeWork {
  int hg, kv_head, heads_here, t_begin, t_end;
  int64_t seq, unit;

  template <int HW>
  __device__ __forceinline__ static DecodeWork of(const AttendParams& p, int64_t index, int warp) {
    DecodeWork w;
    const int head_groups = (p.num_kv_heads + HW - 1) / HW;
    w.hg = static_cast<int>(index % head_groups);
    const int64_t piece = index / head_groups;
    const int split = static_cast<int>(piece % p.num_splits);
    w.seq = piece / p.num_splits;
    w.kv_head = w.hg * HW + warp;
    w.heads_here = min(HW, p.num_kv_heads - w.hg * HW);
    w.unit = p.decode_unit_base + w.seq * p.num_splits + split;
    w.t_begin = split * p.split_tokens;
    w.t_end = min(p.seq_lens[w.seq], w.t_begin + p.split_tokens);
    return w;
  }
  // An empty split's partial: the identity state (O 0, LSE -inf) of the warp's query heads.
  template <int D>
  __device__ __forceinline__ void write_identity(const AttendParams& p, int warp, int lane) const {
    if (warp >= heads_here) return;
    for (int e = lane; e < p.group * D; e += 32) {
      const int64_t pr = unit * p.num_q_heads + kv_head * p.group + e / D;
      p.part_o[pr * D + e % D] = 0.f;
      if (e % D == 0) p.part_lse[pr] = -CUDART_INF_F;
    }
  }
};

// How a decode item stages a tile: kHeadsTile tokens x HW heads x D elements of kElemBytes
// each, of K and of V, token-major; each of the 32 x HW threads copies 16-byte chunks, kPer rows
// kStep tokens apart.
template <int D, int HW, int kElemBytes>
struct DecodeStage {
  static constexpr int kCpr = D * kElemBytes / 16;         // 16-byte chunks of one head's row
  static constexpr int kTokChunks = HW * kCpr;             // chunks of one token's HW heads
  static constexpr int kStep = 32 * HW / kTokChunks;       // tokens between a thread's copies
  static constexpr int kPer = kHeadsTile / kStep;          // rows a thread copies per stage
  static constexpr int kPitch = HW * D * kElemBytes;       // bytes per staged token
  static constexpr int kStageBytes = kHeadsTile * kPitch;  // one of K or V
  static_assert(kPer * kStep == kHeadsTile && kTokChunks % 8 == 0);
};

// One (sequence, split, group of HW KV heads): warp w owns KV head HW * g + w (idle past
// num_kv_heads) with its query heads as rows (padded to 16; group <= 16). A stage is 16 tokens x
// HW heads x D of K and of V, token-major, 16-byte chunks XOR-swizzled by token.
template <int D, typename T, int HW, int STG>
__device__ __forceinline__ void decode_item(const AttendParams& p, int64_t index,
                                            uint32_t smem_base) {
  using G = DecodeStage<D, HW, sizeof(T)>;
  constexpr int kCpr = G::kCpr, kTokChunks = G::kTokChunks, kPitch = G::kPitch;
  constexpr int kStageBytes = G::kStageBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;

  const DecodeWork work = DecodeWork::of<HW>(p, index, warp);
  const int hg = work.hg, kv_head = work.kv_head, heads_here = work.heads_here;
  const int t_begin = work.t_begin, t_end = work.t_end;
  const int64_t seq = work.seq, unit = work.unit;
  if (t_begin >= t_end) {  // an empty split is the identity state
    work.write_identity<D>(p, warp, lane);
    return;
  }

  const int within = tid % kTokChunks;  // chunk within the token's HW heads
  const int ld_head = within / kCpr;
  StageLoader<G::kPer, G::kStep, T> ld;
  // A thread whose head is past num_kv_heads copies nothing (its rows stay unused).
  ld.template init<D>(p, p.block_indices + p.block_indptr[seq], hg * HW * D + within * 8,
                      tid / kTokChunks, t_begin, ld_head < heads_here ? t_end : t_begin,
                      kHeadsTile);
  ld.sm_row = ld.tok0 * kPitch + ld_head * D * sizeof(T);
  ld.sm_step = G::kStep * kPitch;
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
  load_q<D, T, T>(qf, p.q, active && qr < p.group ? qrow0 + qr : -1,
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

// ---- decode item over an FP8 cache ---------------------------------------------------------
//
// The same item over E4M3 codes, with no fp16 stage: the codes stay in shared memory (16-byte
// chunks of a token's HW x D bytes, XOR-swizzled by token & 7 over the row's chunks) and each lane
// widens the codes of its own mma fragments in registers (one cvt per fragment register). Both
// products run in fp16 over permuted dimensions, so that a lane's codes are contiguous bytes:
//  - S = Q K^T sums over d in any order: k-step kk's slots (2t, 2t + 1, 2t + 8, 2t + 9) of lane
//    t = lane & 3 are d = t D/4 + 4 kk + (0, 1, 2, 3), so the lane's keys of a token are D/4
//    consecutive bytes (and its query values D/4 consecutive elements);
//  - O += P V: n-tile n's column of lane g = lane >> 2 is d = g D/8 + n, so the lane's values of a
//    token are D/8 consecutive bytes, and two tokens' codes pair up by byte permutes; lane t's
//    accumulator columns (2t, 2t + 1) are then d = 2t D/8 + n and (2t + 1) D/8 + n (the store
//    writes them there).
// Raw stages are a quarter of the bf16 item's, so STG is larger (decode_smem_bytes).

template <int D, typename T, int HW, int STG>
__device__ __forceinline__ void decode_item_fp8(const AttendParams& p, int64_t index,
                                                uint32_t smem_base) {
  using M = __half;
  using G = DecodeStage<D, HW, 1>;
  constexpr int kCph = G::kCpr, kTokChunks = G::kTokChunks, kPitch = G::kPitch;
  constexpr int kStageBytes = G::kStageBytes;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  const DecodeWork work = DecodeWork::of<HW>(p, index, warp);
  const int hg = work.hg, kv_head = work.kv_head, heads_here = work.heads_here;
  const int t_begin = work.t_begin, t_end = work.t_end;
  const int64_t seq = work.seq, unit = work.unit;
  if (t_begin >= t_end) {  // an empty split is the identity state
    work.write_identity<D>(p, warp, lane);
    return;
  }

  const int within = tid % kTokChunks;         // chunk within the token's HW heads
  StageLoader<G::kPer, G::kStep, uint8_t> ld;  // 16 codes per copy
  ld.template init<D>(p, p.block_indices + p.block_indptr[seq], hg * HW * D + within * 16,
                      tid / kTokChunks, t_begin, within / kCph < heads_here ? t_end : t_begin,
                      kHeadsTile);
  ld.sm_row = ld.tok0 * kPitch;
  ld.sm_step = G::kStep * kPitch;
  ld.sm_chunk = within;
  static_assert(kKvTileTokens % kHeadsTile == 0);
  ld.one_block = p.block_size % kHeadsTile == 0;
  auto stage_at = [smem_base](int s) { return stage_k<false, kStageBytes>(smem_base, s); };

  const int num_tiles = (t_end - t_begin + kHeadsTile - 1) / kHeadsTile;
  ld.fetch(0);
#pragma unroll 1
  for (int s = 0; s < STG - 1; ++s) {
    if (s < num_tiles) {
      ld.issue(s, stage_at(s), stage_at(s) + kStageBytes);
      ld.fetch(s + 1);
    }
    cp_async_commit();
  }

  const bool active = warp < heads_here;
  // Query fragments in the permuted k order: qf[kk][0 / 2] are row g's elements
  // t D/4 + 4 kk + (0, 1) / (2, 3), [1 / 3] row g + 8's.
  uint32_t qf[D / 16][4];
  {
    const int64_t qrow0 = seq * p.num_q_heads + int64_t{kv_head} * p.group;
    const int64_t rows[2] = {active && g < p.group ? qrow0 + g : -1,
                             active && g + 8 < p.group ? qrow0 + g + 8 : -1};
    const uint32_t* q32 = static_cast<const uint32_t*>(p.q);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint2 v = make_uint2(0u, 0u);
        if (rows[h] >= 0)
          v = __ldg(reinterpret_cast<const uint2*>(q32 + rows[h] * (D / 2) + t * (D / 8) + 2 * kk));
        qf[kk][h] = to_mma_pair<T, M>(v.x);
        qf[kk][2 + h] = to_mma_pair<T, M>(v.y);
      }
    }
  }
  // Byte offsets (before the stage's base) of this lane's codes: keys of token row r at
  // k_at(r, c) for its chunk c < D / 64 (its D/4 bytes), values at v_at(r) (its D/8 bytes).
  const int head_chunk0 = warp * kCph;
  auto chunk_at = [](int r, int c) {
    return static_cast<uint32_t>(r * kPitch + ((c ^ (r & 7)) << 4));
  };
  auto k_at = [&](int r, int c) { return chunk_at(r, head_chunk0 + t * (kCph / 4) + c); };
  auto v_at = [&](int r) { return chunk_at(r, head_chunk0 + g * kCph / 8) + (g * (D / 8)) % 16; };
  RowState<D> st;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<STG - 2>();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + STG - 1 < num_tiles) {
      const uint32_t nb = stage_at((tile + STG - 1) % STG);
      ld.issue(tile + STG - 1, nb, nb + kStageBytes);
      ld.fetch(tile + STG);
    }
    cp_async_commit();
    if (!active) continue;

    const uint32_t ks = stage_at(tile % STG);
    const uint32_t vs = ks + kStageBytes;

    // S = Q K^T: 16 rows x 16 tokens (n-tile j: tokens 8j .. 8j + 7, this lane's token 8j + g).
    float s[2][4] = {};
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      uint32_t w[D / 16];  // this lane's D/4 key codes of token 8j + g
#pragma unroll
      for (int c = 0; c < D / 64; ++c) {
        const uint4 x = lds128(ks + k_at(8 * j + g, c));
        w[4 * c] = x.x, w[4 * c + 1] = x.y, w[4 * c + 2] = x.z, w[4 * c + 3] = x.w;
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        mma16816<M>(s[j], qf[kk], e4m3x2_to_f16x2(w[kk]), e4m3x2_to_f16x2(w[kk] >> 16));
    }
    const int t0 = t_begin + tile * kHeadsTile;
    st.softmax(s, p.scale_log2, t0 + kHeadsTile > t_end, t0 + t * 2, t_end);

    // O += P V (k = the 16 tokens; this lane's b0 pairs tokens 2t and 2t + 1, b1 2t + 8 and
    // 2t + 9, at its D/8 columns).
    uint32_t a[4];
    a[0] = pack2<M>(s[0][0], s[0][1]);
    a[1] = pack2<M>(s[0][2], s[0][3]);
    a[2] = pack2<M>(s[1][0], s[1][1]);
    a[3] = pack2<M>(s[1][2], s[1][3]);
    constexpr int kWords = D / 32;  // 4-byte words of this lane's codes of one token
    uint32_t v[4][kWords];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = 2 * t + (i & 1) + 8 * (i >> 1);
      if constexpr (kWords == 4) {
        const uint4 x = lds128(vs + v_at(r));
        v[i][0] = x.x, v[i][1] = x.y, v[i][2] = x.z, v[i][3] = x.w;
      } else {
        const uint2 x = lds64(vs + v_at(r));
        v[i][0] = x.x, v[i][1] = x.y;
      }
    }
#pragma unroll
    for (int m = 0; m < kWords; ++m) {
      const uint32_t lo0 = byte_perm(v[0][m], v[1][m], 0x5140);  // n = 4m, 4m + 1
      const uint32_t hi0 = byte_perm(v[0][m], v[1][m], 0x7362);  // n = 4m + 2, 4m + 3
      const uint32_t lo1 = byte_perm(v[2][m], v[3][m], 0x5140);
      const uint32_t hi1 = byte_perm(v[2][m], v[3][m], 0x7362);
      mma16816<M>(st.o[4 * m], a, e4m3x2_to_f16x2(lo0), e4m3x2_to_f16x2(lo1));
      mma16816<M>(st.o[4 * m + 1], a, e4m3x2_to_f16x2(lo0 >> 16), e4m3x2_to_f16x2(lo1 >> 16));
      mma16816<M>(st.o[4 * m + 2], a, e4m3x2_to_f16x2(hi0), e4m3x2_to_f16x2(hi1));
      mma16816<M>(st.o[4 * m + 3], a, e4m3x2_to_f16x2(hi0 >> 16), e4m3x2_to_f16x2(hi1 >> 16));
    }
  }
  cp_async_wait<0>();
  if (!active) return;

  st.reduce_sums();
  // Row h's columns: o[n][2h] is d = 2t D/8 + n, o[n][2h + 1] is d = (2t + 1) D/8 + n.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = g + 8 * h;
    if (r >= p.group) continue;
    const int64_t pr = unit * p.num_q_heads + int64_t{kv_head} * p.group + r;
    const float inv = st.inv_sum(h) * p.v_scale;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float* dst = p.part_o + pr * D + (2 * t + c) * (D / 8);
#pragma unroll
      for (int n = 0; n < D / 8; n += 4)
        *reinterpret_cast<float4*>(dst + n) =
            make_float4(st.o[n][2 * h + c] * inv, st.o[n + 1][2 * h + c] * inv,
                        st.o[n + 2][2 * h + c] * inv, st.o[n + 3][2 * h + c] * inv);
    }
    if (t == 0) p.part_lse[pr] = st.lse(h, p.scale_log2);
  }
}

}  // namespace
}  // namespace kvc::kernels::cuda
