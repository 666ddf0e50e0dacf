// Decode attention, part 1: tile and pipeline constants, shared-memory sizes, PTX wrappers (PDL,
// cp.async, warp_ops.cuh) and wgmma (sm_90a).
// Private to kernels/cuda/attention.cu (one translation unit: the templates live in its
// anonymous namespace); split by section so each part reads on its own.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/fast_div.cuh"

namespace kvc::kernels::cuda {
namespace {

constexpr int kTile = kKvTileTokens;  // tokens of a prefix stage
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Pipeline stages of the cascade kernel (prefix and 4-head decode CTAs: 2 x 32 KB + 1 KB at
// d = 128, so three CTAs share an SM) and of the 8-head flat decode CTAs (3 x 64 KB, one per SM).
constexpr int kStages = 2;
constexpr int kWideStages = 3;
constexpr int kHeadsTile = 16;  // tokens of a decode stage

// Pipeline stages of the decode items over an FP8 cache (raw codes only, a quarter of a bf16
// stage pair): the same shared memory as the bf16 items at two and three stages.
constexpr int kFp8Stages = 4;
constexpr int kFp8WideStages = 6;

// Shared memory of a cascade_kernel CTA: kStages stages of K and V, 64 x D elements each (a prefix
// stage is 64 tokens of one head, a decode stage 16 tokens x 4 heads). Over an FP8 cache: a prefix
// item holds one fp16 stage and kStages raw stages of codes (half the size), a decode item
// kFp8Stages raw stages of 16 tokens x 4 heads; both come to the bf16 total.
template <int D, bool kFp8>
constexpr int smem_bytes() {
  constexpr int kStage = 2 * kTile * D * 2;  // K and V of one stage, 2-byte elements
  constexpr int kPrefix = kFp8 ? kStage + kStages * kStage / 2 : kStages * kStage;
  constexpr int kDecode = kFp8 ? kFp8Stages * 2 * kHeadsTile * kCascadeHeadsPerCta * D : 0;
  return (kPrefix > kDecode ? kPrefix : kDecode) + 1024;  // + alignment slack
}
template <int D, int HW, bool kFp8>
constexpr int decode_smem_bytes() {
  return kFp8 ? kFp8WideStages * 2 * kHeadsTile * HW * D
              : kWideStages * 2 * kHeadsTile * HW * D * 2;
}
static_assert(kHeadsTile * kCascadeHeadsPerCta == kTile);

// ---- small device helpers -------------------------------------------------------------------

#include "kernels/cuda/online_softmax.cuh"  // OnlineSoftmax, kLog2e, kLn2
#include "kernels/cuda/warp_ops.cuh"        // pack2, mma16816, ldmatrix, ex2, cp.async
#include "kernels/cuda/wgmma_sync.cuh"      // wgmma_fence, wgmma_commit, wgmma_wait, setmaxnreg

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
// The descriptor of an operand `bytes` past `d`'s start: the start field is (address >> 4) in
// 14 bits and shared memory ends below 256 KB, so the sum never carries out of it.
__device__ __forceinline__ uint64_t desc_at(uint64_t d, uint32_t bytes) {
  return d + (bytes >> 4);
}
// Device code for sm_90a uses wgmma for the prefix pass; other targets (sm_80, plain sm_90) the
// mma.sync path. The wgmma helpers are declared everywhere and empty off sm_90a.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVC_WGMMA 1
#else
#define KVC_WGMMA 0
#endif
constexpr bool kWgmmaPrefix = KVC_WGMMA;

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

// The same for an O accumulator of N n-tiles (N / 8 wgmma outputs of 64 columns).
template <int N>
__device__ __forceinline__ void fence_o(float (&o)[N][4]) {
  static_assert(N % 8 == 0);
#pragma unroll
  for (int h = 0; h < N / 8; ++h)
    fence_regs(reinterpret_cast<float(&)[8][4]>(o[h * 8]));
}
// Named barrier `id` over `threads` threads (whole warps): wait, or arrive without waiting.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
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

}  // namespace
}  // namespace kvc::kernels::cuda
