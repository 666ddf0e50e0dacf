// The device sampler (kernels/cuda/sampling.h) against the CPU twin (kernels/cpu/sampling.h) on
// the same logits: the same token on every row (a float near-tie of two candidates' scores is the
// only accepted difference, and the test checks that it is one), the token inside the twin's
// top-k / top-p candidates, logprobs to float rounding, identical results on a second call, and
// the empirical distribution against the cut softmax; the top logprobs and processed logprobs
// against the twin's. Outputs are poisoned first.
#include "kernels/cuda/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/device_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::DeviceBuffer;
using sampling::SampleParams;
using testutil::download;
using testutil::upload;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Batch {
  Batch(int rows_, int vocab_, int64_t stride_) : rows(rows_), vocab(vocab_), stride(stride_) {}
  int rows, vocab;
  int64_t stride;
  std::vector<float> logits;  // [rows, stride]
  std::vector<SampleParams> params;
  const float* row(int r) const { return logits.data() + r * stride; }
};

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

Result run_gpu(const Batch& b, int calls = 1) {
  DeviceBuffer d_logits = upload(b.logits), d_params = upload(b.params);
  DeviceBuffer d_tokens(static_cast<size_t>(4) * b.rows),
      d_logprobs(static_cast<size_t>(4) * b.rows);
  Result first;
  for (int i = 0; i < calls; ++i) {
    d_tokens.fill_bytes(0xFF);
    d_logprobs.fill_bytes(0xFF);
    EXPECT_EQ(
        cuda::sample(d_logits.as<float>(), b.rows, b.vocab, b.stride, d_params.as<SampleParams>(),
                     d_tokens.as<int32_t>(), d_logprobs.as<float>(), nullptr),
        cudaSuccess);
    cuda::synchronize_or_die("sample");
    Result r{download<int32_t>(d_tokens, b.rows), download<float>(d_logprobs, b.rows)};
    if (i == 0) {
      first = r;
    } else {
      EXPECT_EQ(r.tokens, first.tokens) << "call " << i;
      for (int row = 0; row < b.rows; ++row) {
        EXPECT_EQ(std::bit_cast<uint32_t>(r.logprobs[row]),
                  std::bit_cast<uint32_t>(first.logprobs[row]))
            << "call " << i << " row " << row;
      }
    }
  }
  return first;
}

Result run_cpu(const Batch& b) {
  Result r{std::vector<int32_t>(b.rows), std::vector<float>(b.rows)};
  cpu::sample_rows(b.logits.data(), b.rows, b.vocab, b.stride, b.params.data(), r.tokens.data(),
                   r.logprobs.data());
  return r;
}

// log_softmax of the row at `token`, in double.
double logprob(const Batch& b, int row, int32_t token) {
  const float* x = b.row(row);
  double m = -kInf, sum = 0;
  for (int i = 0; i < b.vocab; ++i) {
    if (x[i] == x[i]) m = std::max<double>(m, x[i]);
  }
  for (int i = 0; i < b.vocab; ++i) {
    if (x[i] == x[i]) sum += std::exp(x[i] - m);
  }
  return x[token] - m - std::log(sum);
}

// GPU vs CPU twin, row by row; *differ counts the rows whose tokens differ (each checked to be a
// near-tie).
void expect_agree(const Batch& b, const Result& gpu, const Result& cpu, const std::string& what,
                  int* differ) {
  *differ = 0;
  cpu::SampleScratch scratch;
  for (int r = 0; r < b.rows; ++r) {
    const SampleParams& p = b.params[r];
    const int32_t g = gpu.tokens[r], c = cpu.tokens[r];
    const std::string at = what + " row " + std::to_string(r) + " (T " +
                           std::to_string(p.temperature) + " k " + std::to_string(p.top_k) + " p " +
                           std::to_string(p.top_p) + ")";
    ASSERT_GE(g, 0) << at;
    ASSERT_LT(g, b.vocab) << at;
    const sampling::Cutoff cut = cpu::candidate_cutoff(b.row(r), b.vocab, p, scratch);
    EXPECT_TRUE(sampling::within(sampling::order_key(b.row(r)[g]), g, cut))
        << at << ": token " << g << " is not a candidate";
    if (g != c) {
      ++*differ;
      // Only a near-tie of the two scores may differ (the rule is the same bits on both sides, so
      // this should not happen at all; a different libm or compiler fusing would show here).
      const bool greedy = !(p.temperature > 0.0f) || p.top_k == 1;
      ASSERT_FALSE(greedy) << at << ": greedy rows are exact, got " << g << " want " << c;
      const float inv_t = sampling::inverse_temperature(p.temperature);
      const uint64_t key = sampling::row_key(p.seed, p.sibling, p.position);
      const float sg = sampling::score(b.row(r)[g], inv_t, key, g);
      const float sc = sampling::score(b.row(r)[c], inv_t, key, c);
      EXPECT_LE(std::fabs(sg - sc),
                4 * std::numeric_limits<float>::epsilon() * std::max(1.0f, std::fabs(sc)))
          << at << ": tokens " << g << " (score " << sg << ") and " << c << " (score " << sc
          << ") are not a near-tie";
    }
    const double want = logprob(b, r, g);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(gpu.logprobs[r])) << at;
    } else {
      EXPECT_NEAR(gpu.logprobs[r], want, 2e-4 + 1e-5 * std::fabs(want)) << at << " logprob";
    }
  }
}

// Rows of varied shape: flat and peaked normals, quantised logits (many exact ties), masked
// tokens (-inf), a few NaN, and one row of all-equal logits.
void fill_logits(Batch& b, std::mt19937& rng) {
  b.logits.assign(size_t(b.rows) * b.stride, kNaN);  // padding past vocab: NaN, never read
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int r = 0; r < b.rows; ++r) {
    float* x = b.logits.data() + r * b.stride;
    const int kind = r % 7;
    const float scale = kind == 0 ? 0.3f : kind == 1 ? 2.0f : 4.0f;
    for (int i = 0; i < b.vocab; ++i)
      x[i] = scale * normal(rng);
    if (kind == 2) {  // peaked: a few tokens far ahead (LLM-like)
      for (int j = 0; j < 5; ++j)
        x[rng() % b.vocab] += 12.0f + 2.0f * j;
    } else if (kind == 3) {  // ties everywhere
      for (int i = 0; i < b.vocab; ++i)
        x[i] = std::round(x[i] * 2.0f) / 2.0f;
    } else if (kind == 4) {  // masked
      for (int i = 0; i < b.vocab; ++i)
        if (rng() % 10 < 3) x[i] = -kInf;
    } else if (kind == 5) {
      for (int j = 0; j < 3; ++j)
        x[rng() % b.vocab] = kNaN;
    } else if (kind == 6 && r % 14 == 6) {
      std::fill(x, x + b.vocab, 1.5f);
    }
  }
}

void fill_params(Batch& b, std::mt19937& rng) {
  const float temps[] = {0.0f, 0.6f, 1.0f, 1.3f};
  const int32_t ks[] = {0, 1, 2, 20, 100, 4096, 4097, 5000, b.vocab - 1, b.vocab};
  const float ps[] = {1.0f, 0.95f, 0.9f, 0.5f, 0.1f, 0.999f};
  b.params.resize(b.rows);
  for (int r = 0; r < b.rows; ++r) {
    SampleParams& p = b.params[r];
    p.temperature = temps[rng() % 4];
    p.top_k = rng() % 3 == 0 ? 0 : ks[rng() % 10];
    p.top_p = rng() % 3 == 0 ? 1.0f : ps[rng() % 6];
    p.seed = rng();
    p.sibling = static_cast<int32_t>(rng() % 64);
    p.position = static_cast<int32_t>(rng() % 100000);
  }
}

class CudaSamplingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
  std::mt19937 rng_{20261202};
};

TEST_F(CudaSamplingTest, MatchesTheCpuTwinOverVocabularySweeps) {
  struct Case {
    int rows, vocab;
    int64_t stride;
  };
  // 50257 with stride 50257: rows not 16-byte aligned (scalar loads); 128256: Llama 3.
  const Case cases[] = {
      {97, 1000, 1000}, {64, 32000, 32008}, {48, 50257, 50257}, {128, 128256, 128256}};
  for (const Case& c : cases) {
    Batch b{c.rows, c.vocab, c.stride};
    fill_logits(b, rng_);
    fill_params(b, rng_);
    const std::string what = "vocab " + std::to_string(c.vocab);
    const Result gpu = run_gpu(b, /*calls=*/2);
    const Result cpu = run_cpu(b);
    int differ = 0;
    expect_agree(b, gpu, cpu, what, &differ);
    EXPECT_LE(differ, 1) << what;
  }
}

TEST_F(CudaSamplingTest, TopKAndTopPEdgeCases) {
  // Cutoffs among ties (top-k inside a run of equal logits, on the row and in the list), top-k
  // at and past the shared-memory list, tiny and huge top-p, flat rows where the nucleus is the
  // whole row, all -inf and all-NaN rows.
  const int vocab = 20000;
  std::vector<std::pair<std::vector<float>, SampleParams>> rows;
  auto add = [&](std::vector<float> x, float t, int32_t k, float p) {
    SampleParams sp;
    sp.temperature = t;
    sp.top_k = k;
    sp.top_p = p;
    sp.seed = rng_();
    sp.position = static_cast<int32_t>(rows.size());
    rows.emplace_back(std::move(x), sp);
  };
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> equal(vocab, 0.5f), flat(vocab), steps(vocab), masked(vocab, -kInf);
  for (int i = 0; i < vocab; ++i) {
    flat[i] = 0.01f * normal(rng_);
    steps[i] = static_cast<float>(static_cast<int>(rng_() % 8));  // 8 values, ~2500 ties each
  }
  masked[17] = 1.0f, masked[19000] = 1.0f;
  for (int32_t k : {1, 2, 10, 4095, 4096, 4097, 6000, vocab - 1}) {
    add(equal, 1.0f, k, 1.0f);
    add(steps, 0.8f, k, 1.0f);
    add(steps, 0.8f, k, 0.3f);
  }
  for (float p : {0.0f, 1e-6f, 0.05f, 0.5f, 0.9999f}) {
    add(equal, 1.0f, 0, p);
    add(flat, 1.0f, 0, p);
    add(steps, 2.0f, 0, p);
    add(steps, 2.0f, 3000, p);
    add(masked, 1.0f, 0, p);
  }
  add(std::vector<float>(vocab, -kInf), 1.0f, 0, 1.0f);
  add(std::vector<float>(vocab, -kInf), 1.0f, 5, 0.5f);
  add(std::vector<float>(vocab, kNaN), 1.0f, 0, 0.9f);
  add(std::vector<float>(vocab, kNaN), 0.0f, 0, 1.0f);
  Batch b{static_cast<int>(rows.size()), vocab, vocab};
  for (auto& [x, p] : rows) {
    b.logits.insert(b.logits.end(), x.begin(), x.end());
    b.params.push_back(p);
  }
  const Result gpu = run_gpu(b, 2);
  const Result cpu = run_cpu(b);
  int differ = 0;
  expect_agree(b, gpu, cpu, "edge cases", &differ);
  EXPECT_EQ(differ, 0);
}

TEST_F(CudaSamplingTest, EmpiricalDistributionIsTheCutSoftmax) {
  // Many rows of the same 10 logits, each its own (seed, sibling): the counts follow
  // softmax(x / T) over the candidates (chi-square, 5 sd), nothing outside them.
  std::mt19937 rng(9);
  std::vector<float> x = testutil::random_vector(rng, 10, 1.5f);
  struct Case {
    float t;
    int32_t k;
    float p;
  };
  for (const Case& c : {Case{1.0f, 0, 1.0f}, Case{0.5f, 0, 1.0f}, Case{1.0f, 4, 1.0f},
                        Case{1.0f, 0, 0.7f}, Case{0.8f, 6, 0.9f}}) {
    const std::string what =
        "T " + std::to_string(c.t) + " k " + std::to_string(c.k) + " p " + std::to_string(c.p);
    const int rows = 30000;
    Batch b{rows, 10, 12};
    for (int r = 0; r < rows; ++r) {
      b.logits.insert(b.logits.end(), x.begin(), x.end());
      b.logits.insert(b.logits.end(), {kNaN, kNaN});
      SampleParams p;
      p.temperature = c.t, p.top_k = c.k, p.top_p = c.p;
      p.seed = 5 + r / 64, p.sibling = r % 64, p.position = 3;
      b.params.push_back(p);
    }
    const Result gpu = run_gpu(b);
    // The candidates and their probabilities, in double.
    std::vector<int32_t> order(10);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t i, int32_t j) { return x[i] > x[j]; });
    if (c.k > 0) order.resize(c.k);
    double total = 0;
    for (int32_t i : order)
      total += std::exp((x[i] - x[order[0]]) / c.t);
    size_t keep = order.size();
    if (c.p < 1.0f) {
      double cum = 0;
      for (keep = 0; keep < order.size();) {
        cum += std::exp((x[order[keep++]] - x[order[0]]) / c.t);
        if (cum >= c.p * total) break;
      }
      total = cum;
    }
    std::vector<double> want(10, 0.0);
    for (size_t i = 0; i < keep; ++i)
      want[order[i]] = std::exp((x[order[i]] - x[order[0]]) / c.t) / total;
    std::vector<int> counts(10, 0);
    for (int32_t t : gpu.tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 10);
      ++counts[t];
    }
    double stat = 0;
    int cells = 0;
    for (int i = 0; i < 10; ++i) {
      if (want[i] == 0) {
        EXPECT_EQ(counts[i], 0) << what << " token " << i;
        continue;
      }
      const double e = want[i] * rows;
      stat += (counts[i] - e) * (counts[i] - e) / e;
      ++cells;
    }
    const int dof = cells - 1;
    EXPECT_LT(stat, dof + 5 * std::sqrt(2.0 * std::max(dof, 1)) + 1) << what << " chi2 " << stat;
    // And row for row the twin's tokens.
    const Result cpu = run_cpu(b);
    int differ = 0;
    expect_agree(b, gpu, cpu, what, &differ);
    EXPECT_LE(differ, 1) << what;
  }
}

// Top logprobs (kernels/cuda/sampling.h top_logprobs) and processed logprobs against the twin:
// the same ids in the same order on every row whose token agrees, logprobs to float rounding
// (the twin sums in double), the entries past a row's count -1 / -inf.
TEST_F(CudaSamplingTest, TopLogprobsAndProcessedLogprobsMatchTheTwin) {
  constexpr int K = sampling::kMaxTopLogprobs;
  // max_k 5: the kernel's short per-thread list; 20: the longest.
  for (const auto& [vocab, max_k] :
       {std::pair{1000, 20}, std::pair{32000, 5}, std::pair{32000, 20}, std::pair{128256, 20}}) {
    Batch b{96, vocab, vocab};
    fill_logits(b, rng_);
    fill_params(b, rng_);
    const int ks[] = {0, 1, max_k == 5 ? 3 : 5, max_k};
    for (int r = 0; r < b.rows; ++r) {
      b.params[r].logprobs = ks[r % 4] | (r % 8 >= 4 ? sampling::kProcessedLogprobs : 0);
    }
    b.params[0].logprobs = max_k | sampling::kProcessedLogprobs;  // a flat row, T 0 or not
    DeviceBuffer d_logits = upload(b.logits), d_params = upload(b.params);
    DeviceBuffer d_tokens(4 * b.rows), d_lps(4 * b.rows),
        d_norms(sizeof(sampling::LogprobNorm) * b.rows), d_ids(4 * K * b.rows),
        d_top(4 * K * b.rows);
    d_ids.fill_bytes(0x7F);
    d_top.fill_bytes(0x7F);
    ASSERT_EQ(cuda::sample(d_logits.as<float>(), b.rows, vocab, vocab, d_params.as<SampleParams>(),
                           d_tokens.as<int32_t>(), d_lps.as<float>(),
                           d_norms.as<sampling::LogprobNorm>()),
              cudaSuccess);
    ASSERT_EQ(cuda::top_logprobs(d_logits.as<float>(), b.rows, vocab, vocab,
                                 d_params.as<SampleParams>(), d_norms.as<sampling::LogprobNorm>(),
                                 d_ids.as<int32_t>(), d_top.as<float>(), max_k),
              cudaSuccess);
    cuda::synchronize_or_die("top logprobs");
    const auto tokens = download<int32_t>(d_tokens, b.rows);
    const auto lps = download<float>(d_lps, b.rows);
    const auto ids = download<int32_t>(d_ids, size_t(K) * b.rows);
    const auto top = download<float>(d_top, size_t(K) * b.rows);
    std::vector<int32_t> c_tokens(b.rows), c_ids(size_t(K) * b.rows);
    std::vector<float> c_lps(b.rows), c_top(size_t(K) * b.rows);
    cpu::sample_rows(b.logits.data(), b.rows, vocab, vocab, b.params.data(), c_tokens.data(),
                     c_lps.data(), c_ids.data(), c_top.data());
    auto near = [](float got, float want) {
      if (std::isinf(want) || std::isnan(want))
        return std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want) ||
               (std::isnan(got) && std::isnan(want));
      return std::fabs(got - want) <= 2e-4f + 1e-5f * std::fabs(want);
    };
    int compared = 0, processed_rows = 0;
    for (int r = 0; r < b.rows; ++r) {
      const std::string at = "vocab " + std::to_string(vocab) + " max_k " + std::to_string(max_k) +
                             " row " + std::to_string(r);
      for (int j = 0; j < K; ++j) {
        EXPECT_EQ(ids[r * K + j], c_ids[r * K + j]) << at << " entry " << j;
        EXPECT_TRUE(near(top[r * K + j], c_top[r * K + j]))
            << at << " entry " << j << ": " << top[r * K + j] << " want " << c_top[r * K + j];
      }
      if (tokens[r] != c_tokens[r]) continue;  // a near-tie (the sweep test checks they are)
      ++compared;
      processed_rows += sampling::processed_logprobs(b.params[r]);
      EXPECT_TRUE(near(lps[r], c_lps[r])) << at << ": " << lps[r] << " want " << c_lps[r];
    }
    EXPECT_GE(compared, b.rows - 1);
    EXPECT_GT(processed_rows, 0);
  }
}

// Not a correctness check: prints the time of one call at the engine's decode shape (128 rows of
// Llama 3's vocabulary) per mode, for the record.
TEST_F(CudaSamplingTest, TimingAt128RowsOfLlama3Vocabulary) {
  const int rows = 128, vocab = 128256;
  Batch b{rows, vocab, vocab};
  b.logits = testutil::random_vector(rng_, size_t(rows) * vocab, 2.0f);
  DeviceBuffer d_logits = upload(b.logits), d_params(sizeof(SampleParams) * rows);
  DeviceBuffer d_tokens(4 * rows), d_logprobs(4 * rows);
  struct Mode {
    const char* name;
    float t;
    int32_t k;
    float p;
  };
  for (const Mode& m : {Mode{"greedy", 0.0f, 0, 1.0f}, Mode{"temperature", 1.0f, 0, 1.0f},
                        Mode{"top-k 50", 1.0f, 50, 1.0f}, Mode{"top-p 0.9", 1.0f, 0, 0.9f},
                        Mode{"top-k 50 + top-p 0.9", 0.7f, 50, 0.9f}}) {
    std::vector<SampleParams> ps(rows);
    for (int r = 0; r < rows; ++r)
      ps[r].temperature = m.t, ps[r].top_k = m.k, ps[r].top_p = m.p, ps[r].seed = r;
    d_params.upload(ps.data(), ps.size() * sizeof(SampleParams));
    auto call = [&] {
      EXPECT_EQ(cuda::sample(d_logits.as<float>(), rows, vocab, vocab, d_params.as<SampleParams>(),
                             d_tokens.as<int32_t>(), d_logprobs.as<float>(), nullptr),
                cudaSuccess);
    };
    call();
    cuda::synchronize_or_die("sample warm-up");
    const int reps = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      call();
    cuda::synchronize_or_die("sample");
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        reps;
    std::printf("sample %d x %d %-22s %8.1f us (logits read once: %.1f us at 4 TB/s)\n", rows,
                vocab, m.name, us, rows * vocab * 4.0 / 4e12 * 1e6);
  }
  // Top logprobs after sampling (the engine's k = 5 and the most OpenAI allows).
  DeviceBuffer d_norms(sizeof(sampling::LogprobNorm) * rows),
      d_ids(4 * sampling::kMaxTopLogprobs * rows), d_top(4 * sampling::kMaxTopLogprobs * rows);
  for (const int k : {5, 20}) {
    std::vector<SampleParams> ps(rows);
    for (int r = 0; r < rows; ++r)
      ps[r].temperature = 1.0f, ps[r].seed = r, ps[r].logprobs = k;
    d_params.upload(ps.data(), ps.size() * sizeof(SampleParams));
    auto call = [&] {
      EXPECT_EQ(cuda::sample(d_logits.as<float>(), rows, vocab, vocab, d_params.as<SampleParams>(),
                             d_tokens.as<int32_t>(), d_logprobs.as<float>(),
                             d_norms.as<sampling::LogprobNorm>()),
                cudaSuccess);
      EXPECT_EQ(cuda::top_logprobs(d_logits.as<float>(), rows, vocab, vocab,
                                   d_params.as<SampleParams>(), d_norms.as<sampling::LogprobNorm>(),
                                   d_ids.as<int32_t>(), d_top.as<float>(), k),
                cudaSuccess);
    };
    call();
    cuda::synchronize_or_die("top logprobs warm-up");
    const int reps = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i)
      call();
    cuda::synchronize_or_die("top logprobs");
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        reps;
    std::printf("sample + top-%d logprobs %d x %d %8.1f us\n", k, rows, vocab, us);
  }
}

}  // namespace
}  // namespace kvc::kernels
