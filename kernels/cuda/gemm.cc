#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/cuda/decode_gemm.h"
#include "kernels/cuda/fill.h"

namespace kvc::kernels::cuda {

// Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is column-major yᵀ[n, m] = op(W)[n, k] · X[k, m], where
// the column-major view of w is a k x n matrix (ld k) taken transposed and that of x a k x m
// matrix (ld k) taken as is.
static_assert(sizeof(cublasLtMatmulAlgo_t) == sizeof(uint64_t) * 8,
              "Gemm::bucket_algos_ holds one");

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first (algo: one of them)
  bool ok = false;
  bool tuned = false;  // timed already (set_tuning), or not to be timed
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return;  // ok() is false
  handle_ = h;
  if (workspace_bytes_ > 0 && cudaMalloc(&workspace_, workspace_bytes_) != cudaSuccess) {
    (void)cudaGetLastError();
    workspace_ = nullptr;
  }
  const float one = 1.0f;
  if (cudaMalloc(&one_, sizeof one) != cudaSuccess ||
      cudaMemcpy(one_, &one, sizeof one, cudaMemcpyHostToDevice) != cudaSuccess) {
    (void)cudaGetLastError();
    if (one_) cudaFree(one_);
    one_ = nullptr;
  }
}

Gemm::~Gemm() {
  plans_.clear();
  if (one_) cudaFree(one_);
  if (workspace_) cudaFree(workspace_);
  if (handle_) cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
}

void Gemm::set_decode_kernel(bool on) {
  decode_kernel_ = on && decode_gemm_supported();
}

Gemm::Plan* Gemm::plan_for(int m, int n, int k, GemmOut out, bool accumulate, Kind kind) {
  const Key key{m, n, k, static_cast<int>(out), accumulate, kind};
  const bool fp8 = kind != kBf16;
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto p = std::make_unique<Plan>();
  const cudaDataType_t out_type = out == GemmOut::kF32 ? CUDA_R_32F : CUDA_R_16BF;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  bool ok =
      cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  const cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transa,
                                            sizeof transa) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &transb,
                                            sizeof transb) == CUBLAS_STATUS_SUCCESS;
  if (kind == kFp8Raw) {
    // Per-tensor scales of 1: the output is the sum of code products.
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    const void* one = one_;
    ok = ok && one != nullptr;
    for (const auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CUBLASLT_MATMUL_DESC_B_SCALE_MODE})
      ok = ok && cublasLtMatmulDescSetAttribute(p->desc, attr, &mode, sizeof mode) ==
                     CUBLAS_STATUS_SUCCESS;
    for (const auto attr :
         {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER})
      ok = ok &&
           cublasLtMatmulDescSetAttribute(p->desc, attr, &one, sizeof one) == CUBLAS_STATUS_SUCCESS;
  } else if (fp8) {
    // A (the weights, n rows after the transpose) and B (the activations, m columns): scales per
    // 128-column block of k, or one per row (gemm.h Fp8ScaleLayout); their pointers are set per
    // call (run_fp8).
    const int32_t mode = m <= kFp8BlockScaledMaxRows ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                                     : CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode,
                                              sizeof mode) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode,
                                              sizeof mode) == CUBLAS_STATUS_SUCCESS;
    // The heuristic finds no algorithm while the pointers are null (seen with cuBLASLt 13.1 on
    // the H200): any device address stands in until run_fp8 sets the real ones.
    const void* stand_in = workspace_;
    ok = ok && stand_in != nullptr &&
         cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &stand_in,
                                        sizeof stand_in) == CUBLAS_STATUS_SUCCESS;
    ok = ok && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                              &stand_in, sizeof stand_in) == CUBLAS_STATUS_SUCCESS;
  }
  ok = ok && cublasLtMatrixLayoutCreate(&p->a, in_type, k, n, k) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatrixLayoutCreate(&p->b, in_type, k, m, k) == CUBLAS_STATUS_SUCCESS;
  ok = ok && cublasLtMatrixLayoutCreate(&p->c, out_type, n, m, n) == CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = nullptr;
  ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
  uint64_t ws = workspace_bytes_;
  ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof ws) == CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulHeuristicResult_t results[kTuneCandidates]{};
  int found = 0;
  ok = ok &&
       cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a, p->b,
                                      p->c, p->c, pref, kTuneCandidates, results,
                                      &found) == CUBLAS_STATUS_SUCCESS &&
       found > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ok) {
    p->algo = results[0].algo;
    for (int i = 0; i < found; ++i)
      p->candidates.push_back(results[i].algo);
  }
  p->ok = ok;
  (void)accumulate;
  return plans_.emplace(key, std::move(p)).first->second.get();
}

cudaError_t Gemm::matmul(Plan* p, const void* x, const void* w, void* y, float beta,
                         cudaStream_t stream, int candidate) {
  const float alpha = 1.0f;
  const cublasLtMatmulAlgo_t* algo = candidate < 0 ? &p->algo : &p->candidates[candidate];
  const cublasStatus_t s =
      cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p->desc, &alpha, w, p->a, x, p->b,
                     &beta, y, p->c, y, p->c, algo, workspace_, workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return cudaErrorLaunchFailure;
  return cudaGetLastError();
}

void Gemm::set_tuning(bool on, size_t min_weight_bytes) {
  tuning_ = on;
  tune_min_weight_bytes_ = min_weight_bytes;
}

namespace {

// Device scratch of one timing, freed on every path.
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) {
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
      (void)cudaGetLastError();
      p = nullptr;
    }
  }
  ~Scratch() {
    if (p) cudaFree(p);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

struct Events {
  std::vector<cudaEvent_t> e;
  explicit Events(int n) : e(n, nullptr) {
    for (auto& x : e)
      if (cudaEventCreate(&x) != cudaSuccess) x = nullptr;
  }
  ~Events() {
    for (auto x : e)
      if (x) cudaEventDestroy(x);
  }
  bool ok() const {
    return std::all_of(e.begin(), e.end(), [](cudaEvent_t x) { return x != nullptr; });
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
};

}  // namespace

void Gemm::tune(Plan* p, const void* w, int m, int n, int k, GemmOut out, bool accumulate,
                Kind kind, cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  if (capturing != cudaStreamCaptureStatusNone) return;  // chosen on a later eager call
  p->tuned = true;
  const size_t in_elem = kind == kBf16 ? 2 : 1;
  if (kind == kFp8Scaled || m > kTuneMaxRows ||
      size_t(n) * size_t(k) * in_elem < tune_min_weight_bytes_) {
    return;
  }
  const int bucket = static_cast<int>(std::bit_ceil(static_cast<unsigned>(m)));
  const BucketKey key{bucket, n, k, static_cast<int>(out), kind};
  auto it = bucket_algos_.find(key);
  Plan* timed = nullptr;
  if (it == bucket_algos_.end()) {
    Plan* b = bucket == m ? p : plan_for(bucket, n, k, out, accumulate, kind);
    timed = b;
    std::optional<std::array<uint64_t, 8>> kept;
    if (b->ok && b->candidates.size() >= 2) {
      const int best = time_candidates(b, w, bucket, n, k, kind, out, stream);
      if (best > 0) {
        b->algo = b->candidates[best];
        std::array<uint64_t, 8> bytes;
        std::memcpy(bytes.data(), &b->algo, sizeof bytes);
        kept = bytes;
      }
    }
    b->tuned = true;
    it = bucket_algos_.emplace(key, kept).first;
  }
  if (!it->second || timed == p) return;  // the first pick stays, or p is the timed plan
  cublasLtMatmulAlgo_t algo;
  std::memcpy(&algo, it->second->data(), sizeof algo);
  cublasLtMatmulHeuristicResult_t fits{};
  if (cublasLtMatmulAlgoCheck(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a, p->b, p->c,
                              p->c, &algo, &fits) == CUBLAS_STATUS_SUCCESS &&
      fits.workspaceSize <= workspace_bytes_) {
    p->algo = algo;
  }
}

int Gemm::time_candidates(Plan* b, const void* w, int rows, int n, int k, Kind kind, GemmOut out,
                          cudaStream_t stream) {
  const auto started = std::chrono::steady_clock::now();
  int device = 0, l2 = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  const size_t in_elem = kind == kBf16 ? 2 : 1, out_elem = out == GemmOut::kF32 ? 4 : 2;
  const size_t x_bytes = size_t(rows) * size_t(k) * in_elem;
  Scratch x(x_bytes), y(size_t(rows) * size_t(n) * out_elem), evict(2 * size_t(l2));
  Events ev(2 * kTuneRuns);
  Tuning t;
  t.m = rows;
  t.n = n;
  t.k = k;
  t.fp8 = kind != kBf16;
  auto untimed = [&] {  // recorded with no candidate timed: the heuristic's pick stays
    (void)cudaGetLastError();
    t.seconds = std::chrono::duration<float>(std::chrono::steady_clock::now() - started).count();
    tunings_.push_back(t);
    return 0;
  };
  // No room to time as a step finds the weights (from DRAM).
  if (x.p == nullptr || y.p == nullptr || evict.p == nullptr || !ev.ok()) return untimed();
  // Activations of the usual magnitudes (as bf16 values; FP8 reads their bytes as codes).
  if (fill_random(x.p, x_bytes / 2, KvDtype::kBF16, 1, 1.0f, stream) != cudaSuccess) {
    return untimed();
  }
  const int count = static_cast<int>(b->candidates.size());
  std::vector<float> median(count, -1.0f);
  for (int c = 0; c < count; ++c) {
    // A first run checks that the candidate runs here and warms its kernel up.
    if (matmul(b, x.p, w, y.p, 0.0f, stream, c) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    bool ran = true;
    for (int r = 0; r < kTuneRuns && ran; ++r) {
      ran = evict_l2(evict.p, 2 * size_t(l2), stream) == cudaSuccess &&
            cudaEventRecord(ev.e[2 * r], stream) == cudaSuccess &&
            matmul(b, x.p, w, y.p, 0.0f, stream, c) == cudaSuccess &&
            cudaEventRecord(ev.e[2 * r + 1], stream) == cudaSuccess;
    }
    if (!ran || cudaEventSynchronize(ev.e[2 * kTuneRuns - 1]) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    std::vector<float> us(kTuneRuns);
    for (int r = 0; r < kTuneRuns; ++r) {
      float ms = 0;
      cudaEventElapsedTime(&ms, ev.e[2 * r], ev.e[2 * r + 1]);
      us[r] = ms * 1e3f;
    }
    std::nth_element(us.begin(), us.begin() + kTuneRuns / 2, us.end());
    median[c] = us[kTuneRuns / 2];
  }
  if (median[0] <= 0) return untimed();  // the first pick did not time: keep it
  int best = 0;
  for (int c = 1; c < count; ++c)
    if (median[c] > 0 && median[c] < median[best]) best = c;
  if (median[best] > median[0] * (1.0 - kTuneMargin)) best = 0;
  t.candidates =
      static_cast<int>(std::count_if(median.begin(), median.end(), [](float v) { return v > 0; }));
  t.chosen = best;
  t.first_us = median[0];
  t.chosen_us = median[best];
  t.seconds = std::chrono::duration<float>(std::chrono::steady_clock::now() - started).count();
  tunings_.push_back(t);
  return best;
}

cudaError_t Gemm::run(const void* x, const void* w, void* y, int m, int n, int k, GemmOut out,
                      cudaStream_t stream, bool accumulate) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (decode_kernel_ && !accumulate && decode_gemm_fits(x, w, y, m, n, k)) {
    const cudaError_t e = decode_gemm(x, w, y, m, n, k, out == GemmOut::kF32, stream);
    if (e != cudaErrorNotSupported) return e;
  }
  if (!ok()) return cudaErrorInitializationError;
  Plan* p = plan_for(m, n, k, out, accumulate);
  if (!p->ok) return cudaErrorNotSupported;
  if (tuning_ && !p->tuned) tune(p, w, m, n, k, out, accumulate, kBf16, stream);
  return matmul(p, x, w, y, accumulate ? 1.0f : 0.0f, stream);
}

cudaError_t Gemm::check_fp8(int& m, int n, int k) const {
  if (k % 16 != 0 || n % 16 != 0) return cudaErrorInvalidValue;
  if (!ok()) return cudaErrorInitializationError;
  m = fp8_gemm_rows(m);
  return cudaSuccess;
}

cudaError_t Gemm::run_fp8_raw(const void* x, const void* w, void* y, int m, int n, int k,
                              GemmOut out, cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (const cudaError_t e = check_fp8(m, n, k); e != cudaSuccess) return e;
  if (one_ == nullptr) return cudaErrorInitializationError;  // its scales could not be made
  Plan* p = plan_for(m, n, k, out, false, kFp8Raw);
  if (!p->ok) return cudaErrorNotSupported;
  if (tuning_ && !p->tuned) tune(p, w, m, n, k, out, false, kFp8Raw, stream);
  return matmul(p, x, w, y, 0.0f, stream);
}

cudaError_t Gemm::run_fp8(const void* x, const float* x_scales, const void* w,
                          const float* w_scales, void* y, int m, int n, int k, GemmOut out,
                          cudaStream_t stream) {
  if (m == 0 || n == 0) return cudaSuccess;
  if (x_scales == nullptr || w_scales == nullptr) return cudaErrorInvalidValue;
  if (const cudaError_t e = check_fp8(m, n, k); e != cudaSuccess) return e;
  Plan* p = plan_for(m, n, k, out, false, kFp8Scaled);
  if (!p->ok) return cudaErrorNotSupported;
  // Host-side attributes of the descriptor: safe while a stream is being captured.
  if (cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales,
                                     sizeof w_scales) != CUBLAS_STATUS_SUCCESS ||
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales,
                                     sizeof x_scales) != CUBLAS_STATUS_SUCCESS) {
    return cudaErrorInvalidValue;
  }
  return matmul(p, x, w, y, 0.0f, stream);
}

}  // namespace kvc::kernels::cuda
