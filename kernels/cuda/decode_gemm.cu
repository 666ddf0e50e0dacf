// The decode GEMM kernel (decode_gemm.h): TMA loads into a four-stage ring, two consumer
// warpgroups issuing wgmma m64n128k16 (weights as A, activations as B, both K-major with the
// 128-byte swizzle), one producer warp, and an epilogue that stages the fp32 tile in shared memory,
// adds the cluster's partial tiles over distributed shared memory and stores 16-byte vectors.
#include "kernels/cuda/decode_gemm.h"

#include <cooperative_groups.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <mutex>

namespace kvc::kernels::cuda {
namespace {

namespace cg = cooperative_groups;

#include "kernels/cuda/mbarrier.cuh"    // mbar_init, mbar_expect_tx, mbar_arrive, mbar_wait
#include "kernels/cuda/wgmma_sync.cuh"  // wgmma_fence, wgmma_commit, wgmma_wait

constexpr int kBN = 256;  // weight rows per CTA (wgmma M: two warpgroups x two m64 tiles)
constexpr int kBM = 128;  // activation rows (wgmma N)
constexpr int kBK = 64;   // K per stage: one 128-byte swizzle row of bf16
// The ring: each stage holds one K step of the weights' tile and of the activations. Tried and
// not kept: separate rings for the weights (5 stages) and the activations (3 stages, loaded two
// steps later): slower on the H200 (bench/results/gemm-h200.md).
constexpr int kStages = 4;
constexpr int kConsumerWarps = 8;
constexpr int kThreads = kConsumerWarps * 32 + 32;  // + the producer warp
constexpr int kWBytes = kBN * kBK * 2;
constexpr int kXBytes = kBM * kBK * 2;
constexpr int kStageBytes = kWBytes + kXBytes;
constexpr int kRingBytes = kStages * kStageBytes;
constexpr int kOutStride = kBN + 4;  // floats per row of the staged tile (conflict-free stores)
constexpr int kSmemBytes = kRingBytes + 1024 + 2 * kStages * 8;
constexpr int kMaxSplits = 8;
static_assert(kBM * kOutStride * 4 <= kRingBytes, "the staged tile reuses the rings");

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVC_DECODE_GEMM_DEVICE 1
#endif

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#ifdef KVC_DECODE_GEMM_DEVICE
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}

// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1,024 bytes apart.
__device__ __forceinline__ uint64_t smem_desc(const void* p) {
  uint64_t d = (smem_u32(p) & 0x3FFFF) >> 4;
  d |= uint64_t{1} << 16;          // leading byte offset (unused with this swizzle)
  d |= uint64_t{1024 >> 4} << 32;  // stride byte offset
  d |= uint64_t{1} << 62;          // 128-byte swizzle
  return d;
}

// d[64x128] += A[64x16] · B[16x128]ᵀ, fp32 accumulators in the m64nNk16 fragment layout.
__device__ __forceinline__ void wgmma_m64n128k16(float* d, uint64_t a, uint64_t b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "l"(a), "l"(b), "r"(1));
}
__device__ __forceinline__ void fence_operands(float* d) {
#pragma unroll
  for (int i = 0; i < 64; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
#endif

// grid (splits, tiles); cluster (splits, 1, 1) when splits > 1.
__global__ void __launch_bounds__(kThreads, 1)
    decode_gemm_kernel(const __grid_constant__ CUtensorMap tw,
                       const __grid_constant__ CUtensorMap tx, void* __restrict__ y, int m, int n,
                       int num_chunks, int chunks_per_split, int splits, int f32_out) {
#ifdef KVC_DECODE_GEMM_DEVICE
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t{1023});
  auto* full = reinterpret_cast<uint64_t*>(smem + kRingBytes);
  uint64_t* empty = full + kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.x, tile = blockIdx.y;
  const int c0 = split * chunks_per_split;
  const int count = max(0, min(num_chunks, c0 + chunks_per_split) - c0);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    // A decode GEMM launched next takes each SM as this one's CTA leaves it.
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  }
  __syncthreads();

  auto* staged = reinterpret_cast<float*>(smem);  // [kBM][kOutStride], after the main loop
  if (warp == kConsumerWarps) {
    // Producer: one thread keeps the ring full. The weights do not depend on the previous
    // kernel, so with programmatic dependent launch the first stages' weights stream in while it
    // finishes; the activations are read only after griddepcontrol.wait.
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tw)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tx)) : "memory");
      const int first = min(count, kStages);
      for (int i = 0; i < first; ++i) {
        mbar_expect_tx(&full[i], kStageBytes);
        tma_load_2d(smem + i * kStageBytes, &tw, (c0 + i) * kBK, tile * kBN, &full[i]);
      }
      asm volatile("griddepcontrol.wait;" ::: "memory");
      for (int i = 0; i < first; ++i) {
        tma_load_2d(smem + i * kStageBytes + kWBytes, &tx, (c0 + i) * kBK, 0, &full[i]);
      }
      for (int i = first; i < count; ++i) {
        const int s = i % kStages;
        mbar_wait(&empty[s], ((i / kStages) & 1) ^ 1);
        mbar_expect_tx(&full[s], kStageBytes);
        uint8_t* st = smem + s * kStageBytes;
        tma_load_2d(st, &tw, (c0 + i) * kBK, tile * kBN, &full[s]);
        tma_load_2d(st + kWBytes, &tx, (c0 + i) * kBK, 0, &full[s]);
      }
    }
  } else {
    const int wg = warp / 4;
    float acc[2][64];
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int i = 0; i < 64; ++i)
        acc[t][i] = 0.0f;
    for (int i = 0; i < count; ++i) {
      const int s = i % kStages;
      mbar_wait(&full[s], (i / kStages) & 1);
      const uint8_t* st = smem + s * kStageBytes;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        const uint64_t b = smem_desc(st + kWBytes + kk * 32);
#pragma unroll
        for (int t = 0; t < 2; ++t)
          wgmma_m64n128k16(acc[t], smem_desc(st + (wg * 128 + t * 64) * 128 + kk * 32), b);
      }
      wgmma_commit();
      // The previous step's products are done: hand its stage back to the producer.
      wgmma_wait<1>();
      if (i > 0 && lane == 0) mbar_arrive(&empty[(i - 1) % kStages]);
    }
    wgmma_wait<0>();
    fence_operands(acc[0]);
    fence_operands(acc[1]);
    // Both warpgroups are done reading the ring: stage the fp32 tile over it, [token][feature].
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerWarps * 32) : "memory");
    const int wrow = (warp % 4) * 16 + lane / 4, tok = (lane % 4) * 2;
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int f = wg * 128 + t * 64 + wrow + 8 * r;
          staged[(j * 8 + tok) * kOutStride + f] = acc[t][j * 4 + r * 2];
          staged[(j * 8 + tok + 1) * kOutStride + f] = acc[t][j * 4 + r * 2 + 1];
        }
  }
  // Every CTA of the cluster has staged its partial tile; each adds the cluster's partials for
  // its slice of the token rows (ranks in order: deterministic) and stores it. The output may
  // still be read by the previous kernel until it completes.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  cg::cluster_group cluster = cg::this_cluster();
  if (splits > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }
  if (threadIdx.x < kConsumerWarps * 32) {
    const int r0 = split * kBM / splits, r1 = min((split + 1) * kBM / splits, m);
    const int col = (threadIdx.x % 32) * 8;
    const int feature = tile * kBN + col;
    for (int row = r0 + static_cast<int>(threadIdx.x) / 32; row < r1; row += kConsumerWarps) {
      // Every rank's load in flight before the first add.
      float4 a[kMaxSplits], b[kMaxSplits];
      const float* src = staged + row * kOutStride + col;
#pragma unroll
      for (int q = 0; q < kMaxSplits; ++q) {
        if (q < splits) {
          const float* p = splits > 1 ? cluster.map_shared_rank(src, q) : src;
          a[q] = *reinterpret_cast<const float4*>(p);
          b[q] = *reinterpret_cast<const float4*>(p + 4);
        }
      }
      float v[8] = {};
#pragma unroll
      for (int q = 0; q < kMaxSplits; ++q) {
        if (q < splits) {
          v[0] += a[q].x;
          v[1] += a[q].y;
          v[2] += a[q].z;
          v[3] += a[q].w;
          v[4] += b[q].x;
          v[5] += b[q].y;
          v[6] += b[q].z;
          v[7] += b[q].w;
        }
      }
      if (feature >= n) continue;
      if (f32_out) {
        float* out = static_cast<float*>(y) + static_cast<int64_t>(row) * n + feature;
        if (feature + 8 <= n) {
          reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
          reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (e < n - feature) out[e] = v[e];
        }
      } else {
        auto* out = static_cast<__nv_bfloat16*>(y) + static_cast<int64_t>(row) * n + feature;
        if (feature + 8 <= n) {
          auto bits = [](float lo, float hi) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
            return *reinterpret_cast<const uint32_t*>(&h);
          };
          *reinterpret_cast<uint4*>(out) =
              make_uint4(bits(v[0], v[1]), bits(v[2], v[3]), bits(v[4], v[5]), bits(v[6], v[7]));
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e)
            if (e < n - feature) out[e] = __float2bfloat16_rn(v[e]);
        }
      }
    }
  }
  // No CTA leaves while another may still read its shared memory.
  if (splits > 1) cluster.sync();
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A bf16 [rows, k] row-major matrix read in boxes of box_rows x 64 with the 128-byte swizzle;
// reads past the edges return zeros.
bool encode_map(CUtensorMap* map, const void* base, int rows, int k, int box_rows) {
  auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {kBK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct DeviceFacts {
  bool ok = false;
  int sms = 0;
  std::array<int, kMaxSplits + 1> max_clusters{};  // co-resident clusters of each size
};

const DeviceFacts& device_facts() {
  static DeviceFacts facts = [] {
    DeviceFacts f;
    int dev = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        prop.major != 9 || prop.minor != 0 || tensor_map_encoder() == nullptr ||
        cudaFuncSetAttribute(decode_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             kSmemBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      return f;
    }
    f.sms = prop.multiProcessorCount;
    f.max_clusters[1] = f.sms;
    for (int s = 2; s <= kMaxSplits; ++s) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(s, 64);
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = kSmemBytes;
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = s;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, decode_gemm_kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        clusters = 0;
      }
      f.max_clusters[s] = clusters;
    }
    f.ok = true;
    return f;
  }();
  return facts;
}

}  // namespace

bool decode_gemm_supported() {
  return device_facts().ok;
}

int decode_gemm_resident_clusters(int size) {
  return size >= 1 && size <= kMaxSplits ? device_facts().max_clusters[size] : 0;
}

DecodeGemmShape decode_gemm_shape(int n, int k, int splits) {
  const DeviceFacts& f = device_facts();
  DecodeGemmShape shape;
  shape.tiles = (n + kBN - 1) / kBN;
  const int chunks = (k + kBK - 1) / kBK;
  if (splits <= 0) {
    // The most CTAs in one wave of co-resident clusters, each with at least four K steps.
    splits = 1;
    int best = std::min(shape.tiles, std::max(f.sms, 1));
    for (int s = 2; s <= kMaxSplits && s * 4 <= chunks; ++s) {
      if (shape.tiles > f.max_clusters[s] || shape.tiles * s > f.sms) continue;
      if (shape.tiles * s > best) best = shape.tiles * s, splits = s;
    }
  }
  splits = std::clamp(splits, 1, std::min(kMaxSplits, chunks));
  shape.chunks_per_split = (chunks + splits - 1) / splits;
  shape.splits = splits;
  return shape;
}

bool decode_gemm_fits(const void* x, const void* w, const void* y, int m, int n, int k) {
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return m >= 1 && m <= kDecodeGemmMaxRows && n >= 8 && k >= 8 && n % 8 == 0 && k % 8 == 0 &&
         aligned(x) && aligned(w) && aligned(y);
}

cudaError_t decode_gemm(const void* x, const void* w, void* y, int m, int n, int k, bool f32_out,
                        cudaStream_t stream, int splits) {
  if (!decode_gemm_supported() || !decode_gemm_fits(x, w, y, m, n, k)) {
    return cudaErrorNotSupported;
  }
  CUtensorMap tw{}, tx{};
  if (!encode_map(&tw, w, n, k, kBN) || !encode_map(&tx, x, m, k, kBM)) {
    return cudaErrorNotSupported;
  }
  const DecodeGemmShape shape = decode_gemm_shape(n, k, splits);
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(shape.splits, shape.tiles);
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = kSmemBytes;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2]{};
  int num_attrs = 0;
  // Programmatic dependent launch: the weights start streaming while the previous kernel ends.
  static const bool pdl = std::getenv("KVC_DECODE_GEMM_NO_PDL") == nullptr;
  if (pdl) {
    attrs[num_attrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[num_attrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (shape.splits > 1) {
    attrs[num_attrs].id = cudaLaunchAttributeClusterDimension;
    attrs[num_attrs].val.clusterDim.x = shape.splits;
    attrs[num_attrs].val.clusterDim.y = 1;
    attrs[num_attrs++].val.clusterDim.z = 1;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = num_attrs;
  const int chunks = (k + kBK - 1) / kBK;
  cudaError_t e = cudaLaunchKernelEx(&cfg, decode_gemm_kernel, tw, tx, y, m, n, chunks,
                                     shape.chunks_per_split, shape.splits, f32_out ? 1 : 0);
  if (e != cudaSuccess) return e;
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
