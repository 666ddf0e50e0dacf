// The FP8 kernels (kernels/cuda/ops.h quantize_rows_fp8, add_rms_norm_fp8, silu_mul_fp8, and
// gemm.h Gemm::run_fp8) against their CPU twins (kernels/cpu/fp8.h after the float32 op): the
// same bf16 inputs give the same codes and scales exactly where both sides quantize the same
// floats (quantize_rows_fp8); where the float32 values come from a reduction done in another order
// (the norms, SwiGLU's exp) every code is within one step of the twin's and nearly all equal; the
// FP8 GEMM equals a float64 product of the dequantized operands to bf16 rounding. Scales are read
// in their GEMM layout (gemm.h Fp8ScaleLayout: every block holds every row's scale, padding
// untouched). Outputs are poisoned first and every case draws fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/fp8.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/fp8_rule.h"
#include "tests/kernels/cuda/device_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::DeviceBuffer;
using testutil::download;
using testutil::gemm_output_on_device;
using testutil::GemmOutputOnDevice;
using testutil::random_bf16;
using testutil::random_raw_gemm_output;
using testutil::random_vector;
using testutil::RawGemmOutput;
using testutil::rel_l2;
using testutil::to_bits;
using testutil::to_floats;
using testutil::upload;

class CudaFp8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
  std::mt19937 rng_{20261202};
};

// Per-row scales in a GEMM layout: row r's in every block, zero between.
std::vector<float> laid_out(const std::vector<float>& per_row, cuda::Fp8ScaleLayout l) {
  std::vector<float> out(l.count(), 0.0f);
  for (int b = 0; b < l.blocks; ++b)
    std::copy(per_row.begin(), per_row.end(), out.begin() + b * l.stride);
  return out;
}

// Scales written in layout `l` (poisoned with 0xFF bytes first): row r's scale in every block,
// near `want` (relative `tol`), the padding between blocks untouched.
void expect_laid_out(const std::vector<float>& got, const std::vector<float>& want,
                     cuda::Fp8ScaleLayout l, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), size_t(l.count())) << what;
  for (int b = 0; b < l.blocks; ++b) {
    for (int64_t r = 0; r < l.stride; ++r) {
      const float g = got[b * l.stride + r];
      if (r < int64_t(want.size())) {
        ASSERT_NEAR(g, want[r], tol * want[r]) << what << " row " << r << " block " << b;
      } else {
        ASSERT_TRUE(std::isnan(g)) << what << ": padding written at row " << r << " block " << b;
      }
    }
  }
}

// Device codes and scales (layout fp8_activation_scales) against the twin's quantization of
// `want` (float32 values): scales to 1e-5, every code within one step (the same sign, adjacent
// magnitudes), >= 99% identical.
void expect_codes_close(const std::vector<uint8_t>& got, const std::vector<float>& got_scales,
                        const std::vector<float>& want, int rows, int dim,
                        const std::string& what) {
  std::vector<uint8_t> q(want.size());
  std::vector<float> scales(rows);
  cpu::quantize_rows_fp8(want.data(), rows, dim, q.data(), scales.data());
  expect_laid_out(got_scales, scales, cuda::fp8_activation_scales(rows, dim), 1e-5, what);
  size_t same = 0;
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < dim; ++i) {
      const size_t k = size_t(r) * dim + i;
      ASSERT_NE(got[k] & 0x7F, 0x7F) << what << ": NaN code at " << k;
      same += got[k] == q[k];
      const int dist = std::abs((got[k] & 0x7F) - (q[k] & 0x7F));
      const bool both_zero = (got[k] & 0x7F) == 0 && (q[k] & 0x7F) == 0;
      ASSERT_TRUE(both_zero || ((got[k] & 0x80) == (q[k] & 0x80) && dist <= 1))
          << what << " index " << k << ": code " << int(got[k]) << ", twin " << int(q[k]);
    }
  }
  EXPECT_GE(double(same) / want.size(), 0.99) << what;
}

TEST_F(CudaFp8Test, QuantizeRowsEqualsTwinExactly) {
  // 100 and 5003: the scalar path (5003: five values a thread); 16389 and 32776: rows longer
  // than the threads' registers hold
  // (ops_common.cuh row_fits) on the scalar and the vector path.
  for (int dim : {64, 100, 4096, 5003, 14336, 16389, 32776}) {
    for (int rows : {1, 37, 300}) {
      if (dim > 14336 && rows > 37) continue;
      const int stride = dim + (dim % 8 == 0 ? 8 : 3);  // rows apart, as in a fused buffer
      std::vector<float> x = random_bf16(rng_, size_t(rows) * stride, 2.0f);
      if (rows > 2) {
        for (int i = 0; i < stride; ++i)
          x[size_t(2) * stride + i] = 0.0f;  // an all-zero row
      }
      std::vector<float> dense(size_t(rows) * dim);
      for (int r = 0; r < rows; ++r)
        std::copy_n(x.begin() + size_t(r) * stride, dim, dense.begin() + size_t(r) * dim);
      std::vector<uint8_t> q(dense.size());
      std::vector<float> s(rows);
      cpu::quantize_rows_fp8(dense.data(), rows, dim, q.data(), s.data());
      // As activations and as a weight matrix (every block at any row count).
      for (const bool weights : {false, true}) {
        const cuda::Fp8ScaleLayout l =
            weights ? cuda::fp8_weight_scales(rows, dim) : cuda::fp8_activation_scales(rows, dim);
        const std::string what = std::string(weights ? "weights" : "activations") + " dim " +
                                 std::to_string(dim) + " rows " + std::to_string(rows);
        DeviceBuffer d_x = upload(to_bits(x)), d_q(size_t(rows) * dim), d_s(4 * l.count());
        d_q.fill_bytes(0x7F);  // NaN codes
        d_s.fill_bytes(0xFF);
        ASSERT_EQ(
            cuda::quantize_rows_fp8(d_x.data(), stride, rows, dim, d_q.data(), d_s.as<float>(), l),
            cudaSuccess);
        cuda::synchronize_or_die("quantize_rows_fp8");
        EXPECT_EQ(download<uint8_t>(d_q, q.size()), q) << what;
        expect_laid_out(download<float>(d_s, l.count()), s, l, 0.0, what);
      }
    }
  }
  EXPECT_EQ(cuda::quantize_rows_fp8(nullptr, 4, 2, 8, nullptr, nullptr, {2, 1}),
            cudaErrorInvalidValue);
  DeviceBuffer d_x(64), d_q(64), d_s(64);
  EXPECT_EQ(cuda::quantize_rows_fp8(d_x.data(), 8, 4, 8, d_q.data(), d_s.as<float>(), {3, 1}),
            cudaErrorInvalidValue);  // a stride shorter than the rows
}

TEST_F(CudaFp8Test, AddRmsNormFp8MatchesTwin) {
  const float eps = 1e-5f;
  for (int hidden : {64, 100, 4096, 5003, 16389, 32776}) {  // as QuantizeRowsEqualsTwinExactly
    for (int rows : {1, 37, 300}) {
      if (hidden > 4096 && rows > 37) continue;
      // raw: x is a raw FP8 GEMM output (ops.h Fp8Dequant) whose values the twin reads.
      for (bool raw : {false, true}) {
        const std::string what = "hidden " + std::to_string(hidden) + " rows " +
                                 std::to_string(rows) + (raw ? " raw" : "");
        const size_t n = size_t(rows) * hidden;
        const GemmOutputOnDevice in = gemm_output_on_device(rng_, raw, rows, hidden, hidden);
        const std::vector<float>& x = in.values;
        std::vector<float> w = random_bf16(rng_, hidden, 0.1f);
        for (float& v : w)
          v = cpu::round_to(v + 1.0f, cpu::StorageType::kBF16);
        std::vector<float> residual = random_vector(rng_, n, 3.0f);
        DeviceBuffer d_w = upload(to_bits(w)), d_res = upload(residual), d_y(n),
                     d_s(4 * cuda::fp8_activation_scales(rows, hidden).count());
        d_y.fill_bytes(0x7F);
        d_s.fill_bytes(0xFF);
        ASSERT_EQ(
            cuda::add_rms_norm_fp8(in.data.data(), d_res.as<float>(), true, d_w.data(), d_y.data(),
                                   d_s.as<float>(), rows, hidden, eps, nullptr, in.dq),
            cudaSuccess);
        cuda::synchronize_or_die("add_rms_norm_fp8");
        std::vector<float> want(n);
        cpu::add_rms_norm(x.data(), residual.data(), true, w.data(), want.data(), rows, hidden,
                          eps);
        EXPECT_EQ(download<float>(d_res, n), residual) << what << " (residual)";
        expect_codes_close(download<uint8_t>(d_y, n),
                           download<float>(d_s, cuda::fp8_activation_scales(rows, hidden).count()),
                           want, rows, hidden, what);
      }
    }
  }
}

TEST_F(CudaFp8Test, SiluMulFp8MatchesTwin) {
  for (int inter :
       {64, 100, 1408, 5003, 14336, 16389, 32776}) {  // as QuantizeRowsEqualsTwinExactly
    for (int rows : {1, 37, 300}) {
      if (inter > 14336 && rows > 37) continue;
      for (bool raw : {false, true}) {  // raw: as in AddRmsNormFp8MatchesTwin
        const std::string what = "inter " + std::to_string(inter) + " rows " +
                                 std::to_string(rows) + (raw ? " raw" : "");
        const size_t n = size_t(rows) * inter;
        RawGemmOutput r = random_raw_gemm_output(rng_, rows, 2 * inter, 2 * inter, 3.0f);
        std::vector<float> plain = random_bf16(rng_, 2 * n, 3.0f);
        plain[0] = -100.0f;  // exp(100) overflows: silu must be -0, not NaN
        r.raw[0] = cpu::round_to(-100.0f / (r.row[0] * r.col[0]), cpu::StorageType::kBF16);
        r.values[0] = r.raw[0] * r.row[0] * r.col[0];
        const std::vector<float>& gate_up = raw ? r.values : plain;
        const int64_t scales = cuda::fp8_activation_scales(rows, inter).count();
        DeviceBuffer d_in = upload(to_bits(raw ? r.raw : plain)), d_out(n), d_s(4 * scales),
                     d_row = upload(r.row), d_col = upload(r.col);
        d_out.fill_bytes(0x7F);
        d_s.fill_bytes(0xFF);
        const cuda::Fp8Dequant dq =
            raw ? cuda::Fp8Dequant{d_row.as<float>(), d_col.as<float>()} : cuda::Fp8Dequant{};
        ASSERT_EQ(cuda::silu_mul_fp8(d_in.data(), d_out.data(), d_s.as<float>(), rows, inter,
                                     nullptr, dq),
                  cudaSuccess);
        cuda::synchronize_or_die("silu_mul_fp8");
        std::vector<float> want(n);
        cpu::silu_mul(gate_up.data(), want.data(), rows, inter);
        expect_codes_close(download<uint8_t>(d_out, n), download<float>(d_s, scales), want, rows,
                           inter, what);
      }
    }
  }
}

// E4M3 codes of random values with per-row scales, and their dequantized values.
struct Fp8Matrix {
  std::vector<uint8_t> codes;
  std::vector<float> scales, values;
};
Fp8Matrix random_fp8(std::mt19937& rng, int rows, int cols, float stddev) {
  Fp8Matrix m;
  const std::vector<float> x = random_vector(rng, size_t(rows) * cols, stddev);
  m.codes.resize(x.size());
  m.scales.resize(rows);
  m.values.resize(x.size());
  cpu::quantize_rows_fp8(x.data(), rows, cols, m.codes.data(), m.scales.data());
  cpu::dequantize_rows_fp8(m.codes.data(), m.scales.data(), rows, cols, m.values.data());
  return m;
}

TEST_F(CudaFp8Test, Fp8GemmEqualsTheProductOfDequantizedOperands) {
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.ok());
  struct Shape {
    int m, n, k;
  };
  // Decode rows (block-scaled up to 128, some rounded up to 4) and prefill rows (outer-vector
  // scaled: 129, 300) over the Llama-3-8B projection shapes' widths, and k not a multiple of 128.
  for (const Shape sh :
       {Shape{1, 256, 256}, Shape{7, 6144, 4096}, Shape{128, 1024, 14336}, Shape{129, 512, 4096},
        Shape{300, 1024, 4096}, Shape{33, 28672, 512}, Shape{18, 512, 208}}) {
    const std::string what =
        "m " + std::to_string(sh.m) + " n " + std::to_string(sh.n) + " k " + std::to_string(sh.k);
    const Fp8Matrix x = random_fp8(rng_, sh.m, sh.k, 2.0f);
    const Fp8Matrix w = random_fp8(rng_, sh.n, sh.k, 0.02f);
    for (cuda::GemmOut out : {cuda::GemmOut::kBF16, cuda::GemmOut::kF32}) {
      const bool f32 = out == cuda::GemmOut::kF32;
      const size_t ny = size_t(sh.m) * sh.n;
      const int rows = cuda::fp8_gemm_rows(sh.m);  // x and y with room for the rows run
      std::vector<uint8_t> x_codes = x.codes;
      x_codes.resize(size_t(rows) * sh.k, 0);
      DeviceBuffer d_x = upload(x_codes),
                   d_xs = upload(laid_out(x.scales, cuda::fp8_activation_scales(sh.m, sh.k))),
                   d_w = upload(w.codes),
                   d_ws = upload(laid_out(w.scales, cuda::fp8_weight_scales(sh.n, sh.k))),
                   d_y(size_t(rows) * sh.n * (f32 ? 4 : 2));
      d_y.fill_bytes(0xFF);
      const cudaError_t e = gemm.run_fp8(d_x.data(), d_xs.as<float>(), d_w.data(), d_ws.as<float>(),
                                         d_y.data(), sh.m, sh.n, sh.k, out, nullptr);
      ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
      cuda::synchronize_or_die("run_fp8");
      std::vector<float> got =
          f32 ? download<float>(d_y, ny) : to_floats(download<uint16_t>(d_y, ny));
      std::vector<float> want(ny);
      for (int i = 0; i < sh.m; ++i) {
        for (int j = 0; j < sh.n; ++j) {
          double acc = 0;
          for (int t = 0; t < sh.k; ++t)
            acc += double(x.values[size_t(i) * sh.k + t]) * w.values[size_t(j) * sh.k + t];
          want[size_t(i) * sh.n + j] = static_cast<float>(acc);
        }
      }
      for (size_t i = 0; i < ny; ++i)
        ASSERT_FALSE(std::isnan(got[i])) << what << " index " << i;
      EXPECT_LT(rel_l2(got, want), f32 ? 1e-3 : 5e-3) << what << (f32 ? " fp32" : " bf16");
    }
  }
  // k not a multiple of 16: refused, not run.
  EXPECT_EQ(gemm.run_fp8(nullptr, nullptr, nullptr, nullptr, nullptr, 4, 16, 24,
                         cuda::GemmOut::kBF16, nullptr),
            cudaErrorInvalidValue);
}

// run_fp8_raw: the sums of the codes' products (per-tensor kernels, scales of 1) against a
// float64 sum: bf16 rounding, or in fp32 1e-3 as run_fp8 (the tensor cores' FP8 accumulation is
// not a full fp32 one), at decode and prefill row counts.
TEST_F(CudaFp8Test, Fp8RawGemmSumsTheCodesProducts) {
  cuda::Gemm gemm;
  ASSERT_TRUE(gemm.ok());
  for (auto [m, n, k] :
       {std::tuple{1, 256, 256}, std::tuple{7, 6144, 4096}, std::tuple{128, 1024, 14336},
        std::tuple{300, 1024, 4096}, std::tuple{18, 512, 208}}) {
    const std::string what =
        "m " + std::to_string(m) + " n " + std::to_string(n) + " k " + std::to_string(k);
    const Fp8Matrix x = random_fp8(rng_, m, k, 2.0f), w = random_fp8(rng_, n, k, 0.02f);
    // The codes' own values (scale 1).
    std::vector<float> xv(x.codes.size()), wv(w.codes.size());
    const std::vector<float> ones(std::max(m, n), 1.0f);
    cpu::dequantize_rows_fp8(x.codes.data(), ones.data(), m, k, xv.data());
    cpu::dequantize_rows_fp8(w.codes.data(), ones.data(), n, k, wv.data());
    const size_t ny = size_t(m) * n;
    std::vector<float> want(ny);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int t = 0; t < k; ++t)
          acc += double(xv[size_t(i) * k + t]) * wv[size_t(j) * k + t];
        want[size_t(i) * n + j] = static_cast<float>(acc);
      }
    }
    for (cuda::GemmOut out : {cuda::GemmOut::kBF16, cuda::GemmOut::kF32}) {
      const bool f32 = out == cuda::GemmOut::kF32;
      const int rows = cuda::fp8_gemm_rows(m);
      std::vector<uint8_t> x_codes = x.codes;
      x_codes.resize(size_t(rows) * k, 0);
      DeviceBuffer d_x = upload(x_codes), d_w = upload(w.codes),
                   d_y(size_t(rows) * n * (f32 ? 4 : 2));
      d_y.fill_bytes(0xFF);
      const cudaError_t e =
          gemm.run_fp8_raw(d_x.data(), d_w.data(), d_y.data(), m, n, k, out, nullptr);
      ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
      cuda::synchronize_or_die("run_fp8_raw");
      const std::vector<float> got =
          f32 ? download<float>(d_y, ny) : to_floats(download<uint16_t>(d_y, ny));
      for (size_t i = 0; i < ny; ++i)
        ASSERT_FALSE(std::isnan(got[i])) << what << " index " << i;
      EXPECT_LT(rel_l2(got, want), f32 ? 1e-3 : 5e-3) << what << (f32 ? " fp32" : " bf16");
    }
  }
  EXPECT_EQ(gemm.run_fp8_raw(nullptr, nullptr, nullptr, 4, 16, 24, cuda::GemmOut::kBF16, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvc::kernels
