#include "bench/cuda/gemm_bench.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cuda/graph_timing.h"
#include "kernels/cuda/decode_gemm.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/roofline.h"

namespace kvc::bench {
namespace {

using kernels::cuda::Gemm;
using kernels::cuda::GemmOut;

struct Shape {
  const char* name;
  int n, k;
  bool f32_out;
};

// Median time of one GEMM in microseconds: a graph of 16 GEMMs over the rotating weight copies,
// replayed `iters` times. run(w) enqueues one GEMM on `stream`. -1 on a CUDA failure (said).
double time_gemm(const std::function<cudaError_t(const void*)>& run,
                 const std::vector<void*>& weights, int iters, cudaStream_t stream) {
  const int launches = static_cast<int>(weights.size()) * std::max(1, 16 / int(weights.size()));
  float ms = 0;
  const cudaError_t e =
      median_graph_ms([&](int i, cudaStream_t) { return run(weights[i % weights.size()]); },
                      launches, stream, iters, ms);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "bench gemm: %s\n", cudaGetErrorString(e));
    return -1.0;
  }
  return 1000.0 * ms / launches;
}

// Relative L2 difference of two device outputs of n elements.
double rel_diff(const void* a, const void* b, size_t n, bool f32) {
  std::vector<float> x(n), y(n);
  if (f32) {
    cudaMemcpy(x.data(), a, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(y.data(), b, n * 4, cudaMemcpyDeviceToHost);
  } else {
    std::vector<uint16_t> u(n), v(n);
    cudaMemcpy(u.data(), a, n * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(v.data(), b, n * 2, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < n; ++i) {
      x[i] = std::bit_cast<float>(uint32_t(u[i]) << 16);
      y[i] = std::bit_cast<float>(uint32_t(v[i]) << 16);
    }
  }
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
    den += double(y[i]) * y[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Random bf16 bits, normal(0, stddev), through a float.
void fill_random(void* dev, size_t n, float stddev, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<uint16_t> h(n);
  for (auto& v : h)
    v = static_cast<uint16_t>(std::bit_cast<uint32_t>(d(rng)) >> 16);
  cudaMemcpy(dev, h.data(), n * 2, cudaMemcpyHostToDevice);
}

}  // namespace

int run_gemm_bench(const GemmBenchOptions& opt) {
  if (!kernels::cuda::device_available()) {
    std::fprintf(stderr, "kvcascade bench gemm: %s\n", kernels::cuda::device_description().c_str());
    return 2;
  }
  const bool have_decode = kernels::cuda::decode_gemm_supported();
  const int m = opt.rows;
  const double bw = kernels::cuda::measure_read_bandwidth();
  std::printf("streaming read %.0f GB/s; decode GEMM %s; %d rows\n", bw / 1e9,
              have_decode ? "available" : "not available on this device", m);
  if (have_decode) {
    std::printf("co-resident clusters of 1..8 CTAs:");
    for (int s = 1; s <= 8; ++s)
      std::printf(" %d", kernels::cuda::decode_gemm_resident_clusters(s));
    std::printf("\n");
  }
  const std::vector<Shape> shapes = {{"qkv", 6144, 4096, false},
                                     {"o", 4096, 4096, false},
                                     {"gate_up", 28672, 4096, false},
                                     {"down", 4096, 14336, false},
                                     {"lm_head", 128256, 4096, true}};
  Gemm g;
  if (!g.ok()) {
    std::fprintf(stderr, "kvcascade bench gemm: cuBLASLt did not initialise\n");
    return 2;
  }
  cudaStream_t stream = nullptr;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  std::mt19937 rng(7);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("%-8s %6s %6s %9s %10s %10s %6s %10s %6s %6s %9s %9s %9s %6s %9s %9s %9s %6s\n",
              "gemm", "n", "k", "MB", "floor us", "cublasLt", "x", "decode", "x", "splits",
              "rel diff", "fp8 floor", "fp8 us", "x", "fp8 diff", "raw floor", "raw us", "x");
  double sum_floor = 0, sum_lt = 0, sum_dec = 0, sum_fp8_floor = 0, sum_fp8 = 0, sum_raw_floor = 0,
         sum_raw = 0;
  for (const Shape& s : shapes) {
    if (!opt.only.empty() && opt.only != s.name) continue;
    const size_t wbytes = size_t(s.n) * s.k * 2;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{400} << 20) / wbytes + 1, 2, 8));
    std::vector<void*> weights(copies, nullptr);
    void *x = nullptr, *y = nullptr, *y2 = nullptr;
    const size_t ybytes = size_t(m) * s.n * (s.f32_out ? 4 : 2);
    bool alloc_ok = cudaMalloc(&x, size_t(m) * s.k * 2) == cudaSuccess &&
                    cudaMalloc(&y, ybytes) == cudaSuccess && cudaMalloc(&y2, ybytes) == cudaSuccess;
    for (auto& w : weights)
      alloc_ok = alloc_ok && cudaMalloc(&w, wbytes) == cudaSuccess;
    if (!alloc_ok) {
      std::fprintf(stderr, "bench gemm: out of device memory at %s\n", s.name);
      return 1;
    }
    fill_random(x, size_t(m) * s.k, 1.0f, rng);
    for (void* w : weights)
      fill_random(w, size_t(s.n) * s.k, 0.02f, rng);
    const double bytes = double(wbytes) + double(m) * s.k * 2 + double(ybytes);
    const double floor_us = 1e6 * bytes / bw;
    const GemmOut out = s.f32_out ? GemmOut::kF32 : GemmOut::kBF16;
    g.set_decode_kernel(false);
    const double lt =
        time_gemm([&](const void* w) { return g.run(x, w, y, m, s.n, s.k, out, stream); }, weights,
                  opt.iters, stream);
    double dec = -1, diff = -1;
    kernels::cuda::DecodeGemmShape cut{};
    if (have_decode) {
      cut = kernels::cuda::decode_gemm_shape(s.n, s.k, opt.splits);
      auto run = [&](const void* w) {
        return kernels::cuda::decode_gemm(x, w, y2, m, s.n, s.k, s.f32_out, stream, opt.splits);
      };
      // Outputs side by side on the first weight copy (y holds cuBLASLt's from the timing).
      g.run(x, weights[0], y, m, s.n, s.k, out, stream);
      const cudaError_t e = run(weights[0]);
      cudaStreamSynchronize(stream);
      if (e == cudaSuccess) {
        diff = rel_diff(y2, y, size_t(m) * s.n, s.f32_out);
        dec = time_gemm(run, weights, opt.iters, stream);
      } else {
        std::fprintf(stderr, "bench gemm: decode GEMM at %s: %s\n", s.name, cudaGetErrorString(e));
      }
    }
    // FP8 (the layer matrices only: the LM head stays bf16): E4M3 weights with per-channel
    // scales and activations with per-row scales, quantized from the same bf16 values; the
    // difference from the bf16 output is the quantization's, not the kernel's.
    // Raw: the same codes through run_fp8_raw (per-tensor kernels; the scales are applied by
    // the op that reads the output, ops.h Fp8Dequant), whose floor has no scale blocks.
    double fp8_floor = -1, fp8 = -1, fp8_diff = -1, raw_floor = -1, raw = -1;
    if (!s.f32_out) {
      std::vector<void*> wq(copies, nullptr);
      std::vector<float*> ws(copies, nullptr);
      void *xq = nullptr, *y3 = nullptr;
      float* xs = nullptr;
      const int rows = kernels::cuda::fp8_gemm_rows(m);  // as run_fp8 runs them
      const kernels::cuda::Fp8ScaleLayout xl = kernels::cuda::fp8_activation_scales(m, s.k),
                                          wl = kernels::cuda::fp8_weight_scales(s.n, s.k);
      bool ok = cudaMalloc(&xq, size_t(rows) * s.k) == cudaSuccess &&
                cudaMemset(xq, 0, size_t(rows) * s.k) == cudaSuccess &&
                cudaMalloc(reinterpret_cast<void**>(&xs), 4 * xl.count()) == cudaSuccess &&
                cudaMemset(xs, 0, 4 * xl.count()) == cudaSuccess &&
                cudaMalloc(&y3, size_t(rows) * s.n * 2) == cudaSuccess &&
                kernels::cuda::quantize_rows_fp8(x, s.k, m, s.k, xq, xs, xl, stream) == cudaSuccess;
      for (int c = 0; c < copies && ok; ++c) {
        ok = cudaMalloc(&wq[c], size_t(s.n) * s.k) == cudaSuccess &&
             cudaMalloc(reinterpret_cast<void**>(&ws[c]), 4 * wl.count()) == cudaSuccess &&
             kernels::cuda::quantize_rows_fp8(weights[c], s.k, s.n, s.k, wq[c], ws[c], wl,
                                              stream) == cudaSuccess;
      }
      // The codes replace the bf16 copies only for this measurement: time over the same
      // rotation, then free.
      if (ok) {
        const double fbytes = double(s.n) * s.k + 4.0 * wl.count() + double(m) * s.k +
                              4.0 * xl.count() + double(m) * s.n * 2;
        fp8_floor = 1e6 * fbytes / bw;
        auto run = [&](const void* w) {
          const size_t c = std::find(wq.begin(), wq.end(), w) - wq.begin();
          return g.run_fp8(xq, xs, w, ws[c], y3, m, s.n, s.k, GemmOut::kBF16, stream);
        };
        g.run(x, weights[0], y, m, s.n, s.k, out, stream);
        const cudaError_t e = run(wq[0]);
        cudaStreamSynchronize(stream);
        if (e == cudaSuccess) {
          fp8_diff = rel_diff(y3, y, size_t(m) * s.n, false);
          fp8 = time_gemm(run, wq, opt.iters, stream);
        } else {
          std::fprintf(stderr, "bench gemm: FP8 GEMM at %s: %s\n", s.name, cudaGetErrorString(e));
        }
        raw_floor = 1e6 * (double(s.n) * s.k + double(m) * s.k + double(m) * s.n * 2) / bw;
        auto run_raw = [&](const void* w) {
          return g.run_fp8_raw(xq, w, y3, m, s.n, s.k, GemmOut::kBF16, stream);
        };
        const cudaError_t er = run_raw(wq[0]);
        cudaStreamSynchronize(stream);
        if (er == cudaSuccess) {
          raw = time_gemm(run_raw, wq, opt.iters, stream);
        } else {
          std::fprintf(stderr, "bench gemm: raw FP8 GEMM at %s: %s\n", s.name,
                       cudaGetErrorString(er));
        }
      }
      cudaFree(xq);
      cudaFree(xs);
      cudaFree(y3);
      for (int c = 0; c < copies; ++c) {
        cudaFree(wq[c]);
        cudaFree(ws[c]);
      }
      sum_fp8_floor += fp8_floor;
      sum_fp8 += fp8 > 0 ? fp8 : std::nan("");
      sum_raw_floor += raw_floor;
      sum_raw += raw > 0 ? raw : std::nan("");
    }
    sum_floor += floor_us;
    sum_lt += lt;
    sum_dec += dec > 0 ? dec : std::nan("");
    std::printf(
        "%-8s %6d %6d %9.1f %10.1f %10.1f %6.2f %10.1f %6.2f %6d %9.1e %9.1f %9.1f %6.2f "
        "%9.1e %9.1f %9.1f %6.2f\n",
        s.name, s.n, s.k, bytes / 1e6, floor_us, lt, lt / floor_us, dec, dec / floor_us, cut.splits,
        diff, fp8_floor, fp8, fp8 / fp8_floor, fp8_diff, raw_floor, raw, raw / raw_floor);
    rows.push_back({{"gemm", s.name},
                    {"n", s.n},
                    {"k", s.k},
                    {"rows", m},
                    {"bytes", bytes},
                    {"floor_us", floor_us},
                    {"cublaslt_us", lt},
                    {"decode_us", dec},
                    {"decode_tiles", cut.tiles},
                    {"decode_splits", cut.splits},
                    {"rel_diff", diff},
                    {"fp8_floor_us", fp8_floor},
                    {"fp8_us", fp8},
                    {"fp8_rel_diff_vs_bf16", fp8_diff},
                    {"fp8_raw_floor_us", raw_floor},
                    {"fp8_raw_us", raw}});
    cudaFree(x);
    cudaFree(y);
    cudaFree(y2);
    for (void* w : weights)
      cudaFree(w);
  }
  // One layer's four GEMMs x 32 + the LM head: the decode step's GEMM time.
  if (rows.size() == shapes.size())
    std::printf(
        "per step (32 layers + LM head): floor %.2f ms, cuBLASLt %.2f ms, decode GEMM %.2f ms\n",
        1e-3 * (32 * (sum_floor - rows.back()["floor_us"].get<double>()) +
                rows.back()["floor_us"].get<double>()),
        1e-3 * (32 * (sum_lt - rows.back()["cublaslt_us"].get<double>()) +
                rows.back()["cublaslt_us"].get<double>()),
        1e-3 * (32 * (sum_dec - rows.back()["decode_us"].get<double>()) +
                rows.back()["decode_us"].get<double>()));
  if (rows.size() == shapes.size())
    std::printf(
        "FP8 layer GEMMs per step (32 layers; the bf16 LM head apart): floor %.2f ms, cuBLASLt "
        "FP8 %.2f ms (bf16: %.2f ms)\n",
        1e-3 * 32 * sum_fp8_floor, 1e-3 * 32 * sum_fp8,
        1e-3 * 32 * (sum_lt - rows.back()["cublaslt_us"].get<double>()));
  if (rows.size() == shapes.size())
    std::printf(
        "FP8 raw layer GEMMs per step (per-tensor kernels; the scales applied by the ops that read "
        "them): floor %.2f ms, cuBLASLt %.2f ms\n",
        1e-3 * 32 * sum_raw_floor, 1e-3 * 32 * sum_raw);
  cudaStreamDestroy(stream);
  if (!opt.out_json.empty()) {
    nlohmann::json doc{{"read_bandwidth", bw}, {"rows", m}, {"gemms", rows}};
    std::ofstream f(opt.out_json);
    f << doc.dump(2) << "\n";
  }
  return 0;
}

}  // namespace kvc::bench
