// Dense GEMMs of the model on tensor cores: through the Hopper decode GEMM (decode_gemm.h) for the
// few rows of a decode step where it runs, else through cuBLASLt: y[m, n] = x[m, k] · w[n, k]ᵀ (the
// Hugging Face Linear layout: w is [out, in], row-major), bf16 x and w (or FP8 E4M3 with per-row
// scales: run_fp8), fp32 accumulation, y in bf16 or fp32 (the LM head's logits). Descriptors and
// the chosen algorithm are cached per shape, so a warmed-up GEMM costs one cublasLtMatmul call and
// allocates nothing (CUDA-graph capturable). With set_tuning on, the first eager call of a decode
// shape times the heuristic's candidates on the call's own operands and keeps the fastest: on an
// H100 the first pick of the bf16 down projection (k = 14,336) at 128 rows took 59.9 us against
// the fastest candidate's 46.0 (bench/results/fp8-h200.md, eleventh session). An earlier try on
// the H200, timing with the weights warm in L2, found no gain (runs/2026-12-01-engine-r2); the
// timing here evicts L2 before every run, as a decode step that streams all layers' weights
// finds it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cuda/gemm_tuning.h"

namespace kvc::kernels::cuda {

enum class GemmOut { kBF16, kF32 };

// Where Gemm::run_fp8 reads its scales (cuBLASLt's layouts, found by
// bench/cuda/fp8_scale_modes_probe.cu): each row's one scale repeated for every 128-column block
// of k, the block's scales of all rows together: row r, block b at scales[b * stride + r].
// Weights hold every block (stride n). Activations hold every block for the few rows of a decode
// step (rows <= kFp8BlockScaledMaxRows: cuBLASLt's 1x128-block kernels, 1.3-1.5x faster there
// than its outer-vector ones, with rows rounded up to 4, which they need), and the first block
// only (an outer vector of `rows` scales) above that, where the outer-vector kernels are the
// faster ones (bench/results/fp8-h200.md). The producers (ops.h) write this layout.
struct Fp8ScaleLayout {
  int64_t stride = 0;  // scales apart between blocks
  int blocks = 0;      // blocks held
  constexpr int64_t count() const { return stride * blocks; }
};
inline constexpr int kFp8BlockScaledMaxRows = 128;
constexpr int fp8_scale_blocks(int k) {
  return (k + 127) / 128;
}
// The rows run_fp8 computes for `rows` rows: rounded up to 4 where block-scaled. x and y must
// have room for that many (the extra rows of y get unspecified values).
constexpr int fp8_gemm_rows(int rows) {
  return rows <= kFp8BlockScaledMaxRows ? (rows + 3) / 4 * 4 : rows;
}
constexpr Fp8ScaleLayout fp8_weight_scales(int n, int k) {
  return {n, fp8_scale_blocks(k)};
}
constexpr Fp8ScaleLayout fp8_activation_scales(int rows, int k) {
  return rows <= kFp8BlockScaledMaxRows ? Fp8ScaleLayout{fp8_gemm_rows(rows), fp8_scale_blocks(k)}
                                        : Fp8ScaleLayout{rows, 1};
}

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

  // Timing cuBLASLt's candidates: with tuning on, a GEMM of at most kTuneMaxRows rows whose
  // weights take at least min_weight_bytes is timed once per row bucket (rows rounded up to a
  // power of two: a serving replica's decode steps take any row count, and each new one would
  // otherwise stall its step): on the first call of the bucket, on a stream not being captured,
  // each of the heuristic's candidates (up to kTuneCandidates) for the bucket's row count runs
  // kTuneRuns times on the call's w, a random x and a scratch output, L2 evicted before each run,
  // and the fastest by median is kept if it beats the heuristic's first pick by more than
  // kTuneMargin (else the first pick: choices stay put where the candidates are alike). Every
  // row count of the bucket then runs the kept algorithm (where cuBLASLt accepts it for that
  // count) or its own first pick. The call's own result is computed afterwards, so accumulate
  // calls add once. FP8 GEMMs with scales in cuBLASLt (run_fp8) keep the first pick. Off by
  // default (the engine turns it on: LlamaModel::set_gemm_tuning); which candidate wins is a
  // measurement, so two processes may pick differently and their results differ by fp32
  // summation order. A bucket that could not be timed (no memory for the scratch: about
  // rows x n x 4 bytes of output and twice the L2's size, allocated for the timing and freed) is
  // recorded with no candidates and keeps the first pick. Not for models split over ranks (see
  // CudaBackend::create_rank).
  static constexpr int kTuneMaxRows = kGemmTuneMaxRows;
  static constexpr int kTuneCandidates = 8;
  static constexpr int kTuneRuns = kGemmTuneRuns;
  static constexpr double kTuneMargin = 0.03;
  static constexpr size_t kTuneMinWeightBytes = size_t{8} << 20;
  void set_tuning(bool on, size_t min_weight_bytes = kTuneMinWeightBytes);
  bool tuning() const { return tuning_; }
  using Tuning = GemmTuning;  // one timed shape: the first pick against the one kept
  const std::vector<Tuning>& tunings() const { return tunings_; }
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y = x · wᵀ (beta 0) or y += x · wᵀ (accumulate; y must be the output dtype). x: [m, k] bf16,
  // w: [n, k] bf16, y: [m, n]. Row-major, densely packed. Returns cudaErrorNotSupported when
  // cuBLASLt finds no algorithm, or the launch error.
  cudaError_t run(const void* x, const void* w, void* y, int m, int n, int k, GemmOut out,
                  cudaStream_t stream, bool accumulate = false);
  // y[i, j] = x_scale[i] * w_scale[j] * sum_k x[i, k] w[j, k] through cuBLASLt's FP8 matmul:
  // x [m, k] and w [n, k] E4M3 codes (ops.h quantize_rows_fp8 and the FP8 producers), one fp32
  // scale per row of each (per token, per output channel) laid out as fp8_activation_scales(m,
  // k) and fp8_weight_scales(n, k), applied per 128-column block or in the epilogue; fp32
  // accumulation, y bf16 or fp32. Runs fp8_gemm_rows(m) rows (x and y need room for them).
  // Preconditions: k and n multiples of 16, x, w, y 16-byte aligned. cudaErrorNotSupported: no
  // cuBLASLt algorithm (a device before Hopper, or a cuBLASLt without these scaling modes).
  cudaError_t run_fp8(const void* x, const float* x_scales, const void* w, const float* w_scales,
                      void* y, int m, int n, int k, GemmOut out, cudaStream_t stream);
  // y[i, j] = sum_k x[i, k] w[j, k] over the E4M3 codes themselves: run_fp8 without the scales,
  // which the op that reads y applies (ops.h Fp8Dequant), so cuBLASLt runs its per-tensor FP8
  // kernels, the fastest it has at every row count (bench/results/fp8-h200.md). Same rows,
  // preconditions and errors as run_fp8.
  cudaError_t run_fp8_raw(const void* x, const void* w, void* y, int m, int n, int k, GemmOut out,
                          cudaStream_t stream);

 private:
  struct Plan;
  enum Kind { kBf16 = 0, kFp8Scaled = 1, kFp8Raw = 2 };
  // m, n, k, out, accumulate, kind (FP8 scaled: block-scaled for m <= kFp8BlockScaledMaxRows)
  using Key = std::tuple<int, int, int, int, bool, int>;
  Plan* plan_for(int m, int n, int k, GemmOut out, bool accumulate, Kind kind = kBf16);
  cudaError_t check_fp8(int& m, int n, int k) const;
  cudaError_t matmul(Plan* p, const void* x, const void* w, void* y, float beta,
                     cudaStream_t stream, int candidate = -1);
  // set_tuning's choice for plan p: timed for its row bucket unless the bucket already was
  // (marks p tuned unless the stream is being captured).
  void tune(Plan* p, const void* w, int m, int n, int k, GemmOut out, bool accumulate, Kind kind,
            cudaStream_t stream);
  // Times the candidates of plan b (the bucket's row count, rows) on w; returns the index kept.
  int time_candidates(Plan* b, const void* w, int rows, int n, int k, Kind kind, GemmOut out,
                      cudaStream_t stream);

  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  float* one_ = nullptr;  // 1.0f on the device: the raw FP8 GEMM's scales
  size_t workspace_bytes_ = 0;
  bool decode_kernel_ = false;
  bool tuning_ = false;
  size_t tune_min_weight_bytes_ = kTuneMinWeightBytes;
  std::vector<Tuning> tunings_;
  // Per (row bucket, n, k, out, kind): the algorithm kept (cublasLtMatmulAlgo_t's 64 bytes), or
  // none where the first pick stays.
  using BucketKey = std::tuple<int, int, int, int, int>;
  std::map<BucketKey, std::optional<std::array<uint64_t, 8>>> bucket_algos_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace kvc::kernels::cuda
