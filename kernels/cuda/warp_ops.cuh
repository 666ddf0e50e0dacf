// Warp-level building blocks shared by the tensor-core attention kernels (attention.cu,
// prefill_attention.cu): bf16/fp16 packing, mma.sync m16n8k16, ldmatrix, ex2, cp.async, and the
// widening of staged E4M3 codes (an FP8 KV cache) to fp16.
// Included inside each kernel file's anonymous namespace, so every file keeps its own copy.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

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

// c += a b for one m16n8k16 tile: a row-major 16 x 16, b col-major 16 x 8, fp32 accumulators.
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

// 2^x, flushing denormals (one MUFU.EX2; exp2f adds a denormal fix-up around it); ex2(-inf) = 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 16 bytes global -> shared; zero-filled (no global read) when !valid.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// ---- FP8 KV cache: E4M3 codes staged in shared memory, widened to fp16 -----------------------

// The type the products run in: the KvDtype's, or fp16 over an FP8 cache (every E4M3 value is an
// fp16 value, and one cvt widens two codes).
template <typename T, bool kFp8>
using MmaType = std::conditional_t<kFp8, __half, T>;

// A query's two values (bits of T) as the product type's: bf16 -> fp16 rounds to nearest and
// saturates at +-65504 (a bf16 query past fp16's range would otherwise turn into inf).
template <typename T, typename M>
__device__ __forceinline__ uint32_t to_mma_pair(uint32_t bits) {
  if constexpr (std::is_same_v<T, M>) {
    return bits;
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16> && std::is_same_v<M, __half>);
    __nv_bfloat162 b;
    __builtin_memcpy(&b, &bits, 4);
    const float2 f = __bfloat1622float2(b);
    constexpr float kMax = 65504.0f;
    __half2 h = __floats2half2_rn(fminf(fmaxf(f.x, -kMax), kMax), fminf(fmaxf(f.y, -kMax), kMax));
    uint32_t r;
    __builtin_memcpy(&r, &h, 4);
    return r;
  }
}

// Two E4M3 codes (the low 16 bits of `pair`, the first in the low byte) as fp16x2. Exact.
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint32_t pair) {
  const __half2_raw r =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
  return uint32_t{r.x} | (uint32_t{r.y} << 16);
}

// 16 bytes of shared memory.
__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}
__device__ __forceinline__ uint2 lds64(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// 8 E4M3 codes at shared address `src` (8-byte aligned; the first code in the lowest byte) widened
// to 8 fp16 values stored at `dst` (16-byte aligned). Exact.
__device__ __forceinline__ void widen_e4m3x8(uint32_t src, uint32_t dst) {
  uint32_t c[2], h[4];
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];\n" : "=r"(c[0]), "=r"(c[1]) : "r"(src) : "memory");
#pragma unroll
  for (int j = 0; j < 4; ++j)
    h[j] = e4m3x2_to_f16x2(c[j / 2] >> (16 * (j % 2)));
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(h[0]), "r"(h[1]),
               "r"(h[2]), "r"(h[3])
               : "memory");
}

// Pipeline stage s's K in the shared memory at `base`; its V follows at stage_v<...>. The stages
// themselves (K and V of kStageBytes each), or over an FP8 cache (kFp8) the raw stages of codes,
// half the size, after the one fp16 stage that the codes are widened into.
template <bool kFp8, int kStageBytes>
__device__ __forceinline__ uint32_t stage_k(uint32_t base, int s) {
  return kFp8 ? base + 2 * kStageBytes + s * kStageBytes : base + s * 2 * kStageBytes;
}
template <bool kFp8, int kStageBytes>
inline constexpr uint32_t stage_v = kFp8 ? kStageBytes / 2 : kStageBytes;
