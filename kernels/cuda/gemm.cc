#include "kernels/cuda/gemm.h"

#include <cstdlib>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/cuda/decode_gemm.h"

namespace kvc::kernels::cuda {

// Row-major y[m, n] = x[m, k] · w[n, k]ᵀ is column-major yᵀ[n, m] = op(W)[n, k] · X[k, m], where
// the column-major view of w is a k x n matrix (ld k) taken transposed and that of x a k x m
// matrix (ld k) taken as is.
struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
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
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ok = ok &&
       cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a, p->b,
                                      p->c, p->c, pref, 1, &result,
                                      &found) == CUBLAS_STATUS_SUCCESS &&
       found > 0;
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ok) p->algo = result.algo;
  p->ok = ok;
  (void)accumulate;
  return plans_.emplace(key, std::move(p)).first->second.get();
}

cudaError_t Gemm::matmul(Plan* p, const void* x, const void* w, void* y, float beta,
                         cudaStream_t stream) {
  const float alpha = 1.0f;
  const cublasStatus_t s =
      cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p->desc, &alpha, w, p->a, x, p->b,
                     &beta, y, p->c, y, p->c, &p->algo, workspace_, workspace_bytes_, stream);
  if (s != CUBLAS_STATUS_SUCCESS) return cudaErrorLaunchFailure;
  return cudaGetLastError();
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
