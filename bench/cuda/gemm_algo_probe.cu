// How far cuBLASLt's first heuristic pick is from the fastest algorithm it offers, at the seed's
// decode GEMM shapes (Llama-3-8B layers: qkv, o, gate_up, down), FP8 E4M3 with per-tensor scales
// of 1 (what Gemm::run_fp8_raw runs) and bf16, weights rotated over 32 layers' copies so that
// they come from DRAM as in a decode step. A device-time probe, not built by CMake:
//   nvcc -std=c++17 -O2 -o gemm_algo_probe bench/cuda/gemm_algo_probe.cu -lcublasLt
//   ./gemm_algo_probe
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace {

constexpr int kLayers = 32;
constexpr int kMaxAlgos = 64;
constexpr size_t kWorkspace = size_t(32) << 20;

struct Shape {
  const char* name;
  int n, k;
};

int config_attr(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  int v = -1;
  size_t written = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof v, &written);
  return v;
}

// Mean microseconds of one GEMM over the rotated weights (median of 5 sweeps of kLayers).
float time_algo(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                const cublasLtMatmulAlgo_t* algo, const std::vector<void*>& w, const void* x,
                void* y, void* ws) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const float alpha = 1, beta = 0;
  std::vector<float> sweeps;
  for (int rep = 0; rep < 6; ++rep) {
    cudaEventRecord(e0);
    for (void* wi : w) {
      if (cublasLtMatmul(h, desc, &alpha, wi, a, x, b, &beta, y, c, y, c, algo, ws, kWorkspace,
                         nullptr) != CUBLAS_STATUS_SUCCESS) {
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        return -1;
      }
    }
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    if (rep > 0) sweeps.push_back(ms * 1e3f / float(w.size()));  // the first warms up
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(sweeps.begin(), sweeps.end());
  return sweeps[sweeps.size() / 2];
}

void probe(cublasLtHandle_t h, void* ws, const float* one, bool fp8, int m, const Shape& s) {
  const size_t elem = fp8 ? 1 : 2;
  std::vector<void*> w(kLayers);
  for (auto& p : w) {
    cudaMalloc(&p, size_t(s.n) * s.k * elem);
    cudaMemset(p, 0x38, size_t(s.n) * s.k * elem);
  }
  void *x, *y;
  cudaMalloc(&x, size_t(m) * s.k * elem);
  cudaMemset(x, 0x38, size_t(m) * s.k * elem);
  cudaMalloc(&y, size_t(m) * s.n * 2);
  // As kernels/cuda/gemm.cc: row-major y[m, n] = x[m, k] w[n, k]^T as column-major
  // y^T = op_T(W) X.
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (fp8) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one, sizeof one);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one, sizeof one);
  }
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatrixLayoutCreate(&a, in, s.k, s.n, s.k);
  cublasLtMatrixLayoutCreate(&b, in, s.k, m, s.k);
  cublasLtMatrixLayoutCreate(&c, CUDA_R_16BF, s.n, m, s.n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  uint64_t wsb = kWorkspace;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof wsb);
  cublasLtMatmulHeuristicResult_t results[kMaxAlgos];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, c, pref, kMaxAlgos, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  float first = -1, best = 1e30f;
  int best_i = -1;
  for (int i = 0; i < found; ++i) {
    const float us = time_algo(h, desc, a, b, c, &results[i].algo, w, x, y, ws);
    if (i == 0) first = us;
    if (us > 0 && us < best) best = us, best_i = i;
  }
  const double floor_us = double(s.n) * s.k * elem / 3.0e6;  // bytes at 3 TB/s
  if (best_i >= 0) {
    const cublasLtMatmulAlgo_t& ba = results[best_i].algo;
    std::printf(
        "%-4s m=%4d %-8s algos %2d: first %7.2f us, best %7.2f us (#%d tile %d stages %d "
        "splitK %d), weights at 3 TB/s %6.2f us\n",
        fp8 ? "fp8" : "bf16", m, s.name, found, first, best, best_i,
        config_attr(ba, CUBLASLT_ALGO_CONFIG_TILE_ID),
        config_attr(ba, CUBLASLT_ALGO_CONFIG_STAGES_ID),
        config_attr(ba, CUBLASLT_ALGO_CONFIG_SPLITK_NUM), floor_us);
  } else {
    std::printf("%-4s m=%4d %-8s algos %2d: none ran\n", fp8 ? "fp8" : "bf16", m, s.name, found);
  }
  cublasLtMatrixLayoutDestroy(a);
  cublasLtMatrixLayoutDestroy(b);
  cublasLtMatrixLayoutDestroy(c);
  cublasLtMatmulDescDestroy(desc);
  for (void* p : w)
    cudaFree(p);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace

int main() {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  std::printf("cublasLt version %d\n", int(cublasLtGetVersion()));
  void* ws;
  cudaMalloc(&ws, kWorkspace);
  float* one;
  const float host_one = 1.0f;
  cudaMalloc(&one, sizeof(float));
  cudaMemcpy(one, &host_one, sizeof host_one, cudaMemcpyHostToDevice);
  const Shape shapes[] = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  for (bool fp8 : {true, false})
    for (int m : {16, 128, 256})
      for (const Shape& s : shapes)
        probe(h, ws, one, fp8, m, s);
  cudaDeviceSynchronize();
  std::printf("done: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
