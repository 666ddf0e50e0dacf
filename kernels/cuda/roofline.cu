#include "kernels/cuda/roofline.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/fill.h"
#include "kernels/cuda/gemm.h"

namespace kvc::kernels::cuda {
namespace {

// Sums 16-byte words so the loads cannot be dropped; one word per CTA is written.
__global__ void read_kernel(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // practically never: keeps the loads alive
}

template <typename F>
double median_ms(F&& launch, int iters, cudaStream_t s) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  launch();  // warm-up
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    cudaEventRecord(a, s);
    launch();
    cudaEventRecord(b, s);
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

double measure_read_bandwidth(size_t bytes, int iters) {
  void* buf = nullptr;
  uint32_t* sink = nullptr;
  if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, 4 << 16) != cudaSuccess) {
    (void)cudaGetLastError();
    if (buf) cudaFree(buf);
    return 0;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  fill_random(buf, bytes / 2, KvDtype::kBF16, 7, 1.0f, s);  // never time zeros
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t words = bytes / 16;
  const double ms = median_ms(
      [&] { read_kernel<<<sms * 8, 512, 0, s>>>(static_cast<const uint4*>(buf), words, sink); },
      iters, s);
  cudaStreamDestroy(s);
  cudaFree(buf);
  cudaFree(sink);
  return ms > 0 ? static_cast<double>(words * 16) / (ms * 1e-3) : 0;
}

double measure_gemm_flops(int m, int n, int k, int iters) {
  void *x = nullptr, *w = nullptr, *y = nullptr;
  if (cudaMalloc(&x, size_t(m) * k * 2) != cudaSuccess ||
      cudaMalloc(&w, size_t(n) * k * 2) != cudaSuccess ||
      cudaMalloc(&y, size_t(m) * n * 2) != cudaSuccess) {
    (void)cudaGetLastError();
    cudaFree(x);
    cudaFree(w);
    return 0;
  }
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  fill_random(x, size_t(m) * k, KvDtype::kBF16, 1, 1.0f, s);
  fill_random(w, size_t(n) * k, KvDtype::kBF16, 2, 1.0f, s);
  double flops = 0;
  {
    Gemm gemm;
    const double ms = median_ms([&] { gemm.run(x, w, y, m, n, k, GemmOut::kBF16, s); }, iters, s);
    flops = ms > 0 ? 2.0 * m * n * k / (ms * 1e-3) : 0;
  }
  cudaStreamDestroy(s);
  cudaFree(x);
  cudaFree(w);
  cudaFree(y);
  return flops;
}

}  // namespace kvc::kernels::cuda
