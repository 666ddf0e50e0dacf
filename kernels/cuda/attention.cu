// Decode attention kernels (see attention.h). One attention kernel serves both passes: a CTA of 4
// warps attends a range of paged KV, 64 tokens per stage, K and V staged in shared memory by
// cp.async (3 stages, 16-byte chunks, XOR-swizzled), scores and P·V on tensor cores
// (mma.sync m16n8k16, fp32 accumulate), online softmax in fp32 registers.
//  - prefix item: 64 stacked query rows (members x GQA group), each warp 16 rows x all 64 tokens.
//  - decode item (flat decode, suffix pass): one (sequence, KV head, split); the group's query
//    heads are the rows (padded to 16), each warp takes 16 of the 64 tokens; the 4 warps' states
//    are merged through shared memory at the end.
// Both write normalised fp32 partials (O, natural-log LSE); merge_kernel folds them in a fixed
// order and writes out in the KV dtype.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention.h"

namespace kvc::kernels::cuda {
namespace {

constexpr int kTile = kKvTileTokens;
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kStages = 3;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D, typename T>
constexpr int smem_bytes() {
  return kStages * 2 * kTile * D * static_cast<int>(sizeof(T));
}

// ---- small device helpers -------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ uint32_t pack2(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16 bytes global -> shared; zero-filled (no global read) when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [kTile, D] staged tile: chunks are
// XOR-swizzled by row so that ldmatrix over 8 consecutive rows hits 8 distinct bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int chunk) {
  return row * D + ((chunk ^ (row & 7)) << 3);
}

// ---- parameters -----------------------------------------------------------------------------

struct AttendParams {
  const void* q;
  const void* k_cache;
  const void* v_cache;
  int num_q_heads, num_kv_heads, group, block_size;
  float scale_log2;  // shape.scale * log2(e): scores are kept in the base-2 domain
  float* part_o;     // [units, num_q_heads, head_dim]
  float* part_lse;   // [units, num_q_heads]

  // Prefix items: grid blocks [0, num_node_items).
  int num_node_items;
  const int4* node_items;  // {node, kv_head, chunk, row tile}
  const int32_t* node_block_indptr;
  const int32_t* node_block_indices;
  const int32_t* node_seq_indptr;
  const int32_t* node_seq_indices;
  const int32_t* node_unit_base;
  int node_chunk_tokens;

  // Decode items: the following num_seqs * num_splits * num_kv_heads blocks.
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

// ---- the attention CTA ----------------------------------------------------------------------

// Rows: warp w owns rows [16 * (w / WK), +16); tokens of each stage: warp w takes
// [(w % WK) * kTile / WK, +kTile / WK). Row r of the CTA reads q row q_row(r) and writes partial
// row part_row(r) (both -1 when the row is padding).
template <int D, typename T, int WK, typename RowMap>
__device__ __forceinline__ void attend(const AttendParams& p, const int32_t* __restrict__ blocks,
                                       int t_begin, int t_end, int kv_head, const RowMap& row_map,
                                       int num_rows) {
  constexpr int kNT = kTile / WK;  // tokens per warp per stage
  constexpr int kCpr = D / 8;      // 16-byte chunks per row
  constexpr int kPerThread = kTile * kCpr / kThreads;
  constexpr int kRowStep = kThreads / kCpr;
  static_assert(kNT % 16 == 0 && kPerThread * kThreads == kTile * kCpr);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wk = warp % WK, wr = warp / WK;
  const int qr = lane >> 2, qc = lane & 3;  // fragment row group and column pair

  const T* __restrict__ kc = static_cast<const T*>(p.k_cache);
  const T* __restrict__ vc = static_cast<const T*>(p.v_cache);
  const int64_t token_stride = int64_t{p.num_kv_heads} * D;
  const int64_t block_stride = token_stride * p.block_size;
  const int ld_chunk = tid % kCpr;
  const int ld_row = tid / kCpr;
  const int64_t head_off = int64_t{kv_head} * D + ld_chunk * 8;

  // Page-table prefetch: element offsets of this thread's rows of the next stage to issue.
  int64_t next_off[kPerThread];
  auto fetch_offsets = [&](int tile) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int t = t_begin + tile * kTile + ld_row + i * kRowStep;
      next_off[i] = -1;
      if (t < t_end) {
        const int b = __ldg(blocks + t / p.block_size);
        next_off[i] =
            int64_t{b} * block_stride + int64_t{t % p.block_size} * token_stride + head_off;
      }
    }
  };
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto issue = [&](int stage) {
    const uint32_t ks = smem_base + stage * 2 * kTile * D * sizeof(T);
    const uint32_t vs = ks + kTile * D * sizeof(T);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int row = ld_row + i * kRowStep;
      const uint32_t o = swz<D>(row, ld_chunk) * sizeof(T);
      const bool ok = next_off[i] >= 0;
      cp_async16(ks + o, ok ? kc + next_off[i] : kc, ok);
      cp_async16(vs + o, ok ? vc + next_off[i] : vc, ok);
    }
  };

  const int num_tiles = (t_end - t_begin + kTile - 1) / kTile;
  fetch_offsets(0);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) {
      issue(s);
      fetch_offsets(s + 1);
    }
    cp_async_commit();
  }

  // Query fragments (A operand, row-major 16 x D), loaded straight from global memory.
  const int row_lo = wr * 16 + qr, row_hi = row_lo + 8;
  const int64_t q_lo = row_map.q_row(row_lo), q_hi = row_map.q_row(row_hi);
  uint32_t qf[D / 16][4];
  {
    const uint32_t* q32 = static_cast<const uint32_t*>(p.q);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const int c = (k * 16 + qc * 2) / 2;
      qf[k][0] = q_lo >= 0 ? __ldg(q32 + q_lo * (D / 2) + c) : 0u;
      qf[k][1] = q_hi >= 0 ? __ldg(q32 + q_hi * (D / 2) + c) : 0u;
      qf[k][2] = q_lo >= 0 ? __ldg(q32 + q_lo * (D / 2) + c + 4) : 0u;
      qf[k][3] = q_hi >= 0 ? __ldg(q32 + q_hi * (D / 2) + c + 4) : 0u;
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_lo = -CUDART_INF_F, m_hi = -CUDART_INF_F, l_lo = 0.f, l_hi = 0.f;
  const bool warp_active = wr * 16 < num_rows;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + kStages - 1 < num_tiles) {
      issue((tile + kStages - 1) % kStages);
      fetch_offsets(tile + kStages);
    }
    cp_async_commit();
    if (!warp_active) continue;

    const uint32_t ks = smem_base + (tile % kStages) * 2 * kTile * D * sizeof(T);
    const uint32_t vs = ks + kTile * D * sizeof(T);
    const int tok0 = wk * kNT;

    // S = Q K^T for this warp's 16 rows x kNT tokens.
    float s[kNT / 8][4];
#pragma unroll
    for (int j = 0; j < kNT / 8; ++j)
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
#pragma unroll
      for (int j = 0; j < kNT / 8; j += 2) {
        const int mi = lane >> 3;
        const int row = tok0 + (j + (mi >> 1)) * 8 + (lane & 7);
        uint32_t b[4];
        ldmatrix_x4(b, ks + swz<D>(row, k * 2 + (mi & 1)) * sizeof(T));
        mma16816<T>(s[j], qf[k], b[0], b[1]);
        mma16816<T>(s[j + 1], qf[k], b[2], b[3]);
      }
    }

    // Online softmax (base 2). Tokens past t_end are masked (only the last stage has any).
    const int tbase = t_begin + tile * kTile + tok0 + qc * 2;
    const bool partial = t_begin + (tile + 1) * kTile > t_end;
    float mx_lo = -CUDART_INF_F, mx_hi = -CUDART_INF_F;
#pragma unroll
    for (int j = 0; j < kNT / 8; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[j][c] * p.scale_log2;
        if (partial && tbase + j * 8 + (c & 1) >= t_end) v = -CUDART_INF_F;
        s[j][c] = v;
      }
      mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    // A row that has seen only masked tokens keeps reference 0 so that no -inf - -inf appears.
    const float ref_lo = mn_lo == -CUDART_INF_F ? 0.f : mn_lo;
    const float ref_hi = mn_hi == -CUDART_INF_F ? 0.f : mn_hi;
    const float a_lo = exp2f(m_lo - ref_lo), a_hi = exp2f(m_hi - ref_hi);
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
#pragma unroll
    for (int j = 0; j < kNT / 8; ++j) {
      s[j][0] = exp2f(s[j][0] - ref_lo);
      s[j][1] = exp2f(s[j][1] - ref_lo);
      s[j][2] = exp2f(s[j][2] - ref_hi);
      s[j][3] = exp2f(s[j][3] - ref_hi);
      l_lo += s[j][0] + s[j][1];
      l_hi += s[j][2] + s[j][3];
    }

    // O += P V: P's accumulator layout is the A fragment of the next product.
#pragma unroll
    for (int kk = 0; kk < kNT / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        const int mi = lane >> 3;
        const int row = tok0 + kk * 16 + (mi & 1) * 8 + (lane & 7);
        uint32_t b[4];
        ldmatrix_x4_trans(b, vs + swz<D>(row, n + (mi >> 1)) * sizeof(T));
        mma16816<T>(o[n], a, b[0], b[1]);
        mma16816<T>(o[n + 1], a, b[2], b[3]);
      }
    }
  }

#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }

  if constexpr (WK == 1) {
    // Each warp owns its rows outright.
    if (!warp_active) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t pr = row_map.part_row(h == 0 ? row_lo : row_hi);
      if (pr < 0) continue;
      const float l = h == 0 ? l_lo : l_hi;
      const float m = h == 0 ? m_lo : m_hi;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      float* dst = p.part_o + pr * D + qc * 2;
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
        *reinterpret_cast<float2*>(dst + n * 8) =
            make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
      if (qc == 0) p.part_lse[pr] = l > 0.f ? (m + log2f(l)) * kLn2 : -CUDART_INF_F;
    }
  } else {
    // The WK warps saw disjoint tokens of the same 16 rows: merge their states in warp order.
    cp_async_wait<0>();
    __syncthreads();  // every warp is done with the stages; reuse them
    float* red_o = reinterpret_cast<float*>(smem_raw);  // [WK][16][D]
    float* red_m = red_o + WK * 16 * D;                 // [WK][16]
    float* red_l = red_m + WK * 16;                     // [WK][16]
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      float* base = red_o + (wk * 16) * D + n * 8 + qc * 2;
      *reinterpret_cast<float2*>(base + qr * D) = make_float2(o[n][0], o[n][1]);
      *reinterpret_cast<float2*>(base + (qr + 8) * D) = make_float2(o[n][2], o[n][3]);
    }
    if (qc == 0) {
      red_m[wk * 16 + qr] = m_lo;
      red_m[wk * 16 + qr + 8] = m_hi;
      red_l[wk * 16 + qr] = l_lo;
      red_l[wk * 16 + qr + 8] = l_hi;
    }
    __syncthreads();
    for (int e = tid; e < num_rows * D; e += kThreads) {
      const int r = e / D, d = e % D;
      float mx = -CUDART_INF_F;
#pragma unroll
      for (int w = 0; w < WK; ++w)
        mx = fmaxf(mx, red_m[w * 16 + r]);
      const float ref = mx == -CUDART_INF_F ? 0.f : mx;
      float l = 0.f, acc = 0.f;
#pragma unroll
      for (int w = 0; w < WK; ++w) {
        const float f = exp2f(red_m[w * 16 + r] - ref);
        l += red_l[w * 16 + r] * f;
        acc += red_o[(w * 16 + r) * D + d] * f;
      }
      const int64_t pr = row_map.part_row(r);
      p.part_o[pr * D + d] = l > 0.f ? acc / l : 0.f;
      if (d == 0) p.part_lse[pr] = l > 0.f ? (mx + log2f(l)) * kLn2 : -CUDART_INF_F;
    }
  }
}

// CTA row r of a prefix item is stacked row R = row0 + r: member R / group, query head
// kv_head * group + R % group. Rows at or past `end` (members x group) are padding.
struct NodeRows {
  int row0, end, group, kv_head, num_q_heads;
  const int32_t* seqs;  // the node's members
  int64_t unit;         // partial unit of member 0 in this chunk
  __device__ int64_t q_row(int r) const {
    const int R = row0 + r;
    if (R >= end) return -1;
    return int64_t{__ldg(seqs + R / group)} * num_q_heads + kv_head * group + R % group;
  }
  __device__ int64_t part_row(int r) const {
    const int R = row0 + r;
    if (R >= end) return -1;
    return (unit + R / group) * num_q_heads + kv_head * group + R % group;
  }
};

// Row r of a decode item: query head kv_head * group + r of sequence seq.
struct SeqRows {
  int group, kv_head, num_q_heads;
  int64_t seq, unit;
  __device__ int64_t q_row(int r) const {
    return r < group ? seq * num_q_heads + kv_head * group + r : -1;
  }
  __device__ int64_t part_row(int r) const {
    return r < group ? unit * num_q_heads + kv_head * group + r : -1;
  }
};

// Grid: prefix items first (the heavier CTAs start first), then the decode items, KV head
// fastest so that the CTAs reading one token's heads run together.
template <int D, typename T>
__global__ void __launch_bounds__(kThreads) attention_kernel(const AttendParams p) {
  const int bid = static_cast<int>(blockIdx.x);
  if (bid < p.num_node_items) {
    const int4 it = p.node_items[bid];  // {node, kv_head, chunk, row tile}
    const int seq_begin = p.node_seq_indptr[it.x];
    const int members = p.node_seq_indptr[it.x + 1] - seq_begin;
    const int tokens = (p.node_block_indptr[it.x + 1] - p.node_block_indptr[it.x]) * p.block_size;
    const int t0 = it.z * p.node_chunk_tokens;
    const int t1 = min(tokens, t0 + p.node_chunk_tokens);
    const int row0 = it.w * kNodeRowTile;
    const int end = members * p.group;
    const NodeRows rows{row0,
                        end,
                        p.group,
                        it.y,
                        p.num_q_heads,
                        p.node_seq_indices + seq_begin,
                        p.node_unit_base[it.x] + int64_t{it.z} * members};
    attend<D, T, 1>(p, p.node_block_indices + p.node_block_indptr[it.x], t0, t1, it.y, rows,
                    min(kNodeRowTile, end - row0));
    return;
  }
  const int64_t d = bid - p.num_node_items;
  const int kv_head = static_cast<int>(d % p.num_kv_heads);
  const int64_t piece = d / p.num_kv_heads;
  const int split = static_cast<int>(piece % p.num_splits);
  const int64_t seq = piece / p.num_splits;
  const SeqRows rows{p.group, kv_head, p.num_q_heads, seq,
                     p.decode_unit_base + seq * p.num_splits + split};
  const int len = p.seq_lens[seq];
  const int t0 = split * p.split_tokens;
  const int t1 = min(len, t0 + p.split_tokens);
  if (t0 >= t1) {  // an empty split is the identity state
    for (int e = threadIdx.x; e < p.group * D; e += kThreads) {
      const int64_t pr = rows.part_row(e / D);
      p.part_o[pr * D + e % D] = 0.f;
      if (e % D == 0) p.part_lse[pr] = -CUDART_INF_F;
    }
    return;
  }
  // group <= 16 (shape_supported): the group is one 16-row fragment.
  attend<D, T, kWarps>(p, p.block_indices + p.block_indptr[seq], t0, t1, kv_head, rows, p.group);
}

// ---- decode over all KV heads of a token range ----------------------------------------------
//
// The fast decode path (num_kv_heads a multiple of 8): a CTA of 8 warps takes one (sequence,
// split, group of 8 KV heads); warp w owns KV head 8 * group + w with its query heads as rows
// (padded to 16). A stage is 16 tokens x 8 heads x D of K and of V: in the NHD layout these are
// 16 contiguous 8 * D-element runs (one contiguous 16 x 8 x D run per tensor when num_kv_heads is
// 8 and the block size 16), so the loads stream whole blocks instead of 256-byte slices at a
// 2 KiB stride. No cross-warp merge: each warp sees all tokens of its head.
constexpr int kHeadsWarps = kDecodeHeadsPerCta;
constexpr int kHeadsThreads = 32 * kHeadsWarps;
constexpr int kHeadsTile = 16;  // tokens per stage

template <int D>
constexpr int heads_stages() {
  return 3;
}
template <int D, typename T>
constexpr int heads_smem_bytes() {
  return heads_stages<D>() * 2 * kHeadsTile * kHeadsWarps * D * static_cast<int>(sizeof(T));
}

// Staged row (token tk, head w) of a [kHeadsTile x 8, D] tile; 16-byte chunks XOR-swizzled by
// token so that ldmatrix over 8 consecutive tokens of one head hits 8 distinct bank groups.
template <int D>
__device__ __forceinline__ int hswz(int tk, int w, int chunk) {
  return (tk * kHeadsWarps + w) * D + ((chunk ^ (tk & 7)) << 3);
}

template <int D, typename T>
__global__ void __launch_bounds__(kHeadsThreads) decode_heads_kernel(const AttendParams p) {
  constexpr int kStg = heads_stages<D>();
  constexpr int kCpr = D / 8;                     // 16-byte chunks per head row
  constexpr int kTokChunks = kHeadsWarps * kCpr;  // chunks of one token (8 heads)
  constexpr int kPerThread = kHeadsTile * kTokChunks / kHeadsThreads;
  constexpr int kTokStep = kHeadsThreads / kTokChunks;       // tokens between a thread's chunks
  constexpr int kStageElems = kHeadsTile * kHeadsWarps * D;  // one of K or V
  static_assert(kPerThread * kHeadsThreads == kHeadsTile * kTokChunks);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int qr = lane >> 2, qc = lane & 3;

  const int head_groups = p.num_kv_heads / kHeadsWarps;
  const int64_t bid = blockIdx.x;
  const int hg = static_cast<int>(bid % head_groups);
  const int64_t piece = bid / head_groups;
  const int split = static_cast<int>(piece % p.num_splits);
  const int64_t seq = piece / p.num_splits;
  const int kv_head = hg * kHeadsWarps + warp;
  const int64_t unit = p.decode_unit_base + seq * p.num_splits + split;
  const int len = p.seq_lens[seq];
  const int t_begin = split * p.split_tokens;
  const int t_end = min(len, t_begin + p.split_tokens);
  if (t_begin >= t_end) {  // an empty split is the identity state
    for (int e = lane; e < p.group * D; e += 32) {
      const int64_t pr = unit * p.num_q_heads + kv_head * p.group + e / D;
      p.part_o[pr * D + e % D] = 0.f;
      if (e % D == 0) p.part_lse[pr] = -CUDART_INF_F;
    }
    return;
  }
  const int32_t* __restrict__ blocks = p.block_indices + p.block_indptr[seq];

  const T* __restrict__ kc = static_cast<const T*>(p.k_cache);
  const T* __restrict__ vc = static_cast<const T*>(p.v_cache);
  const int64_t token_stride = int64_t{p.num_kv_heads} * D;
  const int64_t block_stride = token_stride * p.block_size;
  const int ld_within = tid % kTokChunks;  // chunk within the token's 8 heads
  const int ld_tok = tid / kTokChunks;
  const int ld_head = ld_within / kCpr, ld_chunk = ld_within % kCpr;
  const int64_t head_off = int64_t{hg} * kHeadsWarps * D + ld_within * 8;

  int64_t next_off[kPerThread];
  auto fetch_offsets = [&](int tile) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int t = t_begin + tile * kHeadsTile + ld_tok + i * kTokStep;
      next_off[i] = -1;
      if (t < t_end) {
        const int b = __ldg(blocks + t / p.block_size);
        next_off[i] =
            int64_t{b} * block_stride + int64_t{t % p.block_size} * token_stride + head_off;
      }
    }
  };
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  auto issue = [&](int stage) {
    const uint32_t ks = smem_base + stage * 2 * kStageElems * sizeof(T);
    const uint32_t vs = ks + kStageElems * sizeof(T);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const uint32_t o = hswz<D>(ld_tok + i * kTokStep, ld_head, ld_chunk) * sizeof(T);
      const bool ok = next_off[i] >= 0;
      cp_async16(ks + o, ok ? kc + next_off[i] : kc, ok);
      cp_async16(vs + o, ok ? vc + next_off[i] : vc, ok);
    }
  };

  const int num_tiles = (t_end - t_begin + kHeadsTile - 1) / kHeadsTile;
  fetch_offsets(0);
#pragma unroll
  for (int s = 0; s < kStg - 1; ++s) {
    if (s < num_tiles) {
      issue(s);
      fetch_offsets(s + 1);
    }
    cp_async_commit();
  }

  // Rows: query heads kv_head * group + r, r < group.
  const int64_t qrow0 = seq * p.num_q_heads + int64_t{kv_head} * p.group;
  const bool lo_ok = qr < p.group, hi_ok = qr + 8 < p.group;
  uint32_t qf[D / 16][4];
  {
    const uint32_t* q32 = static_cast<const uint32_t*>(p.q);
    const int64_t q_lo = (qrow0 + qr) * (D / 2), q_hi = (qrow0 + qr + 8) * (D / 2);
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const int c = (k * 16 + qc * 2) / 2;
      qf[k][0] = lo_ok ? __ldg(q32 + q_lo + c) : 0u;
      qf[k][1] = hi_ok ? __ldg(q32 + q_hi + c) : 0u;
      qf[k][2] = lo_ok ? __ldg(q32 + q_lo + c + 4) : 0u;
      qf[k][3] = hi_ok ? __ldg(q32 + q_hi + c + 4) : 0u;
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_lo = -CUDART_INF_F, m_hi = -CUDART_INF_F, l_lo = 0.f, l_hi = 0.f;
  const int mi = lane >> 3;

  for (int tile = 0; tile < num_tiles; ++tile) {
    cp_async_wait<kStg - 2>();
    __syncthreads();  // stage `tile` landed for all; stage tile - 1 is free for reuse
    if (tile + kStg - 1 < num_tiles) {
      issue((tile + kStg - 1) % kStg);
      fetch_offsets(tile + kStg);
    }
    cp_async_commit();

    const uint32_t ks = smem_base + (tile % kStg) * 2 * kStageElems * sizeof(T);
    const uint32_t vs = ks + kStageElems * sizeof(T);

    // S = Q K^T: 16 rows x 16 tokens.
    float s[2][4] = {};
#pragma unroll
    for (int k = 0; k < D / 16; ++k) {
      const int tk = (mi >> 1) * 8 + (lane & 7);
      uint32_t b[4];
      ldmatrix_x4(b, ks + hswz<D>(tk, warp, k * 2 + (mi & 1)) * sizeof(T));
      mma16816<T>(s[0], qf[k], b[0], b[1]);
      mma16816<T>(s[1], qf[k], b[2], b[3]);
    }

    const int tbase = t_begin + tile * kHeadsTile + qc * 2;
    const bool partial = t_begin + (tile + 1) * kHeadsTile > t_end;
    float mx_lo = -CUDART_INF_F, mx_hi = -CUDART_INF_F;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        float v = s[j][c] * p.scale_log2;
        if (partial && tbase + j * 8 + (c & 1) >= t_end) v = -CUDART_INF_F;
        s[j][c] = v;
      }
      mx_lo = fmaxf(mx_lo, fmaxf(s[j][0], s[j][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(s[j][2], s[j][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    const float mn_lo = fmaxf(m_lo, mx_lo), mn_hi = fmaxf(m_hi, mx_hi);
    const float ref_lo = mn_lo == -CUDART_INF_F ? 0.f : mn_lo;
    const float ref_hi = mn_hi == -CUDART_INF_F ? 0.f : mn_hi;
    const float a_lo = exp2f(m_lo - ref_lo), a_hi = exp2f(m_hi - ref_hi);
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
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      s[j][0] = exp2f(s[j][0] - ref_lo);
      s[j][1] = exp2f(s[j][1] - ref_lo);
      s[j][2] = exp2f(s[j][2] - ref_hi);
      s[j][3] = exp2f(s[j][3] - ref_hi);
      l_lo += s[j][0] + s[j][1];
      l_hi += s[j][2] + s[j][3];
    }

    // O += P V.
    uint32_t a[4];
    a[0] = pack2<T>(s[0][0], s[0][1]);
    a[1] = pack2<T>(s[0][2], s[0][3]);
    a[2] = pack2<T>(s[1][0], s[1][1]);
    a[3] = pack2<T>(s[1][2], s[1][3]);
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
      const int tk = (mi & 1) * 8 + (lane & 7);
      uint32_t b[4];
      ldmatrix_x4_trans(b, vs + hswz<D>(tk, warp, n + (mi >> 1)) * sizeof(T));
      mma16816<T>(o[n], a, b[0], b[1]);
      mma16816<T>(o[n + 1], a, b[2], b[3]);
    }
  }
  cp_async_wait<0>();

#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = qr + 8 * h;
    if (r >= p.group) continue;
    const int64_t pr = unit * p.num_q_heads + int64_t{kv_head} * p.group + r;
    const float l = h == 0 ? l_lo : l_hi;
    const float m = h == 0 ? m_lo : m_hi;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    float* dst = p.part_o + pr * D + qc * 2;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(dst + n * 8) =
          make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    if (qc == 0) p.part_lse[pr] = l > 0.f ? (m + log2f(l)) * kLn2 : -CUDART_INF_F;
  }
}
// One warp per (sequence, query head) row: its node units in plan order, then its splits in
// order, folded with a running maximum (identity: LSE -inf).
template <int D, typename T>
__global__ void __launch_bounds__(128) merge_kernel(const MergeParams p) {
  constexpr int kPer = D / 32;
  const int row = blockIdx.x * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.num_rows) return;
  const int64_t seq = row / p.num_q_heads;
  const int head = row % p.num_q_heads;
  float acc[kPer] = {};
  float m = -CUDART_INF_F, sum = 0.f;
  auto add = [&](int64_t unit) {
    const int64_t pr = unit * p.num_q_heads + head;
    const float l = p.part_lse[pr];
    if (l == -CUDART_INF_F) return;
    float v[kPer];
    const float* src = p.part_o + pr * D + lane * kPer;
    if constexpr (kPer == 4) {
      const float4 x = *reinterpret_cast<const float4*>(src);
      v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src);
      v[0] = x.x, v[1] = x.y;
    }
    if (l > m) {
      const float a = m == -CUDART_INF_F ? 0.f : __expf(m - l);
      sum *= a;
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        acc[i] *= a;
      m = l;
    }
    const float w = __expf(l - m);
    sum += w;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      acc[i] += w * v[i];
  };
  if (p.seq_unit_indptr != nullptr) {
    for (int i = p.seq_unit_indptr[seq]; i < p.seq_unit_indptr[seq + 1]; ++i)
      add(p.seq_units[i]);
  }
  for (int j = 0; j < p.num_splits; ++j)
    add(p.decode_unit_base + seq * p.num_splits + j);
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
cudaError_t launch_typed(const AttendParams& ap, int64_t grid, int64_t heads_grid,
                         const MergeParams& mp, cudaStream_t stream) {
  constexpr int kSmem = smem_bytes<D, T>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      attention_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  constexpr int kHeadsSmem = heads_smem_bytes<D, T>();
  static const cudaError_t heads_attr = cudaFuncSetAttribute(
      decode_heads_kernel<D, T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kHeadsSmem);
  if (heads_attr != cudaSuccess) return heads_attr;
  if (grid > 0) {
    attention_kernel<D, T><<<static_cast<unsigned>(grid), kThreads, kSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (heads_grid > 0) {
    decode_heads_kernel<D, T>
        <<<static_cast<unsigned>(heads_grid), kHeadsThreads, kHeadsSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (mp.num_rows > 0) {
    merge_kernel<D, T><<<(mp.num_rows + 3) / 4, 128, 0, stream>>>(mp);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

// grid: attention_kernel CTAs (prefix items, then decode items of the per-head path);
// heads_grid: decode_heads_kernel CTAs (the all-heads decode path).
cudaError_t launch(const AttentionShape& shape, KvDtype dtype, const AttendParams& ap, int64_t grid,
                   int64_t heads_grid, const MergeParams& mp, cudaStream_t stream) {
  const bool f16 = dtype == KvDtype::kF16;
  switch (shape.head_dim) {
    case 64:
      return f16 ? launch_typed<64, __half>(ap, grid, heads_grid, mp, stream)
                 : launch_typed<64, __nv_bfloat16>(ap, grid, heads_grid, mp, stream);
    case 128:
      return f16 ? launch_typed<128, __half>(ap, grid, heads_grid, mp, stream)
                 : launch_typed<128, __nv_bfloat16>(ap, grid, heads_grid, mp, stream);
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
  const int64_t decode_ctas =
      int64_t{plan.num_seqs} * plan.suffix.num_splits *
      (plan.heads_path ? shape.num_kv_heads / kDecodeHeadsPerCta : shape.num_kv_heads);
  const int64_t grid = plan.num_node_items + (plan.heads_path ? 0 : decode_ctas);
  const int64_t heads_grid = plan.heads_path ? decode_ctas : 0;

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
  return launch(shape, dtype, ap, grid, heads_grid, mp, stream);
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
  const bool heads = decode_heads_path(shape);
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
  return heads ? launch(shape, dtype, ap, 0, units * (shape.num_kv_heads / kDecodeHeadsPerCta), mp,
                        stream)
               : launch(shape, dtype, ap, units * shape.num_kv_heads, 0, mp, stream);
}

}  // namespace kvc::kernels::cuda
