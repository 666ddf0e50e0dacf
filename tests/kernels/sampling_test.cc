// The CPU sampler (kernels/cpu/sampling.h) and the rule under it (kernels/sampling_rule.h):
// the rule's own log / exp / noise against double-precision math, greedy and tie rules, the
// candidate sets of top-k and top-p against a brute-force float64 nucleus, and the empirical
// distribution against the softmax (chi-square) on small vocabularies; top logprobs and the
// processed distribution's logprobs against brute force.
#include "kernels/cpu/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels::cpu {
namespace {

using sampling::Cutoff;
using sampling::SampleParams;
using testutil::random_vector;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

SampleParams params(float temperature, int32_t top_k = 0, float top_p = 1.0f, uint64_t seed = 1,
                    int32_t sibling = 0, int32_t position = 0) {
  SampleParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.seed = seed;
  p.sibling = sibling;
  p.position = position;
  return p;
}

int32_t draw(const std::vector<float>& x, const SampleParams& p) {
  SampleScratch scratch;
  return sample(x.data(), static_cast<int>(x.size()), p, scratch).token;
}

// ---------------------------------------------------------------------------------- the rule

TEST(SamplingRule, LogMatchesDouble) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> exponent(-40.0, 40.0);
  for (int i = 0; i < 100000; ++i) {
    const float y = static_cast<float>(std::exp2(exponent(rng)));
    const double want = std::log(static_cast<double>(y));
    ASSERT_NEAR(sampling::fp::log_positive(y), want, 4e-7 * std::max(1.0, std::fabs(want)))
        << "y " << y;
  }
  EXPECT_EQ(sampling::fp::log_positive(1.0f), 0.0f);
}

TEST(SamplingRule, MassIsFixedPointExp) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> gap(0.0f, 27.9f);
  const float inv_t = sampling::inverse_temperature(0.7f);
  EXPECT_EQ(sampling::mass(3.0f, 3.0f, inv_t), uint64_t{1} << sampling::kMassBits);
  EXPECT_EQ(sampling::mass(-kInf, 3.0f, inv_t), 0u);
  EXPECT_EQ(sampling::mass(kNaN, 3.0f, inv_t), 0u);
  EXPECT_EQ(sampling::mass(3.0f - 30.0f * 0.7f, 3.0f, inv_t), 0u);
  for (int i = 0; i < 100000; ++i) {
    const float x = -gap(rng) * 0.7f;
    // exp of the float exponent the rule computes is accurate to 2e-7; that exponent is a few
    // ulps off (x - max) / T.
    const float a = sampling::fp::mul(x, inv_t);
    const double want = std::ldexp(std::exp(static_cast<double>(a)), sampling::kMassBits);
    const double got = static_cast<double>(sampling::mass(x, 0.0f, inv_t));
    ASSERT_NEAR(got, want, 1.0 + 2e-7 * want) << "x " << x;
    const double exact = std::ldexp(std::exp(static_cast<double>(x) / 0.7), sampling::kMassBits);
    ASSERT_NEAR(got, exact, 1.0 + 4e-7 * (1 - a) * exact) << "x " << x;
  }
  // Monotone in the logit, so the order key order is the mass order.
  uint64_t prev = 0;
  for (float x = -30.0f; x <= 0.0f; x += 0.001f) {
    const uint64_t q = sampling::mass(x, 0.0f, 1.0f);
    ASSERT_GE(q, prev) << "x " << x;
    prev = q;
  }
}

TEST(SamplingRule, GumbelNoiseMatchesDouble) {
  // g = -log(-log(1 - w)) with w from the same hash, in double.
  for (int32_t token = 0; token < 200000; ++token) {
    const uint64_t key = sampling::row_key(7, 3, token / 1000);
    const uint64_t h = sampling::splitmix64(key ^ static_cast<uint32_t>(token));
    double w = std::ldexp(static_cast<double>(static_cast<float>(h)), -64);
    w = std::clamp(w, std::ldexp(1.0, -32), 1.0 - std::ldexp(1.0, -24));
    const double want = -std::log(-std::log1p(-w));
    const float got = sampling::gumbel(key, token);
    ASSERT_NEAR(got, want, 2e-6 * std::max(1.0, std::fabs(want))) << "token " << token;
    ASSERT_LE(got, sampling::kGumbelMax);
  }
}

TEST(SamplingRule, OrderKeySortsLikeFloats) {
  const std::vector<float> v{-kInf, -1e30f, -2.0f, -1e-40f, -0.0f, 0.0f, 1e-40f, 0.5f, 3.0f, kInf};
  for (size_t i = 0; i + 1 < v.size(); ++i) {
    if (v[i] == v[i + 1]) {
      EXPECT_EQ(sampling::order_key(v[i]), sampling::order_key(v[i + 1]));
    } else {
      EXPECT_LT(sampling::order_key(v[i]), sampling::order_key(v[i + 1])) << v[i];
    }
    EXPECT_EQ(sampling::key_logit(sampling::order_key(v[i])), v[i]);
  }
  EXPECT_EQ(sampling::order_key(kNaN), 0u);
  EXPECT_LT(sampling::order_key(kNaN), sampling::order_key(-kInf));
}

// ----------------------------------------------------------------------------- greedy, ties

TEST(CpuSample, GreedyTakesTheLowestIdOfTheMaximumAndSkipsNaN) {
  const std::vector<float> x{0.1f, 3.0f, kNaN, 3.0f, -kInf};
  EXPECT_EQ(draw(x, params(0.0f)), 1);
  EXPECT_EQ(draw(x, params(1.0f, /*top_k=*/1)), 1);
  EXPECT_EQ(draw(x, params(-1.0f)), 1);
  EXPECT_EQ(draw({kNaN, kNaN}, params(0.0f)), 0);
  EXPECT_EQ(draw({kNaN, kNaN}, params(1.0f)), 0);
  EXPECT_EQ(draw({kNaN, -kInf, -kInf}, params(1.0f)), 1);  // -inf ties: the lowest id
  const std::vector<float> z{-0.0f, 0.0f};
  EXPECT_EQ(draw(z, params(0.0f)), 0);  // -0 == +0
}

TEST(CpuSample, LogprobIsLogSoftmaxOfTheRawLogits) {
  std::mt19937 rng(3);
  const std::vector<float> x = random_vector(rng, 5000, 3.0f);
  double m = -1e300, sum = 0;
  for (float v : x)
    m = std::max<double>(m, v);
  for (float v : x)
    sum += std::exp(v - m);
  for (int i = 0; i < 20; ++i) {
    SampleScratch scratch;
    const SampleResult r =
        sample(x.data(), 5000, params(0.8f, i % 3 == 0 ? 20 : 0, 0.9f, 5, 0, i), scratch);
    EXPECT_NEAR(r.logprob, x[r.token] - m - std::log(sum), 1e-5);
  }
}

TEST(CpuSample, DrawsArePureFunctionsOfSeedSiblingAndPosition) {
  std::mt19937 rng(4);
  const std::vector<float> x = random_vector(rng, 1000, 0.5f);  // flat: draws vary a lot
  for (const SampleParams& base : {params(1.0f), params(1.2f, 50), params(0.9f, 0, 0.8f)}) {
    std::vector<int32_t> tokens;
    for (int i = 0; i < 64; ++i) {
      SampleParams p = base;
      p.seed = 11;
      p.sibling = i % 8;
      p.position = i / 8;
      tokens.push_back(draw(x, p));
      EXPECT_EQ(draw(x, p), tokens.back());  // again, fresh scratch
    }
    std::sort(tokens.begin(), tokens.end());
    EXPECT_GT(std::unique(tokens.begin(), tokens.end()) - tokens.begin(), 32);
  }
}

TEST(CpuSample, SampleRowsMatchesOneRowAtATime) {
  std::mt19937 rng(5);
  const int rows = 37, vocab = 301, stride = 320;
  const std::vector<float> x = random_vector(rng, rows * stride, 2.0f);
  std::vector<SampleParams> ps;
  for (int r = 0; r < rows; ++r)
    ps.push_back(params(r % 4 == 0 ? 0.0f : 0.9f, r % 3 == 0 ? 7 : 0, r % 5 == 0 ? 0.7f : 1.0f,
                        static_cast<uint64_t>(r), r, 2 * r));
  std::vector<int32_t> tokens(rows, -1);
  std::vector<float> logprobs(rows, kNaN);
  sample_rows(x.data(), rows, vocab, stride, ps.data(), tokens.data(), logprobs.data());
  for (int r = 0; r < rows; ++r) {
    SampleScratch scratch;
    const SampleResult want = sample(x.data() + r * stride, vocab, ps[r], scratch);
    EXPECT_EQ(tokens[r], want.token);
    EXPECT_EQ(logprobs[r], want.logprob);
  }
}

// --------------------------------------------------------------------------- candidate sets

// Brute force in double: the first top_k tokens by (logit desc, id asc), then the shortest prefix
// whose probability (at temperature) reaches top_p of theirs. Returns the kept ids in order.
std::vector<int32_t> nucleus(const std::vector<float>& x, const SampleParams& p) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  if (p.top_k > 0 && p.top_k < static_cast<int>(x.size())) ids.resize(p.top_k);
  if (p.top_p < 1.0f) {
    const double m = x[ids[0]];
    double total = 0;
    for (int32_t i : ids)
      total += std::exp((x[i] - m) / p.temperature);
    double cum = 0;
    size_t keep = 0;
    while (keep < ids.size()) {
      cum += std::exp((x[ids[keep]] - m) / p.temperature);
      ++keep;
      if (cum >= p.top_p * total) break;
    }
    ids.resize(keep);
  }
  return ids;
}

TEST(CpuSample, TopLogprobsAreTheFirstTokensOfTheOrderWithTheirLogSoftmax) {
  std::mt19937 rng(6);
  std::vector<float> x = random_vector(rng, 3000, 2.0f);
  for (int i = 0; i < 3000; i += 7)
    x[i] = std::round(x[i]);  // ties: the lower id first
  x[11] = kNaN;               // never listed
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::erase(order, 11);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  SampleScratch scratch;
  SampleParams p = params(0.7f, 0, 1.0f, 9);
  p.logprobs = 20;
  const SampleResult r = sample(x.data(), 3000, p, scratch);
  int32_t ids[20];
  float lps[20];
  ASSERT_EQ(top_logprobs(x.data(), 3000, r.norm, 20, ids, lps), 20);
  for (int j = 0; j < 20; ++j) {
    EXPECT_EQ(ids[j], order[j]) << j;
    double m = -1e300, sum = 0;
    for (int32_t i : order)
      m = std::max<double>(m, x[i]);
    for (int32_t i : order)
      sum += std::exp(x[i] - m);
    EXPECT_NEAR(lps[j], x[ids[j]] - m - std::log(sum), 1e-5) << j;
  }
  // Fewer numbers than asked: only those.
  const std::vector<float> few{1.0f, kNaN, 3.0f};
  EXPECT_EQ(top_logprobs(few.data(), 3, sample(few.data(), 3, p, scratch).norm, 5, ids, lps), 2);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 0);
}

TEST(CpuSample, ProcessedLogprobsAreTheDistributionTheTokenIsDrawnFrom) {
  std::mt19937 rng(7);
  const std::vector<float> x = random_vector(rng, 500, 2.0f);
  for (const SampleParams& base :
       {params(0.6f), params(1.3f, 40), params(0.9f, 0, 0.8f), params(0.8f, 30, 0.5f)}) {
    SampleParams p = base;
    p.logprobs = 20 | sampling::kProcessedLogprobs;
    SampleScratch scratch;
    const Cutoff cut = candidate_cutoff(x.data(), 500, p, scratch);
    const SampleResult r = sample(x.data(), 500, p, scratch);
    int32_t best = 0;
    for (int32_t i = 1; i < 500; ++i)
      if (x[i] > x[best]) best = i;
    const float lp_best = sampling::logprob(r.norm, x[best], best);
    // exp(logprob) over the candidates sums to 1; every other token is -inf.
    double total = 0;
    for (int32_t i = 0; i < 500; ++i) {
      const float lp = sampling::logprob(r.norm, x[i], i);
      if (sampling::within(sampling::order_key(x[i]), i, cut)) {
        total += std::exp(static_cast<double>(lp));
        EXPECT_NEAR(lp - lp_best, (x[i] - x[best]) / p.temperature, 1e-4) << i;
      } else {
        EXPECT_EQ(lp, -kInf) << i;
      }
    }
    EXPECT_NEAR(total, 1.0, 1e-4);
    EXPECT_EQ(r.logprob, sampling::logprob(r.norm, x[r.token], r.token));
    EXPECT_TRUE(sampling::within(sampling::order_key(x[r.token]), r.token, cut));
  }
  // Greedy: a point mass on the argmax.
  SampleParams g = params(0.0f);
  g.logprobs = 3 | sampling::kProcessedLogprobs;
  SampleScratch scratch;
  const SampleResult r = sample(x.data(), 500, g, scratch);
  EXPECT_EQ(r.logprob, 0.0f);
  EXPECT_FALSE(std::signbit(r.logprob));
  int32_t ids[3];
  float lps[3];
  ASSERT_EQ(top_logprobs(x.data(), 500, r.norm, 3, ids, lps), 3);
  EXPECT_EQ(ids[0], r.token);
  EXPECT_EQ(lps[0], 0.0f);
  EXPECT_EQ(lps[1], -kInf);
  EXPECT_EQ(lps[2], -kInf);
}

std::vector<int32_t> kept(const std::vector<float>& x, const SampleParams& p) {
  SampleScratch scratch;
  const Cutoff c = candidate_cutoff(x.data(), static_cast<int>(x.size()), p, scratch);
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < static_cast<int32_t>(x.size()); ++i) {
    if (sampling::within(sampling::order_key(x[i]), i, c)) ids.push_back(i);
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return ids;
}

TEST(CpuSample, TopKAndTopPKeepTheBruteForceNucleus) {
  std::mt19937 rng(6);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int vocab = 50 + static_cast<int>(rng() % 3000);
    const std::vector<float> x = random_vector(rng, vocab, 0.5f + (trial % 7));
    const float temps[] = {0.3f, 0.7f, 1.0f, 1.5f};
    const int32_t ks[] = {0, 2, 10, 100, vocab - 1, vocab};
    const float ps[] = {1.0f, 0.95f, 0.8f, 0.3f};
    const SampleParams p =
        params(temps[trial % 4], ks[(trial / 4) % 6], ps[(trial / 24) % 4], trial, 0, trial);
    const std::vector<int32_t> want = nucleus(x, p), got = kept(x, p);
    if (got != want) {
      // Only a boundary within rounding of the top-p target may differ: the mass is fixed-point.
      ASSERT_LT(p.top_p, 1.0f) << "trial " << trial;
      const size_t n = std::min(got.size(), want.size());
      ASSERT_TRUE(std::equal(got.begin(), got.begin() + n, want.begin())) << "trial " << trial;
      ASSERT_LE(std::max(got.size(), want.size()) - n, 1u) << "trial " << trial;
      const std::vector<int32_t>& longer = got.size() > want.size() ? got : want;
      SampleParams no_p = p;
      no_p.top_p = 1.0f;
      const std::vector<int32_t> base = nucleus(x, no_p);
      const double m = x[base[0]];
      double total = 0, cum = 0;
      for (int32_t i : base)
        total += std::exp((x[i] - m) / p.temperature);
      for (size_t i = 0; i + 1 < longer.size(); ++i)
        cum += std::exp((x[longer[i]] - m) / p.temperature);
      EXPECT_NEAR(cum / total, p.top_p, 1e-6) << "trial " << trial;
      continue;
    }
    ++checked;
    // Every draw lands in the set.
    for (int i = 0; i < 20; ++i) {
      SampleParams pi = p;
      pi.position = i;
      const int32_t t = draw(x, pi);
      ASSERT_TRUE(std::find(want.begin(), want.end(), t) != want.end()) << "trial " << trial;
    }
  }
  EXPECT_GT(checked, 290);
}

TEST(CpuSample, TiesAtTheCutoffKeepTheLowestIds) {
  // 40 equal logits above 60 lower ones: top-k 10 keeps ids 0..9 of the 40 (spread over ids).
  std::vector<float> x(100, -1.0f);
  std::vector<int32_t> top;
  for (int i = 0; i < 40; ++i) {
    x[(i * 37) % 100] = 2.0f;
    top.push_back((i * 37) % 100);
  }
  std::sort(top.begin(), top.end());
  std::vector<int32_t> want(top.begin(), top.begin() + 10);
  std::vector<int32_t> got = kept(x, params(1.0f, 10));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  // top-p 0.5 after top-k 40 (the equal ones, mass 40): 20 of them, the lowest ids. Without
  // top-k the lower ones add 60 e^-3 ~ 3 (they are 3 nats down at T = 1): half of ~43 is 22.
  got = kept(x, params(1.0f, 40, 0.5f));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, std::vector<int32_t>(top.begin(), top.begin() + 20));
  got = kept(x, params(1.0f, 0, 0.5f));
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, std::vector<int32_t>(top.begin(), top.begin() + 22));
}

// ------------------------------------------------------------------------------ distribution

// Chi-square of `draws` samples against probabilities `want` (cells below 5 expected merged into
// one). Returns (statistic, degrees of freedom).
std::pair<double, int> chi_square(const std::vector<int>& counts, const std::vector<double>& want,
                                  int draws) {
  double stat = 0, rest_obs = 0, rest_exp = 0;
  int cells = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = want[i] * draws;
    if (e < 5) {
      rest_obs += counts[i];
      rest_exp += e;
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  if (rest_exp > 0) {
    stat += (rest_obs - rest_exp) * (rest_obs - rest_exp) / std::max(rest_exp, 1.0);
    ++cells;
  }
  return {stat, cells - 1};
}

TEST(CpuSample, EmpiricalDistributionIsTheCutSoftmax) {
  std::mt19937 rng(7);
  const std::vector<float> x = random_vector(rng, 12, 1.5f);
  const SampleParams cases[] = {params(1.0f),    params(0.5f),          params(2.0f),
                                params(1.0f, 4), params(1.0f, 0, 0.7f), params(0.8f, 6, 0.9f)};
  const int draws = 40000;
  for (const SampleParams& base : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << base.temperature << " k " << base.top_k << " p " << base.top_p);
    const std::vector<int32_t> keep = nucleus(x, base);
    std::vector<double> want(x.size(), 0.0);
    double total = 0;
    for (int32_t i : keep)
      total += want[i] = std::exp(x[i] / base.temperature);
    for (double& w : want)
      w /= total;
    std::vector<int> counts(x.size(), 0);
    for (int i = 0; i < draws; ++i) {
      SampleParams p = base;
      p.seed = 1000 + i / 64;
      p.sibling = i % 64;
      p.position = 77;
      ++counts[draw(x, p)];
    }
    for (size_t i = 0; i < x.size(); ++i) {
      if (want[i] == 0) {
        EXPECT_EQ(counts[i], 0) << "token " << i;
      }
    }
    const auto [stat, dof] = chi_square(counts, want, draws);
    // Mean dof, sd sqrt(2 dof): 5 sd above is a failure for a fixed seed set.
    EXPECT_LT(stat, dof + 5 * std::sqrt(2.0 * dof) + 1) << "chi2 " << stat << " dof " << dof;
  }
}

TEST(CpuSample, FlatLargeVocabularyIsUnbiased) {
  // 20,000 equal logits: the winner's noise is at the top of the Gumbel tail, where a coarse
  // uniform would tie and favour low ids. Draws must spread evenly over the id range.
  const int vocab = 20000, draws = 1000;
  const std::vector<float> x(vocab, 0.25f);
  std::vector<int> decile(10, 0);
  for (int i = 0; i < draws; ++i)
    ++decile[draw(x, params(1.0f, 0, 1.0f, 99, i, 5)) * 10 / vocab];
  const auto [stat, dof] = chi_square(decile, std::vector<double>(10, 0.1), draws);
  EXPECT_LT(stat, dof + 5 * std::sqrt(2.0 * dof) + 1) << "chi2 " << stat;
}

}  // namespace
}  // namespace kvc::kernels::cpu
