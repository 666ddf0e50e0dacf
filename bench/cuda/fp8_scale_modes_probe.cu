// Which FP8 scaling modes this cuBLASLt runs on this device, how fast at the decode shapes of the
// seed (Llama-3-8B layers, weights rotated past L2), and where VEC128 scales live (a device-time
// probe, not built by CMake):
//   nvcc -std=c++17 -I. -o fp8_probe bench/cuda/fp8_scale_modes_probe.cu -lcublasLt && ./fp8_probe
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/fp8_rule.h"

namespace {

constexpr int kOuter = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
constexpr int kVec128 = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
constexpr int kScalar = CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;

struct Op {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulHeuristicResult_t r{};
  cublasLtMatmulHeuristicResult_t all[8]{};
  int found = 0;
  bool ok = false;
};

// y[m, n] = x[m, k] w[n, k]^T as column-major y^T = op_T(W) X (as kernels/cuda/gemm.cc).
Op make_op(cublasLtHandle_t h, int mode, int m, int n, int k, const void* sa, const void* sb,
           size_t ws) {
  Op op;
  cublasLtMatmulDescCreate(&op.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof mode);
  cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof mode);
  cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
  cublasLtMatmulDescSetAttribute(op.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
  cublasLtMatrixLayoutCreate(&op.a, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&op.b, CUDA_R_8F_E4M3, k, m, k);
  cublasLtMatrixLayoutCreate(&op.c, CUDA_R_16BF, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  uint64_t wsb = ws;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb,
                                       sizeof wsb);
  const int hs = cublasLtMatmulAlgoGetHeuristic(h, op.desc, op.a, op.b, op.c, op.c, pref, 8, op.all,
                                                &op.found);
  cublasLtMatmulPreferenceDestroy(pref);
  op.ok = hs == 0 && op.found > 0;
  if (op.ok) op.r = op.all[0];
  return op;
}

float bf16_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Random codes and random per-128-group scales; the GEMM's output against both readings of the
// VEC128 scale layout: [row][k/128] and [k/128][row].
void layout_check(cublasLtHandle_t h, void* ws, size_t wsb, int m, int n, int k) {
  const int kb = (k + 127) / 128;
  std::vector<uint8_t> xa(size_t(m) * k), wa(size_t(n) * k);
  srand(7);
  auto code = [] {
    uint8_t c;
    do
      c = uint8_t(rand() & 0xFF);
    while ((c & 0x7F) == 0x7F || ((c >> 3) & 15) > 9);  // no NaN, |v| <= 8-ish
    return c;
  };
  for (auto& c : xa)
    c = code();
  for (auto& c : wa)
    c = code();
  std::vector<float> sx(size_t(m) * kb), sw(size_t(n) * kb);
  for (auto& s : sx)
    s = 0.5f + float(rand() % 64) / 32.0f;
  for (auto& s : sw)
    s = 0.5f + float(rand() % 64) / 32.0f;
  void *dx, *dw, *dy;
  float *dsx, *dsw;
  cudaMalloc(&dx, xa.size());
  cudaMalloc(&dw, wa.size());
  cudaMalloc(&dy, size_t(m) * n * 2);
  cudaMalloc(&dsx, sx.size() * 4);
  cudaMalloc(&dsw, sw.size() * 4);
  cudaMemcpy(dx, xa.data(), xa.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dw, wa.data(), wa.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dsx, sx.data(), sx.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dsw, sw.data(), sw.size() * 4, cudaMemcpyHostToDevice);
  Op op = make_op(h, kVec128, m, n, k, dsw, dsx, wsb);
  if (!op.ok) {
    std::printf("layout m=%d n=%d k=%d: no VEC128 algorithm\n", m, n, k);
    return;
  }
  float alpha = 1, beta = 0;
  const int rs = cublasLtMatmul(h, op.desc, &alpha, dw, op.a, dx, op.b, &beta, dy, op.c, dy, op.c,
                                &op.r.algo, ws, wsb, nullptr);
  std::vector<uint16_t> y(size_t(m) * n);
  cudaMemcpy(y.data(), dy, y.size() * 2, cudaMemcpyDeviceToHost);
  double err_rowmajor = 0, err_blockmajor = 0, ref_max = 0;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double r1 = 0, r2 = 0;
      for (int b = 0; b < kb; ++b) {
        double acc = 0;
        for (int t = b * 128; t < std::min(k, b * 128 + 128); ++t) {
          acc += double(kvc::kernels::fp8::e4m3_to_float(xa[size_t(i) * k + t])) *
                 kvc::kernels::fp8::e4m3_to_float(wa[size_t(j) * k + t]);
        }
        r1 += acc * sx[size_t(i) * kb + b] * sw[size_t(j) * kb + b];
        r2 += acc * sx[size_t(b) * m + i] * sw[size_t(b) * n + j];
      }
      const double got = bf16_to_float(y[size_t(i) * n + j]);
      err_rowmajor = std::max(err_rowmajor, std::fabs(got - r1));
      err_blockmajor = std::max(err_blockmajor, std::fabs(got - r2));
      ref_max = std::max(ref_max, std::fabs(r1));
    }
  }
  std::printf(
      "layout m=%d n=%d k=%d: run %d; max |err| reading scales [row][k/128] %.4g, [k/128][row] "
      "%.4g (|ref| up to %.4g)\n",
      m, n, k, rs, err_rowmajor, err_blockmajor, ref_max);
  cudaFree(dx), cudaFree(dw), cudaFree(dy), cudaFree(dsx), cudaFree(dsw);
}

}  // namespace

int main() {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  std::printf("cublasLt version %d\n", int(cublasLtGetVersion()));
  const size_t wsb = size_t(32) << 20;
  void* ws;
  cudaMalloc(&ws, wsb);
  for (int k : {384, 256, 128, 64, 208, 4096})
    layout_check(h, ws, wsb, 16, 256, k);
  for (int m : {1, 4, 5, 8, 12, 17, 20, 24, 32, 100})
    layout_check(h, ws, wsb, m, 256, 384);

  // The seed's four layer GEMMs (qkv, o, gate_up, down), weights rotated over 32 layers' worth.
  struct Shape {
    const char* name;
    int n, k;
  } shapes[] = {
      {"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336}};
  const int layers = 32;
  for (int m : {16, 128, 256, 1024, 2048}) {
    for (int mode : {kScalar, kOuter, kVec128}) {
      double step_us = 0, best_us = 0, bytes = 0;
      bool all_ok = true;
      for (const Shape& s : shapes) {
        std::vector<void*> w(layers);
        for (auto& p : w)
          cudaMalloc(&p, size_t(s.n) * s.k);
        void *x, *y;
        float *sa, *sb;
        cudaMalloc(&x, size_t(m) * s.k);
        cudaMalloc(&y, size_t(m) * s.n * 2);
        cudaMalloc(&sa, size_t(s.n) * s.k / 16 * 4);
        cudaMalloc(&sb, size_t(m) * s.k / 16 * 4);
        cudaMemset(x, 0x38, size_t(m) * s.k);
        for (auto& p : w)
          cudaMemset(p, 0x38, size_t(s.n) * s.k);
        Op op = make_op(h, mode, m, s.n, s.k, sa, sb, wsb);
        if (!op.ok) {
          all_ok = false;
        } else {
          float alpha = 1, beta = 0;
          double best = 1e30, first = 0;
          for (int a = 0; a < op.found; ++a) {
            const cublasLtMatmulAlgo_t* algo = &op.all[a].algo;
            for (int i = 0; i < layers; ++i)
              cublasLtMatmul(h, op.desc, &alpha, w[i], op.a, x, op.b, &beta, y, op.c, y, op.c, algo,
                             ws, wsb, nullptr);
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0), cudaEventCreate(&e1);
            const int reps = 3;
            cudaEventRecord(e0);
            for (int r = 0; r < reps; ++r)
              for (int i = 0; i < layers; ++i)
                cublasLtMatmul(h, op.desc, &alpha, w[i], op.a, x, op.b, &beta, y, op.c, y, op.c,
                               algo, ws, wsb, nullptr);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            const double us = ms * 1e3 / reps;
            if (a == 0) first = us;
            best = std::min(best, us);
          }
          step_us += first;
          best_us += best;
          bytes += double(layers) * s.n * s.k;
        }
        for (auto& p : w)
          cudaFree(p);
        cudaFree(x), cudaFree(y), cudaFree(sa), cudaFree(sb);
      }
      std::printf(
          "rows %4d %-7s: %s per step %.3f ms (best of 8 algorithms %.3f ms; weights %.2f GB, %.0f "
          "GB/s)  %s\n",
          m,
          mode == kScalar  ? "scalar"
          : mode == kOuter ? "outer"
                           : "vec128",
          all_ok ? "" : "[a shape without algorithm]", step_us / 1e3, best_us / 1e3, bytes / 1e9,
          bytes / (step_us * 1e-6) / 1e9, cudaGetErrorString(cudaGetLastError()));
    }
  }
  return 0;
}
