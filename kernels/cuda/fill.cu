#include "kernels/cuda/fill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace kvc::kernels::cuda {
namespace {

__device__ uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <typename T>
__global__ void fill_kernel(T* data, size_t n, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint64_t h = mix(seed ^ mix(i));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    data[i] = static_cast<T>((2.f * u - 1.f) * scale);
  }
}

// XORs what it reads and stores the result where it equals `key` (a value the compiler cannot
// know), so the loads are not optimised away.
__global__ void evict_kernel(const uint4* p, size_t n, uint4* sink, uint32_t key) {
  uint4 acc{0, 0, 0, 0};
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    acc.x ^= v.x;
    acc.y ^= v.y;
    acc.z ^= v.z;
    acc.w ^= v.w;
  }
  if (acc.x == key) *sink = acc;
}

}  // namespace

cudaError_t evict_l2(const void* buf, size_t bytes, cudaStream_t stream) {
  const size_t n = bytes / sizeof(uint4);
  if (n == 0) return cudaSuccess;
  const int threads = 512;
  const unsigned blocks =
      static_cast<unsigned>(std::min<size_t>((n + threads - 1) / threads, 1024));
  // The sink is the buffer's own first word, seldom written: the buffer is the caller's scratch.
  const auto* p = static_cast<const uint4*>(buf);
  evict_kernel<<<blocks, threads, 0, stream>>>(p, n, const_cast<uint4*>(p), 0x9e3779b9u);
  return cudaGetLastError();
}

cudaError_t fill_random(void* data, size_t n, KvDtype dtype, uint64_t seed, float scale,
                        cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const unsigned blocks =
      static_cast<unsigned>(std::min<size_t>((n + threads - 1) / threads, 8192));
  if (dtype == KvDtype::kF16) {
    fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__half*>(data), n, seed, scale);
  } else {
    fill_kernel<<<blocks, threads, 0, stream>>>(static_cast<__nv_bfloat16*>(data), n, seed, scale);
  }
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
