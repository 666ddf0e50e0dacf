// Which FP8 scaling modes this cuBLASLt runs on this device (a device-time probe, not built by
// CMake): nvcc -std=c++17 -o fp8_probe fp8_scale_modes_probe.cu -lcublasLt
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  int ver = (int)cublasLtGetVersion();
  std::printf("cublasLt version %d\n", ver);
  const int m = 128, n = 4096, k = 4096;
  void *a, *b, *d, *ws;
  float *sa, *sb;
  cudaMalloc(&a, size_t(n) * k);
  cudaMalloc(&b, size_t(m) * k);
  cudaMalloc(&d, size_t(m) * n * 4);
  cudaMalloc(&ws, 32 << 20);
  cudaMalloc(&sa, size_t(n) * k / 16 * 4);
  cudaMalloc(&sb, size_t(m) * k / 16 * 4);
  cudaMemset(a, 0x38, size_t(n) * k);
  cudaMemset(b, 0x38, size_t(m) * k);
  struct Mode {
    const char* name;
    int a_mode, b_mode;
    bool set_ptrs;
  } modes[] = {
      {"scalar/scalar", CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, true},
      {"outer/outer (null ptrs)", CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, false},
      {"outer/outer", CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F, true},
      {"outer/scalar", CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, true},
      {"blk128x128/vec128", CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, true},
      {"vec128/vec128", CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
       CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, true},
  };
  for (cudaDataType_t out : {CUDA_R_16BF, CUDA_R_32F}) {
    for (const Mode& md : modes) {
      cublasLtMatmulDesc_t desc;
      cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
      cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
      int s1 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &md.a_mode,
                                              sizeof md.a_mode);
      int s2 = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &md.b_mode,
                                              sizeof md.b_mode);
      if (md.set_ptrs) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
      }
      cublasLtMatrixLayout_t la, lb, lc;
      cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, n, k);
      cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, m, k);
      cublasLtMatrixLayoutCreate(&lc, out, n, m, n);
      cublasLtMatmulPreference_t pref;
      cublasLtMatmulPreferenceCreate(&pref);
      uint64_t wsb = 32 << 20;
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                           sizeof wsb);
      cublasLtMatmulHeuristicResult_t r{};
      int found = 0;
      int hs = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &r, &found);
      int rs = -1;
      float ms = -1;
      if (hs == 0 && found > 0) {
        float alpha = 1, beta = 0;
        rs = cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, d, lc, d, lc, &r.algo, ws, wsb,
                            nullptr);
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaEventRecord(e0);
        for (int i = 0; i < 50; ++i)
          cublasLtMatmul(h, desc, &alpha, a, la, b, lb, &beta, d, lc, d, lc, &r.algo, ws, wsb,
                         nullptr);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&ms, e0, e1);
        ms /= 50;
      }
      std::printf("%-26s out %s: set modes %d %d, heuristic %d found %d, run %d, %.1f us (%s)\n",
                  md.name, out == CUDA_R_32F ? "f32 " : "bf16", s1, s2, hs, found, rs, ms * 1e3,
                  cudaGetErrorString(cudaGetLastError()));
    }
  }
  return 0;
}
