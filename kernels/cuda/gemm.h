// Dense GEMMs of the model on tensor cores: through the Hopper decode GEMM (decode_gemm.h) for the
// few rows of a decode step where it runs, else through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ (the
// Hugging Face Linear layout: w is [out, in], row-major), bf16 x and w (or FP8 E4M3 with per-row
// scales: run_fp8), fp32 accumulation, y in bf16 or fp32 (the LM head's logits). Descriptors and
// the chosen algorithm are cached per shape, so a warmed-up GEMM costs one cublasLtMatmul call and
// allocates nothing (CUDA-graph capturable). Tried on the H200 at the decode shapes (128 rows) and
// not kept: timing the heuristic's best 8 algorithms on first use, and those plus split-K variants
// (2-16 splits): no gain over the heuristic's first choice
// (bench/results/runs/2026-12-01-engine-r2, -r4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include <cuda_runtime_api.h>

namespace kvc::kernels::cuda {

enum class GemmOut { kBF16, kF32 };

class Gemm {
 public:
  // Creates the cuBLASLt handle and a device workspace of `workspace_bytes`; ok() says whether
  // both succeeded (run() fails with cudaErrorInitializationError otherwise).
  explicit Gemm(size_t workspace_bytes = size_t{32} << 20);
  bool ok() const { return handle_ != nullptr && (workspace_ != nullptr || workspace_bytes_ == 0); }
  // Whether run() may use the decode GEMM where the device runs it (off by default: on the H200
  // it is still slower than cuBLASLt, bench/results/gemm-h200.md); off: cuBLASLt only.
  void set_decode_kernel(bool on);
  bool decode_kernel() const { return decode_kernel_; }
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x · wᵀ (beta 0) or y += x · wᵀ (accumulate; y must be the output dtype). x: [m, k] bf16,
  // w: [n, k] bf16, y: [m, n]. Row-major, densely packed. Returns cudaErrorNotSupported when
  // cuBLASLt finds no algorithm, or the launch error.
  cudaError_t run(const void* x, const void* w, void* y, int m, int n, int k, GemmOut out,
                  cudaStream_t stream, bool accumulate = false);
  // y[i, j] = x_scales[i] * w_scales[j] * sum_k x[i, k] w[j, k] through cuBLASLt's FP8 matmul:
  // x [m, k] and w [n, k] E4M3 codes (ops.h quantize_rows_fp8 and the FP8 producers), one fp32
  // scale per row of each (device arrays: per token, per output channel), applied in the
  // epilogue (outer-vector scaling); fp32 accumulation, y bf16 or fp32. Preconditions: k and n
  // multiples of 16, x, w, y 16-byte aligned. cudaErrorNotSupported: no cuBLASLt algorithm (a
  // device before Hopper, or a cuBLASLt without outer-vector scaling).
  cudaError_t run_fp8(const void* x, const float* x_scales, const void* w, const float* w_scales,
                      void* y, int m, int n, int k, GemmOut out, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<int, int, int, int, bool, bool>;  // m, n, k, out, accumulate, fp8
  Plan* plan_for(int m, int n, int k, GemmOut out, bool accumulate, bool fp8 = false);

  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  bool decode_kernel_ = false;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace kvc::kernels::cuda
