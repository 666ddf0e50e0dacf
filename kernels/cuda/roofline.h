// The two ceilings a step's floor is measured against, measured on this device in the same run
// (DESIGN.md "Performance targets"): streaming-read bandwidth (every byte loaded once with 16-byte
// loads, little written; copy bandwidth understates what a read-mostly kernel can reach) and the
// dense bf16 tensor-core rate of a cuBLASLt GEMM. No CUDA types: benchmarks outside kernels/cuda
// call it.
#pragma once

#include <cstddef>

namespace kvc::kernels::cuda {

// Bytes per second read by a streaming kernel over `bytes` of device memory (median of `iters`
// timed runs after a warm-up; the buffer is much larger than L2). 0 when no device.
double measure_read_bandwidth(size_t bytes = size_t{8} << 30, int iters = 10);

// FLOP per second of y[m, n] = x[m, k] · w[n, k]ᵀ in bf16 with fp32 accumulation (median of
// `iters`). 0 when no device.
double measure_gemm_flops(int m = 8192, int n = 8192, int k = 8192, int iters = 10);

}  // namespace kvc::kernels::cuda
