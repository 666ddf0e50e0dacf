// Timing of device work as CUDA graph replays, shared by the device benchmarks (`bench kernels`,
// `bench gemm`): launches captured once into a graph, the replays timed with device events.
#pragma once

#include <functional>

#include <cuda_runtime_api.h>

namespace kvc::bench {

// launch(i, stream) enqueues the i-th piece of work. Runs launch(0) once outside the capture
// (first-use setup such as plans and function attributes), captures launches 0..count-1 into a
// graph, replays it three times to warm up, then returns the median milliseconds of `iters`
// timed replays. On a CUDA failure: the error (out_ms untouched).
cudaError_t median_graph_ms(const std::function<cudaError_t(int, cudaStream_t)>& launch, int count,
                            cudaStream_t stream, int iters, float& out_ms);

}  // namespace kvc::bench
