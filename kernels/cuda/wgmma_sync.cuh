// wgmma's ordering instructions and a warpgroup's register budget (sm_90a): the tensor-core
// kernels' one copy (decode_gemm.cu, the attention prefix passes). Included inside each kernel
// file's anonymous namespace, like warp_ops.cuh; empty off sm_90a, where those paths are not
// built.
#pragma once

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KVC_WGMMA_SYNC 1
#else
#define KVC_WGMMA_SYNC 0
#endif

// Orders earlier register accesses before the wgmma products issued after it.
__device__ __forceinline__ void wgmma_fence() {
#if KVC_WGMMA_SYNC
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// Closes a group of issued products.
__device__ __forceinline__ void wgmma_commit() {
#if KVC_WGMMA_SYNC
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most N of this warp's committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if KVC_WGMMA_SYNC
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
// Register budgets of a warp-specialised kernel's warpgroups: a producer gives registers back,
// the consumers take them.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
#if KVC_WGMMA_SYNC
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
#if KVC_WGMMA_SYNC
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
