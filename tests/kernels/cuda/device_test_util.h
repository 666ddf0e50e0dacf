// Helpers of the device op and sampling tests: half-precision values as float and as bits,
// uploads and downloads of host vectors.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels::testutil {

inline cpu::StorageType storage(cuda::KvDtype dt) {
  return dt == cuda::KvDtype::kF16 ? cpu::StorageType::kF16 : cpu::StorageType::kBF16;
}

// The bits of a value already representable in dt (round with cpu::round_to first).
inline uint16_t half_bits(float x, cuda::KvDtype dt) {
  if (dt == cuda::KvDtype::kF16) return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
  return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
}
inline float half_value(uint16_t b, cuda::KvDtype dt) {
  if (dt == cuda::KvDtype::kF16) return static_cast<float>(std::bit_cast<_Float16>(b));
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
inline std::vector<uint16_t> to_bits(const std::vector<float>& v,
                                     cuda::KvDtype dt = cuda::KvDtype::kBF16) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    b[i] = half_bits(v[i], dt);
  return b;
}
inline std::vector<float> to_floats(const std::vector<uint16_t>& b,
                                    cuda::KvDtype dt = cuda::KvDtype::kBF16) {
  std::vector<float> v(b.size());
  for (size_t i = 0; i < b.size(); ++i)
    v[i] = half_value(b[i], dt);
  return v;
}

// Normal(0, stddev) values rounded to bf16 (kept as float).
inline std::vector<float> random_bf16(std::mt19937& rng, size_t n, float stddev = 1.0f) {
  std::vector<float> v = random_vector(rng, n, stddev);
  cpu::round_to(v.data(), static_cast<int64_t>(v.size()), cpu::StorageType::kBF16);
  return v;
}

// A raw FP8 GEMM output (gemm.h Gemm::run_fp8_raw) of `rows` rows `stride` apart, its first
// `cols` columns scaled: raw sums (bf16 values, about 1000 x stddev), each row's and each
// column's scale (uniform in [0.5, 2) x 1e-2 and x 1e-1), and the values an op that dequantizes
// them sees (ops.h Fp8Dequant: raw * row * col in fp32, in that order; columns past `cols` as
// they are). The values are about stddev.
struct RawGemmOutput {
  std::vector<float> raw, row, col, values;
};
inline RawGemmOutput random_raw_gemm_output(std::mt19937& rng, int rows, int cols, int64_t stride,
                                            float stddev = 1.0f) {
  RawGemmOutput o;
  o.raw = random_bf16(rng, static_cast<size_t>(rows) * stride, 1000.0f * stddev);
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  for (int r = 0; r < rows; ++r)
    o.row.push_back(scale(rng) * 1e-2f);
  for (int c = 0; c < cols; ++c)
    o.col.push_back(scale(rng) * 1e-1f);
  o.values = o.raw;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      float& v = o.values[static_cast<size_t>(r) * stride + c];
      v = v * o.row[r] * o.col[c];
    }
  }
  return o;
}

template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}
template <typename T>
std::vector<T> download(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  if (n > 0) b.download(v.data(), n * sizeof(T));
  return v;
}

// A layer GEMM's output as the op after it reads it, on the device: with `raw`, a raw FP8 GEMM
// output (random_raw_gemm_output: its bf16 sums in `data`, the scales in `row` and `col`, and the
// Fp8Dequant naming them); else plain bf16 values (normal, stddev) and no dequantization.
// `values` is what the op sees either way: the CPU twin's input.
struct GemmOutputOnDevice {
  std::vector<float> values;
  cuda::DeviceBuffer data, row, col;
  cuda::Fp8Dequant dq;
};
inline GemmOutputOnDevice gemm_output_on_device(std::mt19937& rng, bool raw, int rows, int cols,
                                                int64_t stride, float stddev = 1.0f) {
  GemmOutputOnDevice g;
  if (raw) {
    RawGemmOutput r = random_raw_gemm_output(rng, rows, cols, stride, stddev);
    g.data = upload(to_bits(r.raw));
    g.row = upload(r.row);
    g.col = upload(r.col);
    g.dq = {g.row.as<float>(), g.col.as<float>()};  // device pointers: kept by the moves
    g.values = std::move(r.values);
  } else {
    g.values = random_bf16(rng, static_cast<size_t>(rows) * stride, stddev);
    g.data = upload(to_bits(g.values));
  }
  return g;
}

// Fraction of positions where a and b hold the same bits.
inline double fraction_equal(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t same = 0;
  for (size_t i = 0; i < a.size(); ++i)
    same += a[i] == b[i];
  return a.empty() ? 1.0 : static_cast<double>(same) / a.size();
}

}  // namespace kvc::kernels::testutil
