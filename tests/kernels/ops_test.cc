// CPU model math (matmul, rms_norm, rope, silu_mul, add_inplace) against naive float64 references,
// the twins of the device-only steps (rounding, embedding gather, add + RMSNorm, KV append, block
// copies), and the thread pool under it.
#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <thread>

#include "kernels/cpu/parallel.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels::cpu {
namespace {

using testutil::kNaN;
using testutil::random_vector;
using testutil::rel_l2;

TEST(Matmul, MatchesNaiveReference) {
  std::mt19937 rng(50);
  // Odd sizes (tails of every blocked loop), a decode-like m = 1, and one large enough to thread.
  const int sizes[][3] = {{3, 37, 129}, {1, 64, 64}, {1, 5, 3}, {7, 1, 16}, {17, 300, 256}};
  for (auto [m, n, k] : sizes) {
    SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " k " << k);
    const std::vector<float> x = random_vector(rng, static_cast<size_t>(m) * k);
    const std::vector<float> w = random_vector(rng, static_cast<size_t>(n) * k);
    std::vector<float> y(static_cast<size_t>(m) * n, kNaN);
    matmul(x.data(), w.data(), y.data(), m, n, k);
    std::vector<double> want(y.size());
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double acc = 0;
        for (int p = 0; p < k; ++p)
          acc += static_cast<double>(x[i * k + p]) * w[j * k + p];
        want[static_cast<size_t>(i) * n + j] = acc;
      }
    }
    EXPECT_LT(rel_l2(y, want), 1e-6);
  }
}

TEST(RmsNorm, MatchesReferenceAndMayRunInPlace) {
  std::mt19937 rng(51);
  // Small activations against a large eps, so that eps matters.
  const int rows = 5, dim = 257;
  const float eps = 1e-3f;
  const std::vector<float> x = random_vector(rng, rows * dim, 0.05f);
  const std::vector<float> w = random_vector(rng, dim);
  std::vector<float> y(x.size(), kNaN);
  rms_norm(x.data(), w.data(), y.data(), rows, dim, eps);
  std::vector<double> want(x.size());
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < dim; ++i)
      ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
    const double inv = 1.0 / std::sqrt(ss / dim + eps);
    for (int i = 0; i < dim; ++i)
      want[r * dim + i] = w[i] * x[r * dim + i] * inv;
  }
  EXPECT_LT(rel_l2(y, want), 1e-6);
  std::vector<float> in_place = x;
  rms_norm(in_place.data(), w.data(), in_place.data(), rows, dim, eps);
  EXPECT_EQ(in_place, y);
}

// Hugging Face's rotary embedding written as HF writes it (inv_freq, the llama3 torch.where steps,
// emb = cat(freqs, freqs), x * cos + rotate_half(x) * sin), in double.
std::vector<double> hf_rope(const std::vector<float>& x, const std::vector<int32_t>& pos, int heads,
                            int dim, const RopeConfig& cfg) {
  const int half = dim / 2;
  std::vector<double> inv_freq(half);
  for (int i = 0; i < half; ++i)
    inv_freq[i] = 1.0 / std::pow(double{cfg.theta}, 2.0 * i / dim);
  if (cfg.llama3_scaling) {
    const double old_len = cfg.original_max_position;
    const double low_freq_wavelen = old_len / cfg.low_freq_factor;
    const double high_freq_wavelen = old_len / cfg.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      double llama = wavelen > low_freq_wavelen ? f / cfg.factor : f;
      const double smooth =
          (old_len / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor - cfg.low_freq_factor);
      const double smoothed = (1 - smooth) * llama / cfg.factor + smooth * llama;
      const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
      f = is_medium ? smoothed : llama;
    }
  }
  std::vector<double> out(x.size());
  for (size_t t = 0; t < pos.size(); ++t) {
    std::vector<double> emb(dim);
    for (int i = 0; i < dim; ++i)
      emb[i] = pos[t] * inv_freq[i % half];
    for (int h = 0; h < heads; ++h) {
      const float* xh = x.data() + (t * heads + h) * dim;
      double* oh = out.data() + (t * heads + h) * dim;
      for (int i = 0; i < dim; ++i) {
        const double rotated = i < half ? -double{xh[i + half]} : double{xh[i - half]};
        oh[i] = xh[i] * std::cos(emb[i]) + rotated * std::sin(emb[i]);
      }
    }
  }
  return out;
}

TEST(Rope, MatchesHuggingFaceFormula) {
  std::mt19937 rng(52);
  const std::vector<int32_t> pos{0, 1, 2, 17, 1000, 8191, 8192, 20000, 131071};
  struct Case {
    int heads, dim;
    RopeConfig cfg;
  };
  const Case cases[] = {
      {4, 64, {.theta = 10000}},
      {3, 128, {.theta = 500000}},
      {3, 128, {.theta = 500000, .llama3_scaling = true}},
      {2, 16, {.theta = 10000, .llama3_scaling = true, .factor = 4, .original_max_position = 64}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "dim " << c.dim << " llama3 " << c.cfg.llama3_scaling);
    const std::vector<float> x = random_vector(rng, pos.size() * c.heads * c.dim);
    std::vector<float> y = x;
    rope(y.data(), pos.data(), static_cast<int>(pos.size()), c.heads, c.dim, c.cfg);
    EXPECT_LT(rel_l2(y, hf_rope(x, pos, c.heads, c.dim, c.cfg)), 1e-6);
    // The scaling must matter at these positions (else the llama3 cases test nothing).
    RopeConfig other = c.cfg;
    other.llama3_scaling = !other.llama3_scaling;
    EXPECT_GT(rel_l2(y, hf_rope(x, pos, c.heads, c.dim, other)), 1e-3);
  }
}

TEST(SiluMul, MatchesReference) {
  std::mt19937 rng(53);
  const int rows = 3, inter = 1001;
  std::vector<float> gate_up = random_vector(rng, rows * 2 * inter, 4.0f);
  gate_up[0] = -100.0f;  // exp(100) overflows float: silu must still be finite (-0)
  gate_up[1] = 100.0f;
  std::vector<float> out(rows * inter, kNaN);
  silu_mul(gate_up.data(), out.data(), rows, inter);
  std::vector<double> want(out.size());
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < inter; ++i) {
      const double g = gate_up[r * 2 * inter + i];
      want[r * inter + i] = g / (1 + std::exp(-g)) * gate_up[r * 2 * inter + inter + i];
    }
  }
  for (float v : out)
    ASSERT_TRUE(std::isfinite(v));
  EXPECT_LT(rel_l2(out, want), 1e-6);
}

TEST(AddInplace, AddsEveryElement) {
  std::mt19937 rng(54);
  for (int64_t n : {1, 1000, 100003}) {
    std::vector<float> y = random_vector(rng, n);
    const std::vector<float> x = random_vector(rng, n);
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i)
      want[i] = y[i] + x[i];
    add_inplace(y.data(), x.data(), n);
    EXPECT_EQ(y, want);
  }
}

// ------------------------------------------------------------- twins of the device-only steps

TEST(RoundTo, MatchesTheHardwareFormats) {
  std::mt19937 rng(55);
  std::vector<float> v = random_vector(rng, 20000, 3.0f);
  // Subnormal and overflow ranges of fp16, exact halfway cases, signed zeros, inf.
  for (float x : {6e-8f, 3e-8f, 2.98023224e-8f, 1e-5f, 65504.0f, 65519.0f, 65520.0f, 1e6f, 0.0f,
                  -0.0f, 1.0f + 0x1p-11f, 1.0f + 0x1p-8f, 3e38f, 1e-39f})
    v.insert(v.end(), {x, -x});
  v.push_back(std::numeric_limits<float>::infinity());
  for (float x : v) {
    const float h = static_cast<float>(static_cast<_Float16>(x));  // the compiler's conversion
    EXPECT_EQ(std::bit_cast<uint32_t>(round_to(x, StorageType::kF16)), std::bit_cast<uint32_t>(h))
        << x;
    const float b = round_to(x, StorageType::kBF16);
    EXPECT_EQ(std::bit_cast<uint32_t>(b) & 0xFFFFu, 0u) << x;
    if (std::isfinite(b) && std::fabs(x) >= std::numeric_limits<float>::min()) {
      EXPECT_LE(std::fabs(b - x), std::ldexp(std::fabs(x), -8)) << x;
    }
    EXPECT_EQ(round_to(x, StorageType::kF32), x);
  }
  EXPECT_EQ(round_to(1.0f + 0x1p-8f, StorageType::kBF16), 1.0f);  // halfway: to even
  EXPECT_EQ(round_to(1.0f + 3 * 0x1p-8f, StorageType::kBF16), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(round_to(kNaN, StorageType::kBF16)));
}

TEST(EmbeddingGather, CopiesRowsAndZeroesOutOfRangeIds) {
  std::mt19937 rng(56);
  const int vocab = 50, hidden = 24;
  const std::vector<float> table = random_vector(rng, vocab * hidden);
  const std::vector<int32_t> tokens{3, 0, 49, -1, 50, 3};
  std::vector<float> out(tokens.size() * hidden, kNaN);
  embedding_gather(table.data(), vocab, hidden, tokens.data(), static_cast<int>(tokens.size()),
                   out.data());
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int i = 0; i < hidden; ++i) {
      const bool valid = tokens[t] >= 0 && tokens[t] < vocab;
      EXPECT_EQ(out[t * hidden + i], valid ? table[tokens[t] * hidden + i] : 0.0f);
    }
  }
}

TEST(AddRmsNorm, AddsTheResidualThenNormalises) {
  std::mt19937 rng(57);
  const int rows = 4, dim = 129;
  const float eps = 1e-5f;
  const std::vector<float> x = random_vector(rng, rows * dim);
  const std::vector<float> w = random_vector(rng, dim);
  const std::vector<float> res0 = random_vector(rng, rows * dim);
  for (bool accumulate : {true, false}) {
    std::vector<float> res = res0, y(rows * dim, kNaN);
    add_rms_norm(x.data(), res.data(), accumulate, w.data(), y.data(), rows, dim, eps);
    std::vector<float> want_res(rows * dim), want_y(rows * dim, kNaN);
    for (int i = 0; i < rows * dim; ++i)
      want_res[i] = (accumulate ? res0[i] : 0.0f) + x[i];
    EXPECT_EQ(res, want_res);
    rms_norm(want_res.data(), w.data(), want_y.data(), rows, dim, eps);
    EXPECT_EQ(y, want_y);
  }
  // x null: a plain norm of the residual, which stays as it was.
  std::vector<float> res = res0, y(rows * dim, kNaN), want_y(rows * dim, kNaN);
  add_rms_norm(nullptr, res.data(), true, w.data(), y.data(), rows, dim, eps);
  EXPECT_EQ(res, res0);
  rms_norm(res0.data(), w.data(), want_y.data(), rows, dim, eps);
  EXPECT_EQ(y, want_y);
}

TEST(KvAppend, WritesRoundedRowsAtTheirSlots) {
  std::mt19937 rng(58);
  const int kv_row = 16, slots_total = 40, tokens = 5;
  const int64_t stride = 3 * kv_row;  // rows of a fused [q | k | v]-like buffer
  const std::vector<float> buf = random_vector(rng, tokens * stride, 100.0f);
  const std::vector<int32_t> slots{7, -1, 0, 39, 12};
  for (StorageType t : {StorageType::kF32, StorageType::kF16, StorageType::kBF16}) {
    const std::vector<float> k0 = random_vector(rng, slots_total * kv_row);
    const std::vector<float> v0 = random_vector(rng, slots_total * kv_row);
    std::vector<float> k = k0, v = v0;
    kv_append(buf.data(), stride, buf.data() + kv_row, stride, slots.data(), tokens, kv_row, t,
              k.data(), v.data());
    std::vector<float> want_k = k0, want_v = v0;
    for (int i = 0; i < tokens; ++i) {
      if (slots[i] < 0) continue;
      for (int j = 0; j < kv_row; ++j) {
        want_k[slots[i] * kv_row + j] = round_to(buf[i * stride + j], t);
        want_v[slots[i] * kv_row + j] = round_to(buf[i * stride + kv_row + j], t);
      }
    }
    EXPECT_EQ(k, want_k);
    EXPECT_EQ(v, want_v);
  }
}

// Copy-on-write copies without a host tier: (2, dst, src), one of them a block onto itself.
TEST(MoveBlocks, CopiesEveryLayersKAndVWithoutAHostTier) {
  std::mt19937 rng(59);
  const int layers = 3, blocks = 6;
  const int64_t block_elems = 10;
  const std::vector<float> c0 = random_vector(rng, layers * 2 * blocks * block_elems);
  const std::vector<int32_t> moves{2, 4, 1, 2, 2, 2, 2, 5, 0};
  std::vector<float> c = c0;
  ASSERT_TRUE(move_blocks(c.data(), blocks, nullptr, 0, layers, block_elems, moves.data(), 3));
  std::vector<float> want = c0;
  for (int cache = 0; cache < 2 * layers; ++cache) {
    float* base = want.data() + cache * blocks * block_elems;
    std::copy_n(base + 1 * block_elems, block_elems, base + 4 * block_elems);
    std::copy_n(base + 0 * block_elems, block_elems, base + 5 * block_elems);
  }
  EXPECT_EQ(c, want);
}

// Moves in order: an offload out of a block before the load that refills it, a load from a slot
// before the offload that reuses it, a copy reading a block loaded just before.
TEST(MoveBlocks, MovesEveryLayersKAndVInOrder) {
  std::mt19937 rng(61);
  const int layers = 2, blocks = 5, slots = 3;
  const int64_t block_elems = 7;
  const std::vector<float> d0 = random_vector(rng, layers * 2 * blocks * block_elems);
  const std::vector<float> h0 = random_vector(rng, layers * 2 * slots * block_elems);
  const std::vector<int32_t> moves{0, 1, 2,   // block 1 -> slot 2
                                   1, 1, 0,   // slot 0 -> block 1
                                   0, 3, 0,   // block 3 -> slot 0
                                   2, 4, 1,   // block 1 (slot 0's old content) -> block 4
                                   1, 0, 2};  // slot 2 (block 1's old content) -> block 0
  std::vector<float> d = d0, h = h0;
  ASSERT_TRUE(move_blocks(d.data(), blocks, h.data(), slots, layers, block_elems, moves.data(), 5));
  std::vector<float> want_d = d0, want_h = h0;
  for (int cache = 0; cache < 2 * layers; ++cache) {
    const float* dev0 = d0.data() + cache * blocks * block_elems;
    const float* host0 = h0.data() + cache * slots * block_elems;
    float* dev = want_d.data() + cache * blocks * block_elems;
    float* host = want_h.data() + cache * slots * block_elems;
    std::copy_n(dev0 + 1 * block_elems, block_elems, host + 2 * block_elems);
    std::copy_n(host0 + 0 * block_elems, block_elems, dev + 1 * block_elems);
    std::copy_n(dev0 + 3 * block_elems, block_elems, host + 0 * block_elems);
    std::copy_n(host0 + 0 * block_elems, block_elems, dev + 4 * block_elems);
    std::copy_n(dev0 + 1 * block_elems, block_elems, dev + 0 * block_elems);
  }
  EXPECT_EQ(d, want_d);
  EXPECT_EQ(h, want_h);
}

// Every argument is checked before anything moves, in every build, as the CUDA twin checks them
// (CudaMoveBlocksArguments.AreRefusedBeforeAnyLaunch): a refusal is false and leaves the caches
// as they were; the moves that pass still move.
TEST(MoveBlocks, RefusesBadArgumentsBeforeMovingAnything) {
  std::mt19937 rng(67);
  const int layers = 2, blocks = 9, slots = 6;
  const int64_t block_elems = 8;
  const std::vector<float> d0 = random_vector(rng, layers * 2 * blocks * block_elems);
  const std::vector<float> h0 = random_vector(rng, layers * 2 * slots * block_elems);
  std::vector<float> d = d0, h = h0;
  auto moves_on = [&](float* caches, int num_blocks, float* host, int num_slots, int num_layers,
                      int64_t elems, const std::vector<int32_t>& m, int n) {
    return move_blocks(caches, num_blocks, host, num_slots, num_layers, elems, m.data(), n);
  };
  const std::vector<int32_t> load{1, 0, 0}, copy{2, 1, 0};
  // Nothing to move is fine; a negative count is not, with or without layers.
  EXPECT_TRUE(moves_on(d.data(), blocks, nullptr, 0, layers, block_elems, copy, 0));
  EXPECT_FALSE(moves_on(d.data(), blocks, nullptr, 0, layers, block_elems, copy, -1));
  EXPECT_TRUE(moves_on(d.data(), blocks, nullptr, 0, 0, block_elems, copy, 1));
  EXPECT_FALSE(moves_on(d.data(), blocks, nullptr, 0, 0, block_elems, copy, -1));
  // Negative layers, blocks, slots, block size.
  EXPECT_FALSE(moves_on(d.data(), blocks, h.data(), slots, -1, block_elems, copy, 1));
  EXPECT_FALSE(moves_on(d.data(), -1, h.data(), slots, layers, block_elems, copy, 1));
  EXPECT_FALSE(moves_on(d.data(), blocks, h.data(), -1, layers, block_elems, copy, 1));
  EXPECT_FALSE(moves_on(d.data(), blocks, h.data(), slots, layers, -1, copy, 1));
  // No cache or no moves with something to move.
  EXPECT_FALSE(moves_on(nullptr, blocks, h.data(), slots, layers, block_elems, copy, 1));
  EXPECT_FALSE(move_blocks(d.data(), blocks, h.data(), slots, layers, block_elems, nullptr, 1));
  // Moves out of range: a kind that is none of the three, a block past the cache, a slot past
  // the tier, a copy's source past the cache, negative indices.
  const std::vector<std::vector<int32_t>> bad_moves{{3, 0, 0}, {-1, 0, 0}, {1, 9, 0},  {1, 0, 6},
                                                    {0, 0, 6}, {0, -1, 0}, {1, 0, -1}, {2, 9, 0},
                                                    {2, 0, 9}, {2, 0, -1}, {2, -1, 0}};
  for (const auto& m : bad_moves) {
    EXPECT_FALSE(moves_on(d.data(), blocks, h.data(), slots, layers, block_elems, m, 1))
        << m[0] << " " << m[1] << " " << m[2];
  }
  // A tier move without a tier: no host memory (its slots then count for nothing), or no slots.
  EXPECT_FALSE(moves_on(d.data(), blocks, nullptr, slots, layers, block_elems, load, 1));
  EXPECT_FALSE(moves_on(d.data(), blocks, h.data(), 0, layers, block_elems, load, 1));
  // One bad move after good ones refuses all of them (none is done).
  const std::vector<int32_t> mixed{2, 1, 0, 1, 0, 0, 1, 0, 6};
  EXPECT_FALSE(moves_on(d.data(), blocks, h.data(), slots, layers, block_elems, mixed, 3));
  EXPECT_EQ(d, d0);
  EXPECT_EQ(h, h0);
  // The good ones alone move: block 0 -> block 1, then slot 0 -> block 0.
  EXPECT_TRUE(moves_on(d.data(), blocks, h.data(), slots, layers, block_elems, mixed, 2));
  std::vector<float> want_d = d0;
  for (int cache = 0; cache < 2 * layers; ++cache) {
    float* dev = want_d.data() + cache * blocks * block_elems;
    std::copy_n(dev, block_elems, dev + block_elems);
    std::copy_n(h0.data() + cache * slots * block_elems, block_elems, dev);
  }
  EXPECT_EQ(d, want_d);
  EXPECT_EQ(h, h0);
}

// ----------------------------------------------------------------------------------- parallel_for

TEST(ParallelFor, CoversEveryIndexOnce) {
  for (int64_t n : {1, 7, 1000, 100003}) {
    std::vector<std::atomic<int>> hits(n);
    parallel_for(n, [&](int64_t begin, int64_t end) {
      ASSERT_LE(0, begin);
      ASSERT_LT(begin, end);
      ASSERT_LE(end, n);
      for (int64_t i = begin; i < end; ++i)
        hits[i].fetch_add(1);
    });
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(hits[i].load(), 1) << "n " << n << " i " << i;
  }
}

TEST(ParallelFor, SmallRangeRunsAsOneCall) {
  int calls = 0;
  parallel_for(
      10,
      [&](int64_t begin, int64_t end) {
        ++calls;
        EXPECT_EQ(begin, 0);
        EXPECT_EQ(end, 10);
      },
      /*min_chunk=*/10);
  EXPECT_EQ(calls, 1);
}

TEST(ParallelFor, NestedAndConcurrentCallsComplete) {
  std::atomic<int64_t> sum{0};
  auto work = [&] {
    parallel_for(64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        parallel_for(100, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
      }
    });
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back(work);
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(sum.load(), 4 * 64 * 100);
}

}  // namespace
}  // namespace kvc::kernels::cpu
