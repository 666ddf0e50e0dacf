// Shared-memory mbarriers (sm_90): the producer / consumer hand-offs of the warp-specialised
// kernels (decode_gemm.cu, the attention prefix pass). Included inside each kernel file's
// anonymous namespace, like warp_ops.cuh; empty off sm_90, where those kernels are not built.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define KVC_MBARRIER 1
#else
#define KVC_MBARRIER 0
#endif

__device__ __forceinline__ uint32_t mbar_addr(const uint64_t* bar) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(bar));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if KVC_MBARRIER
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(mbar_addr(bar)), "r"(count));
#else
  (void)bar, (void)count;
#endif
}
// Arrives once and adds `bytes` to the transactions the current phase waits for (TMA copies).
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
#if KVC_MBARRIER
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mbar_addr(bar)),
               "r"(bytes)
               : "memory");
#else
  (void)bar, (void)bytes;
#endif
}
// Arrives once (release: this thread's earlier writes are visible to whoever waits the phase).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if KVC_MBARRIER
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(mbar_addr(bar)) : "memory");
#else
  (void)bar;
#endif
}
// Waits until the phase of parity `parity` has completed (acquire). A fresh barrier is in phase
// 0: waiting on parity 1 returns at once (the "previous" phase), which lets a producer's first
// pass over a ring skip its empty-slot waits.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if KVC_MBARRIER
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(mbar_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
#else
  (void)bar, (void)parity;
#endif
}
