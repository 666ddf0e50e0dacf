// Device model ops (kernels/cuda/ops.h) against their CPU twins (kernels/cpu/ops.h) run in
// float32 on the same bf16 inputs: gathers and KV appends bit-exact (block copies:
// kv_blocks_test.cc); the math ops by relative L2 (<= 1e-2) and a bit-equal share (the twin rounds
// the same float to bf16 except when the last fp32 bit differs). Outputs are poisoned first (0xFF:
// NaN in bf16, fp16 and fp32) and every case draws fresh random inputs.
#include "kernels/cuda/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/device.h"
#include "kernels/fp8_rule.h"
#include "tests/kernels/cuda/device_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;
using testutil::download;
using testutil::fraction_equal;
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

constexpr double kBf16Tol = 1e-2;
constexpr double kMinEqual = 0.99;

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
  std::mt19937 rng_{20261201};

  // `tokens` distinct slots of num_slots, shuffled; about one token in ten is padding (-1).
  std::vector<int32_t> random_slots(int num_slots, int tokens) {
    std::vector<int32_t> all(num_slots);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng_);
    std::vector<int32_t> slots(all.begin(), all.begin() + tokens);
    for (int32_t& s : slots) {
      if (rng_() % 10 == 0) s = -1;
    }
    return slots;
  }
};

// Compares bf16 bits from the device with the twin's float output rounded to bf16.
void expect_bf16_close(const std::vector<uint16_t>& got, std::vector<float> want,
                       const std::string& what) {
  cpu::round_to(want.data(), static_cast<int64_t>(want.size()), cpu::StorageType::kBF16);
  const std::vector<float> got_f = to_floats(got);
  for (size_t i = 0; i < got_f.size(); ++i)
    ASSERT_FALSE(std::isnan(got_f[i])) << what << " index " << i;
  EXPECT_LT(rel_l2(got_f, want), kBf16Tol) << what;
  EXPECT_GE(fraction_equal(got, to_bits(want)), kMinEqual) << what;
}

TEST_F(CudaOpsTest, EmbeddingGatherIsExact) {
  const int vocab = 1000;
  for (int hidden : {64, 100, 1000, 4096}) {  // 100: not a multiple of 8 (scalar path)
    for (int tokens : {1, 37, 300}) {
      const std::string what =
          "hidden " + std::to_string(hidden) + " tokens " + std::to_string(tokens);
      const std::vector<float> table = random_bf16(rng_, static_cast<size_t>(vocab) * hidden);
      std::vector<int32_t> ids(tokens);
      for (int32_t& id : ids)
        id = static_cast<int32_t>(rng_() % vocab);
      if (tokens > 2) ids[1] = -1, ids[2] = vocab;  // padding: zero rows
      DeviceBuffer d_table = upload(to_bits(table)), d_ids = upload(ids),
                   d_out(static_cast<size_t>(2) * tokens * hidden);
      d_out.fill_bytes(0xFF);
      ASSERT_EQ(cuda::embedding_gather(d_table.data(), vocab, hidden, d_ids.as<int32_t>(), tokens,
                                       d_out.data()),
                cudaSuccess);
      cuda::synchronize_or_die("embedding_gather");
      std::vector<float> want(static_cast<size_t>(tokens) * hidden);
      cpu::embedding_gather(table.data(), vocab, hidden, ids.data(), tokens, want.data());
      EXPECT_EQ(download<uint16_t>(d_out, want.size()), to_bits(want)) << what;
    }
  }
}

TEST_F(CudaOpsTest, AddRmsNormMatchesTwin) {
  const float eps = 1e-5f;
  enum Mode { kAccumulate, kFirstLayer, kNormOnly };
  // 16389 and 32776: rows longer than the threads' registers hold (ops_common.cuh row_fits),
  // scalar and vector path.
  for (int hidden : {64, 100, 1000, 4096, 5003, 16389, 32776}) {
    for (int rows : {1, 37, 300}) {
      if (hidden > 4096 && rows > 37) continue;
      // raw: x is a raw FP8 GEMM output, dequantized by the op (ops.h Fp8Dequant).
      for (auto [mode, raw] : {std::pair{kAccumulate, false}, std::pair{kFirstLayer, false},
                               std::pair{kNormOnly, false}, std::pair{kAccumulate, true},
                               std::pair{kFirstLayer, true}}) {
        const std::string what = "hidden " + std::to_string(hidden) + " rows " +
                                 std::to_string(rows) + " mode " + std::to_string(mode) +
                                 (raw ? " raw" : "");
        const size_t n = static_cast<size_t>(rows) * hidden;
        const GemmOutputOnDevice in = gemm_output_on_device(rng_, raw, rows, hidden, hidden);
        const std::vector<float>& x = in.values;
        std::vector<float> w = random_bf16(rng_, hidden, 0.1f);
        for (float& v : w)
          v = cpu::round_to(v + 1.0f, cpu::StorageType::kBF16);
        std::vector<float> residual = random_vector(rng_, n, 3.0f);
        DeviceBuffer d_w = upload(to_bits(w)), d_res = upload(residual), d_y(2 * n);
        d_y.fill_bytes(0xFF);
        if (mode == kFirstLayer) d_res.fill_bytes(0xFF);  // must be overwritten, not read
        const bool with_x = mode != kNormOnly;
        ASSERT_EQ(cuda::add_rms_norm(with_x ? in.data.data() : nullptr, d_res.as<float>(),
                                     mode == kAccumulate, d_w.data(), d_y.data(), rows, hidden, eps,
                                     nullptr, in.dq),
                  cudaSuccess);
        cuda::synchronize_or_die("add_rms_norm");
        std::vector<float> want_y(n);
        cpu::add_rms_norm(with_x ? x.data() : nullptr, residual.data(), mode == kAccumulate,
                          w.data(), want_y.data(), rows, hidden, eps);
        EXPECT_EQ(download<float>(d_res, n), residual) << what << " (residual)";
        expect_bf16_close(download<uint16_t>(d_y, n), want_y, what);
      }
    }
  }
}

TEST_F(CudaOpsTest, RopeMatchesTwinOnAFusedQkvBuffer) {
  const cpu::RopeConfig configs[] = {{.theta = 500000, .llama3_scaling = true}, {.theta = 10000}};
  for (const cpu::RopeConfig& cfg : configs) {
    for (int head_dim : {64, 128}) {
      for (int group : {1, 4, 8}) {
        for (int tokens : {1, 77, 300}) {
          const int kv_heads = 2, q_heads = kv_heads * group;
          const int qd = q_heads * head_dim, kvd = kv_heads * head_dim, row = qd + 2 * kvd;
          const std::string what = "llama3 " + std::to_string(cfg.llama3_scaling) + " d " +
                                   std::to_string(head_dim) + " group " + std::to_string(group) +
                                   " tokens " + std::to_string(tokens);
          const std::vector<float> qkv = random_bf16(rng_, static_cast<size_t>(tokens) * row);
          std::vector<int32_t> pos(tokens);
          for (int32_t& p : pos)
            p = static_cast<int32_t>(rng_() % 131072);
          pos[0] = tokens > 1 ? 0 : 131071;
          if (tokens > 3) pos[1] = 8191, pos[2] = 8192, pos[3] = 131071;
          DeviceBuffer d_qkv = upload(to_bits(qkv)), d_pos = upload(pos);
          const cuda::RopeTable table = cuda::make_rope_table(head_dim, cfg);
          ASSERT_EQ(
              cuda::rope(d_qkv.data(), row, q_heads, static_cast<uint16_t*>(d_qkv.data()) + qd, row,
                         kv_heads, d_pos.as<int32_t>(), tokens, table),
              cudaSuccess);
          cuda::synchronize_or_die("rope");
          const std::vector<uint16_t> got = download<uint16_t>(d_qkv, qkv.size());
          // The twin on contiguous copies of q and k.
          std::vector<float> q(static_cast<size_t>(tokens) * qd),
              k(static_cast<size_t>(tokens) * kvd);
          for (int t = 0; t < tokens; ++t) {
            std::copy_n(qkv.begin() + static_cast<size_t>(t) * row, qd,
                        q.begin() + static_cast<size_t>(t) * qd);
            std::copy_n(qkv.begin() + static_cast<size_t>(t) * row + qd, kvd,
                        k.begin() + static_cast<size_t>(t) * kvd);
          }
          cpu::rope(q.data(), pos.data(), tokens, q_heads, head_dim, cfg);
          cpu::rope(k.data(), pos.data(), tokens, kv_heads, head_dim, cfg);
          std::vector<uint16_t> got_q, got_k, got_v, want_v;
          for (int t = 0; t < tokens; ++t) {
            const auto r = got.begin() + static_cast<size_t>(t) * row;
            got_q.insert(got_q.end(), r, r + qd);
            got_k.insert(got_k.end(), r + qd, r + qd + kvd);
            got_v.insert(got_v.end(), r + qd + kvd, r + row);
            const auto in = qkv.begin() + static_cast<size_t>(t) * row + qd + kvd;
            const std::vector<float> v(in, in + kvd);
            const std::vector<uint16_t> vb = to_bits(v);
            want_v.insert(want_v.end(), vb.begin(), vb.end());
          }
          expect_bf16_close(got_q, q, what + " q");
          expect_bf16_close(got_k, k, what + " k");
          EXPECT_EQ(got_v, want_v) << what << " v must stay untouched";
        }
      }
    }
  }
}

TEST_F(CudaOpsTest, RopeWithoutKRotatesOnlyQ) {
  const int tokens = 5, heads = 3, d = 64;
  const std::vector<float> q = random_bf16(rng_, static_cast<size_t>(tokens) * heads * d);
  const std::vector<int32_t> pos{0, 1, 100, 5000, 120000};
  DeviceBuffer d_q = upload(to_bits(q)), d_pos = upload(pos);
  const cpu::RopeConfig cfg{.theta = 500000, .llama3_scaling = true};
  ASSERT_EQ(cuda::rope(d_q.data(), heads * d, heads, nullptr, 0, 0, d_pos.as<int32_t>(), tokens,
                       cuda::make_rope_table(d, cfg)),
            cudaSuccess);
  cuda::synchronize_or_die("rope");
  std::vector<float> want = q;
  cpu::rope(want.data(), pos.data(), tokens, heads, d, cfg);
  expect_bf16_close(download<uint16_t>(d_q, q.size()), want, "q only");
}

// The engine's path: q and k rotated out of a fused QKV row, q written to a contiguous buffer for
// the attention kernels, k in place, q's source and v untouched.
TEST_F(CudaOpsTest, RopeWritesQToAContiguousBuffer) {
  const int tokens = 9, q_heads = 8, kv_heads = 2, d = 128;
  const int qd = q_heads * d, kvd = kv_heads * d, row = qd + 2 * kvd;
  const std::vector<float> qkv = random_bf16(rng_, static_cast<size_t>(tokens) * row);
  std::vector<int32_t> pos(tokens);
  for (int t = 0; t < tokens; ++t)
    pos[t] = t * 9001;
  DeviceBuffer d_qkv = upload(to_bits(qkv)), d_pos = upload(pos);
  DeviceBuffer d_q(static_cast<size_t>(tokens) * qd * 2);
  d_q.fill_bytes(0xFF);
  const cpu::RopeConfig cfg{.theta = 500000, .llama3_scaling = true};
  ASSERT_EQ(cuda::rope(d_qkv.data(), row, q_heads, static_cast<uint16_t*>(d_qkv.data()) + qd, row,
                       kv_heads, d_pos.as<int32_t>(), tokens, cuda::make_rope_table(d, cfg),
                       nullptr, d_q.data(), qd),
            cudaSuccess);
  cuda::synchronize_or_die("rope");
  std::vector<float> q(static_cast<size_t>(tokens) * qd), k(static_cast<size_t>(tokens) * kvd);
  for (int t = 0; t < tokens; ++t) {
    std::copy_n(qkv.begin() + static_cast<size_t>(t) * row, qd, q.begin() + size_t(t) * qd);
    std::copy_n(qkv.begin() + static_cast<size_t>(t) * row + qd, kvd, k.begin() + size_t(t) * kvd);
  }
  cpu::rope(q.data(), pos.data(), tokens, q_heads, d, cfg);
  cpu::rope(k.data(), pos.data(), tokens, kv_heads, d, cfg);
  expect_bf16_close(download<uint16_t>(d_q, q.size()), q, "q out of place");
  const std::vector<uint16_t> got = download<uint16_t>(d_qkv, qkv.size());
  const std::vector<uint16_t> before = to_bits(qkv);
  std::vector<uint16_t> got_k;
  for (int t = 0; t < tokens; ++t) {
    const size_t r = static_cast<size_t>(t) * row;
    EXPECT_TRUE(std::equal(got.begin() + r, got.begin() + r + qd, before.begin() + r))
        << "q's source row " << t << " must stay as it was";
    EXPECT_TRUE(std::equal(got.begin() + r + qd + kvd, got.begin() + r + row,
                           before.begin() + r + qd + kvd))
        << "v row " << t << " must stay as it was";
    got_k.insert(got_k.end(), got.begin() + r + qd, got.begin() + r + qd + kvd);
  }
  expect_bf16_close(got_k, k, "k in place");
}

// The Qwen options between the QKV GEMM and RoPE: bias (Qwen2), per-head q/k RMSNorm (Qwen3),
// both, on a fused QKV buffer with a row stride wider than the row.
TEST_F(CudaOpsTest, QkvBiasNormMatchesTwin) {
  const float eps = 1e-6f;
  for (int head_dim : {64, 128}) {
    for (auto [q_heads, kv_heads] : {std::pair{4, 1}, std::pair{32, 8}, std::pair{14, 2}}) {
      // 0: bias, 1: norms, 2: both, 3: neither (raw only); raw: the rows are a raw FP8 GEMM
      // output, dequantized by the op (ops.h Fp8Dequant).
      for (auto [mode, raw] : {std::pair{0, false}, std::pair{1, false}, std::pair{2, false},
                               std::pair{0, true}, std::pair{1, true}, std::pair{3, true}}) {
        for (int rows : {1, 45}) {
          const bool bias = mode == 0 || mode == 2, norms = mode == 1 || mode == 2;
          const int row = (q_heads + 2 * kv_heads) * head_dim, stride = row + 64;
          const std::string what = "d " + std::to_string(head_dim) + " heads " +
                                   std::to_string(q_heads) + "/" + std::to_string(kv_heads) +
                                   " mode " + std::to_string(mode) + " rows " +
                                   std::to_string(rows) + (raw ? " raw" : "");
          // The twin's input; past each row's `row` columns, the device's input as it is.
          GemmOutputOnDevice in = gemm_output_on_device(rng_, raw, rows, row, stride);
          const std::vector<float>& qkv = in.values;
          const std::vector<float> b = random_bf16(rng_, row, 0.5f);
          std::vector<float> qn = random_bf16(rng_, head_dim, 0.3f),
                             kn = random_bf16(rng_, head_dim, 0.3f);
          for (auto* w : {&qn, &kn}) {
            for (float& v : *w)
              v = cpu::round_to(v + 1.0f, cpu::StorageType::kBF16);
          }
          DeviceBuffer d_b = upload(to_bits(b)), d_qn = upload(to_bits(qn)),
                       d_kn = upload(to_bits(kn));
          ASSERT_EQ(cuda::qkv_bias_norm(in.data.data(), stride, rows, q_heads, kv_heads, head_dim,
                                        bias ? d_b.data() : nullptr, norms ? d_qn.data() : nullptr,
                                        norms ? d_kn.data() : nullptr, eps, nullptr, in.dq),
                    cudaSuccess);
          cuda::synchronize_or_die("qkv_bias_norm");
          const std::vector<uint16_t> got = download<uint16_t>(in.data, qkv.size());
          std::vector<float> want = qkv;
          cpu::qkv_bias_norm(want.data(), stride, rows, q_heads, kv_heads, head_dim,
                             bias ? b.data() : nullptr, norms ? qn.data() : nullptr,
                             norms ? kn.data() : nullptr, eps, cpu::StorageType::kBF16);
          expect_bf16_close(got, want, what);
          // The padding past each row is never written.
          for (int t = 0; t < rows; ++t) {
            for (int i = row; i < stride; ++i) {
              const size_t at = static_cast<size_t>(t) * stride + i;
              ASSERT_EQ(got[at], to_bits(std::vector<float>{qkv[at]})[0]) << what;
            }
          }
        }
      }
    }
  }
}

TEST_F(CudaOpsTest, SiluMulMatchesTwin) {
  for (int inter : {64, 100, 1408, 4096}) {
    for (int rows : {1, 37, 300}) {
      const std::string what = "inter " + std::to_string(inter) + " rows " + std::to_string(rows);
      const size_t n = static_cast<size_t>(rows) * inter;
      std::vector<float> gate_up = random_bf16(rng_, 2 * n, 3.0f);
      gate_up[0] = -100.0f;  // exp(100) overflows: silu must be -0, not NaN
      DeviceBuffer d_in = upload(to_bits(gate_up)), d_out(2 * n);
      d_out.fill_bytes(0xFF);
      ASSERT_EQ(cuda::silu_mul(d_in.data(), d_out.data(), rows, inter), cudaSuccess);
      cuda::synchronize_or_die("silu_mul");
      std::vector<float> want(n);
      cpu::silu_mul(gate_up.data(), want.data(), rows, inter);
      expect_bf16_close(download<uint16_t>(d_out, n), want, what);
    }
  }
}

TEST_F(CudaOpsTest, KvAppendIsExactInBothCacheDtypes) {
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16}) {
    for (int kv_heads : {1, 2, 8}) {
      for (int head_dim : {64, 128}) {
        for (int block_size : {8, 16, 32}) {
          for (int tokens : {1, 37, 300}) {
            const std::string what =
                std::string(dt == KvDtype::kF16 ? "fp16" : "bf16") + " kv_heads " +
                std::to_string(kv_heads) + " d " + std::to_string(head_dim) + " bs " +
                std::to_string(block_size) + " tokens " + std::to_string(tokens);
            const int kvd = kv_heads * head_dim, row = 2 * kvd;  // [k | v] per token
            const int num_blocks = tokens / block_size + 8;
            const int num_slots = num_blocks * block_size;
            const std::vector<int32_t> slots = random_slots(num_slots, tokens);
            std::vector<float> kv = random_bf16(rng_, static_cast<size_t>(tokens) * row, 2.0f);
            kv[0] = 1e5f;  // beyond fp16: inf there
            kv[kvd] = -7e4f;
            cpu::round_to(kv.data(), 2, cpu::StorageType::kBF16);
            cpu::round_to(kv.data() + kvd, 1, cpu::StorageType::kBF16);
            // The caches start as other random values of the dtype (every untouched row is
            // checked too).
            const size_t cache_n = static_cast<size_t>(num_slots) * kvd;
            std::vector<float> k_cache = random_vector(rng_, cache_n);
            std::vector<float> v_cache = random_vector(rng_, cache_n);
            cpu::round_to(k_cache.data(), cache_n, testutil::storage(dt));
            cpu::round_to(v_cache.data(), cache_n, testutil::storage(dt));
            DeviceBuffer d_kv = upload(to_bits(kv)), d_slots = upload(slots),
                         d_k = upload(to_bits(k_cache, dt)), d_v = upload(to_bits(v_cache, dt));
            ASSERT_EQ(cuda::kv_append(d_kv.data(), row, static_cast<uint16_t*>(d_kv.data()) + kvd,
                                      row, d_slots.as<int32_t>(), tokens, kv_heads, head_dim, dt,
                                      d_k.data(), d_v.data()),
                      cudaSuccess);
            cuda::synchronize_or_die("kv_append");
            cpu::kv_append(kv.data(), row, kv.data() + kvd, row, slots.data(), tokens, kvd,
                           testutil::storage(dt), k_cache.data(), v_cache.data());
            EXPECT_EQ(download<uint16_t>(d_k, cache_n), to_bits(k_cache, dt)) << what << " K";
            EXPECT_EQ(download<uint16_t>(d_v, cache_n), to_bits(v_cache, dt)) << what << " V";
          }
        }
      }
    }
  }
}

// rope_angles + rope_kv_append (one launch per layer) give exactly what rope followed by
// kv_append give, from a fused QKV buffer: the rotated q rows and both caches, padding included.
TEST_F(CudaOpsTest, RopeKvAppendEqualsRopeThenKvAppend) {
  const cpu::RopeConfig cfg{.theta = 500000, .llama3_scaling = true};
  for (KvDtype dt : {KvDtype::kF16, KvDtype::kBF16}) {
    for (int head_dim : {64, 128}) {
      for (int group : {1, 4}) {
        for (int tokens : {1, 77, 300}) {
          const int kv_heads = 8 / group, q_heads = kv_heads * group;
          const int qd = q_heads * head_dim, kvd = kv_heads * head_dim, row = qd + 2 * kvd;
          const std::string what = std::string(dt == KvDtype::kF16 ? "fp16" : "bf16") + " d " +
                                   std::to_string(head_dim) + " group " + std::to_string(group) +
                                   " tokens " + std::to_string(tokens);
          const std::vector<float> qkv = random_bf16(rng_, static_cast<size_t>(tokens) * row);
          std::vector<int32_t> pos(tokens);
          for (int32_t& p : pos)
            p = static_cast<int32_t>(rng_() % 131072);
          const int num_slots = (tokens / 16 + 4) * 16;
          const std::vector<int32_t> slots = random_slots(num_slots, tokens);
          const size_t cache_n = static_cast<size_t>(num_slots) * kvd;
          std::vector<float> cache = random_vector(rng_, cache_n);
          cpu::round_to(cache.data(), cache_n, testutil::storage(dt));
          const size_t q_n = static_cast<size_t>(tokens) * qd;
          const cuda::RopeTable table = cuda::make_rope_table(head_dim, cfg);
          DeviceBuffer d_pos = upload(pos), d_slots = upload(slots);
          // Reference: rope (q to q_out, k in place), then kv_append.
          DeviceBuffer a_qkv = upload(to_bits(qkv)), a_q(q_n * 2), a_k = upload(to_bits(cache, dt)),
                       a_v = upload(to_bits(cache, dt));
          auto* a_base = static_cast<uint16_t*>(a_qkv.data());
          ASSERT_EQ(cuda::rope(a_base, row, q_heads, a_base + qd, row, kv_heads,
                               d_pos.as<int32_t>(), tokens, table, nullptr, a_q.data(), qd),
                    cudaSuccess);
          ASSERT_EQ(cuda::kv_append(a_base + qd, row, a_base + qd + kvd, row, d_slots.as<int32_t>(),
                                    tokens, kv_heads, head_dim, dt, a_k.data(), a_v.data()),
                    cudaSuccess);
          // Fused.
          DeviceBuffer b_qkv = upload(to_bits(qkv)), b_q(q_n * 2), b_k = upload(to_bits(cache, dt)),
                       b_v = upload(to_bits(cache, dt)),
                       cs(static_cast<size_t>(tokens) * head_dim / 2 * 8);
          b_q.fill_bytes(0xFF);
          auto* b_base = static_cast<uint16_t*>(b_qkv.data());
          ASSERT_EQ(cuda::rope_angles(d_pos.as<int32_t>(), tokens, table, cs.data()), cudaSuccess);
          ASSERT_EQ(cuda::rope_kv_append(b_base, row, q_heads, b_base + qd, row, b_base + qd + kvd,
                                         row, kv_heads, head_dim, cs.data(), tokens, b_q.data(), qd,
                                         d_slots.as<int32_t>(), dt, b_k.data(), b_v.data()),
                    cudaSuccess);
          cuda::synchronize_or_die("rope_kv_append");
          EXPECT_EQ(download<uint16_t>(b_q, q_n), download<uint16_t>(a_q, q_n)) << what << " q";
          EXPECT_EQ(download<uint16_t>(b_k, cache_n), download<uint16_t>(a_k, cache_n))
              << what << " K cache";
          EXPECT_EQ(download<uint16_t>(b_v, cache_n), download<uint16_t>(a_v, cache_n))
              << what << " V cache";
          EXPECT_EQ(download<uint16_t>(b_qkv, qkv.size()), to_bits(qkv))
              << what << " the QKV rows stay untouched";
        }
      }
    }
  }
}

// A raw FP8 QKV output (ops.h Fp8Dequant): rope_kv_append rotates q and k from their fp32 values
// (the twin's rope of the same values, to bf16 rounding) and appends v's values rounded to bf16
// (exactly), into a bf16 cache; skipped slots and other rows untouched.
TEST_F(CudaOpsTest, RopeKvAppendDequantizesARawQkvRow) {
  const cpu::RopeConfig cfg{.theta = 500000, .llama3_scaling = true};
  for (int head_dim : {64, 128}) {
    for (int group : {1, 4}) {
      for (int tokens : {1, 77}) {
        const int kv_heads = 8 / group, q_heads = kv_heads * group;
        const int qd = q_heads * head_dim, kvd = kv_heads * head_dim, row = qd + 2 * kvd;
        const std::string what = "d " + std::to_string(head_dim) + " group " +
                                 std::to_string(group) + " tokens " + std::to_string(tokens);
        const RawGemmOutput r = random_raw_gemm_output(rng_, tokens, row, row);
        std::vector<int32_t> pos(tokens);
        for (int32_t& p : pos)
          p = static_cast<int32_t>(rng_() % 131072);
        const int num_slots = (tokens / 16 + 4) * 16;
        const std::vector<int32_t> slots = random_slots(num_slots, tokens);
        const size_t cache_n = static_cast<size_t>(num_slots) * kvd, q_n = size_t(tokens) * qd;
        const std::vector<float> cache = random_bf16(rng_, cache_n);
        const cuda::RopeTable table = cuda::make_rope_table(head_dim, cfg);
        DeviceBuffer d_qkv = upload(to_bits(r.raw)), d_row = upload(r.row), d_col = upload(r.col),
                     d_pos = upload(pos), d_slots = upload(slots), d_q(q_n * 2),
                     d_k = upload(to_bits(cache)), d_v = upload(to_bits(cache)),
                     cs(static_cast<size_t>(tokens) * head_dim / 2 * 8);
        d_q.fill_bytes(0xFF);
        auto* base = static_cast<uint16_t*>(d_qkv.data());
        ASSERT_EQ(cuda::rope_angles(d_pos.as<int32_t>(), tokens, table, cs.data()), cudaSuccess);
        ASSERT_EQ(cuda::rope_kv_append(
                      base, row, q_heads, base + qd, row, base + qd + kvd, row, kv_heads, head_dim,
                      cs.data(), tokens, d_q.data(), qd, d_slots.as<int32_t>(), KvDtype::kBF16,
                      d_k.data(), d_v.data(), nullptr, {}, {d_row.as<float>(), d_col.as<float>()}),
                  cudaSuccess);
        cuda::synchronize_or_die("rope_kv_append raw");
        std::vector<float> q(q_n), k(size_t(tokens) * kvd), want_k = cache, want_v = cache;
        for (int t = 0; t < tokens; ++t) {
          const auto in = r.values.begin() + size_t(t) * row;
          std::copy_n(in, qd, q.begin() + size_t(t) * qd);
          std::copy_n(in + qd, kvd, k.begin() + size_t(t) * kvd);
        }
        cpu::rope(q.data(), pos.data(), tokens, q_heads, head_dim, cfg);
        cpu::rope(k.data(), pos.data(), tokens, kv_heads, head_dim, cfg);
        for (int t = 0; t < tokens; ++t) {
          if (slots[t] < 0) continue;
          std::copy_n(k.begin() + size_t(t) * kvd, kvd, want_k.begin() + size_t(slots[t]) * kvd);
          std::copy_n(r.values.begin() + size_t(t) * row + qd + kvd, kvd,
                      want_v.begin() + size_t(slots[t]) * kvd);
        }
        expect_bf16_close(download<uint16_t>(d_q, q_n), q, what + " q");
        expect_bf16_close(download<uint16_t>(d_k, cache_n), want_k, what + " K cache");
        cpu::round_to(want_v.data(), static_cast<int64_t>(cache_n), cpu::StorageType::kBF16);
        EXPECT_EQ(download<uint16_t>(d_v, cache_n), to_bits(want_v)) << what << " V cache";
      }
    }
  }
}

// An FP8 cache (KvQuant): kv_append writes the E4M3 code of each bf16 value times 1 / scale, the
// rule of kernels/fp8_rule.h bit for bit (saturation past 448 x scale included), and nothing
// else; rope_kv_append writes the codes of the very bf16 keys and values it writes to a bf16
// cache, and the same q rows.
TEST_F(CudaOpsTest, Fp8KvAppendWritesTheRulesCodes) {
  const cuda::KvQuant fp8{true, 0.37f, 1.9f};
  const cpu::RopeConfig cfg{.theta = 500000, .llama3_scaling = true};
  auto codes_of = [](const std::vector<float>& x, float scale) {
    std::vector<uint8_t> c(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      c[i] = fp8::e4m3_from_float(x[i] * (1.0f / scale));
    return c;
  };
  for (int head_dim : {64, 128}) {
    for (int tokens : {1, 37, 300}) {
      const std::string what =
          "d " + std::to_string(head_dim) + " tokens " + std::to_string(tokens);
      const int kv_heads = 2, q_heads = 8, qd = q_heads * head_dim, kvd = kv_heads * head_dim;
      const int row = qd + 2 * kvd;  // a fused QKV row
      const int num_slots = (tokens / 16 + 4) * 16;
      const std::vector<int32_t> slots = random_slots(num_slots, tokens);
      std::vector<float> qkv = random_bf16(rng_, static_cast<size_t>(tokens) * row, 2.0f);
      qkv[qd] = 1e5f;  // past 448 x k_scale: saturates
      qkv[qd + kvd + 1] = -3e3f;
      cpu::round_to(qkv.data(), static_cast<int64_t>(qkv.size()), cpu::StorageType::kBF16);
      const size_t cache_n = static_cast<size_t>(num_slots) * kvd;
      std::vector<uint8_t> start(cache_n);
      for (uint8_t& b : start)
        b = static_cast<uint8_t>(rng_() % 0x7E);
      DeviceBuffer d_slots = upload(slots), d_qkv = upload(to_bits(qkv));
      auto* base = static_cast<uint16_t*>(d_qkv.data());

      // kv_append from the K and V columns of the QKV rows.
      DeviceBuffer k8 = upload(start), v8 = upload(start);
      ASSERT_EQ(
          cuda::kv_append(base + qd, row, base + qd + kvd, row, d_slots.as<int32_t>(), tokens,
                          kv_heads, head_dim, KvDtype::kBF16, k8.data(), v8.data(), nullptr, fp8),
          cudaSuccess);
      cuda::synchronize_or_die("kv_append fp8");
      std::vector<uint8_t> want_k = start, want_v = start;
      for (int t = 0; t < tokens; ++t) {
        if (slots[t] < 0) continue;
        const auto at = qkv.begin() + int64_t{t} * row + qd;
        const std::vector<uint8_t> kc = codes_of({at, at + kvd}, fp8.k_scale);
        const std::vector<uint8_t> vc = codes_of({at + kvd, at + 2 * kvd}, fp8.v_scale);
        std::copy(kc.begin(), kc.end(), want_k.begin() + int64_t{slots[t]} * kvd);
        std::copy(vc.begin(), vc.end(), want_v.begin() + int64_t{slots[t]} * kvd);
      }
      EXPECT_EQ(download<uint8_t>(k8, cache_n), want_k) << what << " kv_append K";
      EXPECT_EQ(download<uint8_t>(v8, cache_n), want_v) << what << " kv_append V";

      // rope_kv_append: into a bf16 cache, then into an FP8 one.
      std::vector<int32_t> pos(tokens);
      for (int32_t& p : pos)
        p = static_cast<int32_t>(rng_() % 131072);
      const cuda::RopeTable table = cuda::make_rope_table(head_dim, cfg);
      DeviceBuffer d_pos = upload(pos), cs(static_cast<size_t>(tokens) * head_dim / 2 * 8);
      ASSERT_EQ(cuda::rope_angles(d_pos.as<int32_t>(), tokens, table, cs.data()), cudaSuccess);
      const std::vector<float> zeros(cache_n, 0.0f);
      DeviceBuffer k16 = upload(to_bits(zeros)), v16 = upload(to_bits(zeros));
      DeviceBuffer q_a(size_t(tokens) * qd * 2), q_b(size_t(tokens) * qd * 2);
      k8 = upload(start);
      v8 = upload(start);
      ASSERT_EQ(cuda::rope_kv_append(base, row, q_heads, base + qd, row, base + qd + kvd, row,
                                     kv_heads, head_dim, cs.data(), tokens, q_a.data(), qd,
                                     d_slots.as<int32_t>(), KvDtype::kBF16, k16.data(), v16.data()),
                cudaSuccess);
      ASSERT_EQ(
          cuda::rope_kv_append(base, row, q_heads, base + qd, row, base + qd + kvd, row, kv_heads,
                               head_dim, cs.data(), tokens, q_b.data(), qd, d_slots.as<int32_t>(),
                               KvDtype::kBF16, k8.data(), v8.data(), nullptr, fp8),
          cudaSuccess);
      cuda::synchronize_or_die("rope_kv_append fp8");
      const size_t q_n = size_t(tokens) * qd;
      EXPECT_EQ(download<uint16_t>(q_b, q_n), download<uint16_t>(q_a, q_n)) << what << " q";
      const std::vector<float> k_bf16 = to_floats(download<uint16_t>(k16, cache_n));
      const std::vector<float> v_bf16 = to_floats(download<uint16_t>(v16, cache_n));
      std::vector<uint8_t> rk = codes_of(k_bf16, fp8.k_scale), rv = codes_of(v_bf16, fp8.v_scale);
      std::vector<uint8_t> got_k = download<uint8_t>(k8, cache_n),
                           got_v = download<uint8_t>(v8, cache_n);
      for (int s = 0; s < num_slots; ++s) {  // rows no token wrote keep their bytes
        if (std::find(slots.begin(), slots.end(), s) != slots.end()) continue;
        std::copy_n(start.begin() + int64_t{s} * kvd, kvd, rk.begin() + int64_t{s} * kvd);
        std::copy_n(start.begin() + int64_t{s} * kvd, kvd, rv.begin() + int64_t{s} * kvd);
      }
      EXPECT_EQ(got_k, rk) << what << " rope_kv_append K";
      EXPECT_EQ(got_v, rv) << what << " rope_kv_append V";
    }
  }
}

// Block copies of an FP8 cache move bytes: 16 at a time, or one at a time when a block's bytes
// are not a multiple of 16 (18 here).
// Tensor parallelism's logits reorder (rank-major all-gather -> [rows, vocab]) against its CPU
// twin, bit for bit: ranks whose slices divide the vocabulary and ones whose last slice is
// padded (or empty), one rank, and more rows than a block's threads.
TEST_F(CudaOpsTest, GatherVocabPartsEqualsTwinExactly) {
  struct Case {
    int ranks, rows, vocab;
  };
  for (const Case& c :
       {Case{1, 3, 320}, Case{2, 5, 322}, Case{4, 7, 1000}, Case{8, 2, 9}, Case{4, 130, 128256}}) {
    SCOPED_TRACE(std::to_string(c.ranks) + " ranks, vocab " + std::to_string(c.vocab));
    const int part = (c.vocab + c.ranks - 1) / c.ranks;
    const std::vector<float> gathered = random_vector(rng_, size_t(c.ranks) * c.rows * part);
    std::vector<float> want(size_t(c.rows) * c.vocab, -1.0f);
    cpu::gather_vocab_parts(gathered.data(), c.ranks, c.rows, part, c.vocab, want.data());
    DeviceBuffer d_in = upload(gathered), d_out(want.size() * 4);
    d_out.fill_bytes(0xFF);
    ASSERT_EQ(cuda::gather_vocab_parts(d_in.as<float>(), c.ranks, c.rows, part, c.vocab,
                                       d_out.as<float>()),
              cudaSuccess);
    cuda::synchronize_or_die("gather_vocab_parts");
    std::vector<float> got(want.size());
    d_out.download(got.data(), got.size() * 4);
    EXPECT_EQ(got, want);
  }
}

TEST_F(CudaOpsTest, LayoutPointsAtEachLayersCaches) {
  const cuda::KvCacheLayout layout{3, 10, 16, 2, 64, KvDtype::kF16};
  char* base = reinterpret_cast<char*>(0x10000);
  const int64_t cache_bytes = 10 * 16 * 2 * 64 * 2;
  EXPECT_EQ(static_cast<char*>(layout.k(base, 0)), base);
  EXPECT_EQ(static_cast<char*>(layout.v(base, 0)), base + cache_bytes);
  EXPECT_EQ(static_cast<char*>(layout.k(base, 2)), base + 4 * cache_bytes);
  EXPECT_EQ(layout.bytes(), size_t(6 * cache_bytes));
}

}  // namespace
}  // namespace kvc::kernels
