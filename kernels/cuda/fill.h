// Device data for measurements: random fills without a host round trip, and a read that evicts
// what L2 holds.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cuda/attention.h"

namespace kvc::kernels::cuda {

// n values of `dtype`, uniform in [-scale, scale) from a counter-based hash of (seed, index):
// never all zeros, different for every seed.
cudaError_t fill_random(void* data, size_t n, KvDtype dtype, uint64_t seed, float scale,
                        cudaStream_t stream = nullptr);

// Reads `bytes` of `buf` (16-byte aligned; scratch: its first 16 bytes may be overwritten): run
// over a buffer of twice the L2's size, it leaves L2 holding clean lines of `buf`
// only, so the next kernel reads its operands from DRAM as in a step that streams every layer's
// weights (kernels/cuda/gemm.cc times its candidates so).
cudaError_t evict_l2(const void* buf, size_t bytes, cudaStream_t stream = nullptr);

}  // namespace kvc::kernels::cuda
