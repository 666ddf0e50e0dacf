#include "bench/cuda/graph_timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

namespace kvc::bench {

cudaError_t median_graph_ms(const std::function<cudaError_t(int, cudaStream_t)>& launch, int count,
                            cudaStream_t stream, int iters, float& out_ms) {
  if (cudaError_t e = launch(0, stream); e != cudaSuccess) return e;
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
  cudaGraph_t graph = nullptr;
  if (cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
      e != cudaSuccess) {
    return e;
  }
  cudaError_t captured = cudaSuccess;
  for (int i = 0; i < count && captured == cudaSuccess; ++i)
    captured = launch(i, stream);
  cudaError_t e = cudaStreamEndCapture(stream, &graph);
  if (captured != cudaSuccess) e = captured;
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  cudaEvent_t a = nullptr, b = nullptr;
  if (e == cudaSuccess) e = cudaEventCreate(&a);
  if (e == cudaSuccess) e = cudaEventCreate(&b);
  for (int i = 0; i < 3 && e == cudaSuccess; ++i)
    e = cudaGraphLaunch(exec, stream);
  std::vector<float> ms;
  for (int i = 0; i < iters && e == cudaSuccess; ++i) {
    e = cudaEventRecord(a, stream);
    if (e == cudaSuccess) e = cudaGraphLaunch(exec, stream);
    if (e == cudaSuccess) e = cudaEventRecord(b, stream);
    if (e == cudaSuccess) e = cudaEventSynchronize(b);
    float t = 0;
    if (e == cudaSuccess) e = cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (e != cudaSuccess) return e;
  if (ms.empty()) return cudaErrorInvalidValue;
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  out_ms = ms[ms.size() / 2];
  return cudaSuccess;
}

}  // namespace kvc::bench
