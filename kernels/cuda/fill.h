// Random device data for benchmarks: fills without a host round trip.
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

}  // namespace kvc::kernels::cuda
