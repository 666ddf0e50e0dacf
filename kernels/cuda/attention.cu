// Decode attention kernels (see attention.h and docs/kernels-cuda.md). Two kinds of work, each a
// 4-warp CTA that streams paged KV through a kStages-deep (2) cp.async pipeline in shared memory
// (16-byte chunks, XOR-swizzled for ldmatrix) and runs scores and P·V on tensor cores (mma.sync
// m16n8k16, fp32 accumulate) with an online softmax in fp32 registers (base 2):
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
// fixed order and writes out in the KV dtype. Over an FP8 cache (KvQuant) the items stage E4M3
// codes and run the same products in fp16 (kFp8): a prefix item widens each stage into an fp16
// stage for its tensor-core operands, a decode item widens each lane's fragments in registers.
//
// Parts: attention_ptx.cuh (constants, PTX), attention_state.cuh (parameters, loader, softmax
// state), attention_prefix.cuh, attention_decode.cuh; here the kernels and their launchers.
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/cuda/attention_decode.cuh"
#include "kernels/cuda/attention_prefix.cuh"
#include "kernels/cuda/attention_prefix_ws.cuh"
#include "kernels/cuda/block_reduce.cuh"  // block_max
#include "kernels/fp8_rule.h"

namespace kvc::kernels::cuda {
namespace {

// ---- kernels --------------------------------------------------------------------------------

// The cascade's one attention launch (and flat decode when num_kv_heads % 8 != 0): CTAs
// [0, num_prefix_ctas) loop over the prefix items, the others are 4-head decode items.
template <int D, typename T, bool kFp8>
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
      prefix_item<D, T, kFp8>(p, item, smem_base);
    return;
  }
  if constexpr (kFp8) {
    decode_item_fp8<D, T, kCascadeHeadsPerCta, kFp8Stages>(p, bid - p.num_prefix_ctas, smem_base);
  } else {
    decode_item<D, T, kCascadeHeadsPerCta, kStages>(p, bid - p.num_prefix_ctas, smem_base);
  }
}

// Flat decode over 8 KV heads per CTA (num_kv_heads % 8 == 0).
template <int D, typename T, bool kFp8>
__global__ void __launch_bounds__(32 * kDecodeHeadsPerCta)
    decode_wide_kernel(const AttendParams p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  launch_dependents();
  if constexpr (kFp8) {
    decode_item_fp8<D, T, kDecodeHeadsPerCta, kFp8WideStages>(p, blockIdx.x, smem_base);
  } else {
    decode_item<D, T, kDecodeHeadsPerCta, kWideStages>(p, blockIdx.x, smem_base);
  }
}

// One warp merges one (sequence, query head) row: its node units in plan order, then its splits
// in order. The kernels below are launched as programmatic dependents of the attention launch:
// the unit list (plan data) is read before griddepcontrol.wait, the partials after it. The units'
// LSEs are loaded one per lane (32 at a time), so the row's maximum is known before any O is
// read; the O rows are then loaded four at a time with no dependence on the running sum, and
// folded in the fixed order (weights exp(lse - max); identity: LSE -inf). Leaves the lane's D / 32
// normalised values in `out` and returns the row's LSE.
template <int D>
__device__ __forceinline__ float merge_row(const MergeParams& p, int row, int lane,
                                           float (&out)[D / 32]) {
  constexpr int kPer = D / 32;
  constexpr int kUnroll = 4;
  constexpr int kFewUnits = 8;
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
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    out[i] = acc[i] * inv;
  return sum > 0.f ? m + logf(sum) : -CUDART_INF_F;
}

// Four rows per CTA, written in T.
template <int D, typename T>
__global__ void __launch_bounds__(128) merge_kernel(const MergeParams p) {
  launch_dependents();  // the o projection (decode_gemm.h) streams its weights meanwhile
  constexpr int kPer = D / 32;
  const int row = blockIdx.x * 4 + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= p.num_rows) return;
  float v[kPer];
  const float lse = merge_row<D>(p, row, lane, v);
  T* out = static_cast<T*>(p.out) + int64_t{row} * D + lane * kPer;
#pragma unroll
  for (int i = 0; i < kPer; i += 2)
    *reinterpret_cast<uint32_t*>(out + i) = pack2<T>(v[i], v[i + 1]);
  if (p.lse != nullptr && lane == 0) p.lse[row] = lse;
}

// One CTA per sequence, a warp per query head (kHeads heads per warp): the sequence's whole row,
// rounded to bf16 as merge_kernel<D, bf16> writes it, then its E4M3 codes under the row's scale
// (attention.h Fp8RowsOut; the rule and the rounding of ops.h quantize_rows_fp8).
template <int D, int kHeads>
__global__ void __launch_bounds__(1024) merge_fp8_kernel(const MergeParams p) {
  launch_dependents();
  constexpr int kPer = D / 32;
  const int seq = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  float v[kHeads][kPer];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < kHeads; ++j) {
    const int head = warp + j * warps;
    if (head >= p.num_q_heads) continue;
    const int row = seq * p.num_q_heads + head;
    const float lse = merge_row<D>(p, row, lane, v[j]);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      v[j][i] = __bfloat162float(__float2bfloat16_rn(v[j][i]));
      amax = fmaxf(amax, fabsf(v[j][i]));
    }
    if (p.lse != nullptr && lane == 0) p.lse[row] = lse;
  }
  const float row_max = block_max(amax);
  const float scale = fp8::row_scale(row_max), qinv = 1.0f / scale;
  uint8_t* q = p.fp8.q + int64_t{seq} * p.num_q_heads * D;
#pragma unroll
  for (int j = 0; j < kHeads; ++j) {
    const int head = warp + j * warps;
    if (head >= p.num_q_heads) continue;
    uint32_t codes = 0;
#pragma unroll
    for (int i = 0; i < kPer; i += 2) {
      const __nv_fp8x2_storage_t c = __nv_cvt_float2_to_fp8x2(
          make_float2(v[j][i] * qinv, v[j][i + 1] * qinv), __NV_SATFINITE, __NV_E4M3);
      codes |= static_cast<uint32_t>(c) << (8 * i);
    }
    uint8_t* dst = q + head * D + lane * kPer;
    if constexpr (kPer == 4) {
      *reinterpret_cast<uint32_t*>(dst) = codes;
    } else {
      *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(codes);
    }
  }
  for (int b = threadIdx.x; b < p.fp8.scale_blocks; b += blockDim.x)
    p.fp8.scales[seq + b * p.fp8.scale_stride] = scale;
}

// The merge as a programmatic dependent launch: its CTAs may start (and read the plan) while the
// attention launch drains; griddepcontrol.wait in the kernel orders the partials.
template <typename Kernel>
cudaError_t launch_merge(Kernel kernel, const MergeParams& mp, unsigned grid, unsigned threads,
                         cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, mp);
}

template <int D, typename T>
cudaError_t merge(const MergeParams& mp, cudaStream_t stream) {
  if (mp.fp8.q == nullptr) {
    return launch_merge(merge_kernel<D, T>, mp, static_cast<unsigned>((mp.num_rows + 3) / 4), 128,
                        stream);
  }
  if constexpr (!std::is_same_v<T, __nv_bfloat16>) {
    return cudaErrorInvalidValue;  // FP8 rows are made of bf16 values
  } else {
    const int heads = mp.num_q_heads;
    const unsigned seqs = static_cast<unsigned>(mp.num_rows / heads);
    const unsigned threads = 32u * static_cast<unsigned>(min(heads, 32));
    if (heads <= 32) return launch_merge(merge_fp8_kernel<D, 1>, mp, seqs, threads, stream);
    if (heads <= 64) return launch_merge(merge_fp8_kernel<D, 2>, mp, seqs, threads, stream);
    if (heads <= 128) return launch_merge(merge_fp8_kernel<D, 4>, mp, seqs, threads, stream);
    return cudaErrorInvalidValue;
  }
}

// ---- launch ---------------------------------------------------------------------------------

template <int D, typename T, bool kFp8>
cudaError_t launch_typed(const AttendParams& ap, int64_t ws_grid, int64_t grid, int64_t wide_grid,
                         const MergeParams& mp, cudaStream_t stream) {
  if (ws_grid > 0) {
    constexpr int kWsSmem = ws_smem_bytes<D, kFp8>();
    static const cudaError_t ws_attr = cudaFuncSetAttribute(
        prefix_ws_kernel<D, T, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWsSmem);
    if (ws_attr != cudaSuccess) return ws_attr;
    prefix_ws_kernel<D, T, kFp8>
        <<<static_cast<unsigned>(ws_grid), kWsThreads, kWsSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  constexpr int kSmem = smem_bytes<D, kFp8>();
  static const cudaError_t attr = cudaFuncSetAttribute(
      cascade_kernel<D, T, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  if (attr != cudaSuccess) return attr;
  constexpr int kWideSmem = decode_smem_bytes<D, kDecodeHeadsPerCta, kFp8>();
  static const cudaError_t wide_attr = cudaFuncSetAttribute(
      decode_wide_kernel<D, T, kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWideSmem);
  if (wide_attr != cudaSuccess) return wide_attr;
  if (grid > 0) {
    cascade_kernel<D, T, kFp8><<<static_cast<unsigned>(grid), kThreads, kSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (wide_grid > 0) {
    decode_wide_kernel<D, T, kFp8>
        <<<static_cast<unsigned>(wide_grid), 32 * kDecodeHeadsPerCta, kWideSmem, stream>>>(ap);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return mp.num_rows > 0 ? merge<D, T>(mp, stream) : cudaSuccess;
}

// ws_grid: prefix_ws_kernel CTAs (the warp-specialised prefix pass, first); grid: cascade_kernel
// CTAs (prefix CTAs, then 4-head decode items); wide_grid: decode_wide_kernel CTAs (8-head decode
// items).
cudaError_t launch(const AttentionShape& shape, KvDtype dtype, bool fp8, const AttendParams& ap,
                   int64_t ws_grid, int64_t grid, int64_t wide_grid, const MergeParams& mp,
                   cudaStream_t stream) {
  using bf16 = __nv_bfloat16;
  const bool f16 = dtype == KvDtype::kF16;
  if (fp8 && f16) return cudaErrorInvalidValue;  // an FP8 cache serves bf16 queries
  switch (shape.head_dim) {
    case 64:
      return fp8   ? launch_typed<64, bf16, true>(ap, ws_grid, grid, wide_grid, mp, stream)
             : f16 ? launch_typed<64, __half, false>(ap, ws_grid, grid, wide_grid, mp, stream)
                   : launch_typed<64, bf16, false>(ap, ws_grid, grid, wide_grid, mp, stream);
    case 128:
      return fp8   ? launch_typed<128, bf16, true>(ap, ws_grid, grid, wide_grid, mp, stream)
             : f16 ? launch_typed<128, __half, false>(ap, ws_grid, grid, wide_grid, mp, stream)
                   : launch_typed<128, bf16, false>(ap, ws_grid, grid, wide_grid, mp, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

bool shape_supported(const AttentionShape& shape) {
  return (shape.head_dim == 64 || shape.head_dim == 128) && shape.num_kv_heads > 0 &&
         shape.num_q_heads % shape.num_kv_heads == 0 && shape.group() <= 16 && shape.block_size > 0;
}

AttendParams base_params(const AttentionShape& shape, const KvQuant& quant, const void* q,
                         const void* k_cache, const void* v_cache, float* part_o, float* part_lse) {
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
  p.scale_log2 = shape.scale * kLog2e * (quant.fp8 ? quant.k_scale : 1.0f);
  p.v_scale = quant.fp8 ? quant.v_scale : 1.0f;
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
                           size_t workspace_bytes, cudaStream_t stream, const KvQuant& quant,
                           const Fp8RowsOut* fp8_out) {
  if (!shape_supported(shape) || (plan.device == nullptr && !plan.host.empty()) ||
      workspace_bytes < cascade_workspace_bytes(plan, shape)) {
    return cudaErrorInvalidValue;
  }
  if (fp8_out != nullptr && (dtype != KvDtype::kBF16 || fp8_out->q == nullptr ||
                             fp8_out->scales == nullptr || fp8_out->scale_blocks < 1 ||
                             fp8_out->scale_stride < plan.num_seqs || shape.num_q_heads > 128)) {
    return cudaErrorInvalidValue;
  }
  const int64_t units = plan.num_units();
  float* part_o = static_cast<float*>(workspace);
  float* part_lse = part_o + units * shape.num_q_heads * shape.head_dim;
  const int32_t* dp = plan.device;
  const auto& off = plan.offsets;

  AttendParams ap = base_params(shape, quant, q, k_cache, v_cache, part_o, part_lse);
  ap.num_node_items = plan.num_node_items;
  const int64_t ws_grid = plan.ws_prefix ? plan.num_prefix_ctas : 0;
  ap.num_prefix_ctas = plan.ws_prefix ? 0 : plan.num_prefix_ctas;
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
  const int64_t grid = ap.num_prefix_ctas + (plan.wide_path ? 0 : decode_ctas);
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
  if (fp8_out != nullptr) mp.fp8 = *fp8_out;
  return launch(shape, dtype, quant.fp8, ap, ws_grid, grid, wide_grid, mp, stream);
}

cudaError_t paged_decode(const AttentionShape& shape, KvDtype dtype, const void* q,
                         const void* k_cache, const void* v_cache, const int32_t* block_indptr,
                         const int32_t* block_indices, const int32_t* seq_lens, int num_seqs,
                         int max_seq_len, void* out, float* lse, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream, const KvQuant& quant) {
  if (!shape_supported(shape) ||
      workspace_bytes < paged_decode_workspace_bytes(shape, num_seqs, max_seq_len)) {
    return cudaErrorInvalidValue;
  }
  const DecodeSplit split = choose_decode_split(shape, num_seqs, max_seq_len, current_device_sms());
  const bool wide = decode_wide_path(shape);
  const int64_t units = int64_t{num_seqs} * split.num_splits;
  float* part_o = static_cast<float*>(workspace);
  float* part_lse = part_o + units * shape.num_q_heads * shape.head_dim;

  AttendParams ap = base_params(shape, quant, q, k_cache, v_cache, part_o, part_lse);
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
  return wide ? launch(shape, dtype, quant.fp8, ap, 0, 0, ctas, mp, stream)
              : launch(shape, dtype, quant.fp8, ap, 0, ctas, 0, mp, stream);
}

}  // namespace kvc::kernels::cuda
