// What Gemm::set_tuning (kernels/cuda/gemm.h) measured for one GEMM shape: plain data without the
// CUDA headers, for the model's callers (kernels/cuda/llama.h gemm_tunings).
#pragma once

namespace kvc::kernels::cuda {

inline constexpr int kGemmTuneMaxRows = 256;  // rows of the largest shape timed (decode steps)
inline constexpr int kGemmTuneRuns = 5;       // timed runs of each candidate (their median counts)

struct GemmTuning {
  int m = 0, n = 0, k = 0;
  bool fp8 = false;
  int candidates = 0;   // the heuristic's candidates that ran (0: not timed, first pick kept)
  int chosen = 0;       // index of the one kept (0: the heuristic's first pick)
  float first_us = 0;   // median time of the first pick
  float chosen_us = 0;  // median time of the one kept
  float seconds = 0;    // wall time the timing took
};

}  // namespace kvc::kernels::cuda
