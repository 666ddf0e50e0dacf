#include "replica/backend/sampler.h"

#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

namespace kvc {
namespace {

TEST(Sampler, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  Sampler s;
  SamplingParams p;
  p.temperature = 0;
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}, p, 0, 0), 1);
}

TEST(Sampler, DrawsAreAPureFunctionOfSeedSiblingAndPosition) {
  EXPECT_EQ(sample_uniform(1, 2, 3), sample_uniform(1, 2, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(1, 2, 4));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(1, 3, 3));
  EXPECT_NE(sample_uniform(1, 2, 3), sample_uniform(2, 2, 3));
  for (int i = 0; i < 1000; ++i) {
    const double u = sample_uniform(9, i, i * 3);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

std::map<int32_t, int> histogram(const std::vector<float>& logits, SamplingParams p, int draws) {
  Sampler s;
  std::map<int32_t, int> h;
  for (int i = 0; i < draws; ++i)
    ++h[s.sample(logits, p, 0, i)];
  return h;
}

TEST(Sampler, TemperatureFollowsTheSoftmax) {
  // p = softmax([0, log 3]) = [0.25, 0.75].
  SamplingParams p;
  p.seed = 4;
  const auto h = histogram({0.0f, std::log(3.0f)}, p, 20000);
  EXPECT_NEAR(h.at(1) / 20000.0, 0.75, 0.02);
}

TEST(Sampler, TopKAndTopPCutTheTail) {
  const std::vector<float> logits{std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  SamplingParams k;
  k.top_k = 2;
  const auto hk = histogram(logits, k, 5000);
  EXPECT_FALSE(hk.contains(2));
  EXPECT_FALSE(hk.contains(3));
  EXPECT_NEAR(hk.at(0) / 5000.0, 0.5 / 0.8, 0.03);
  SamplingParams p;
  p.top_p = 0.9f;  // 0.5 + 0.3 + 0.15 = 0.95 >= 0.9: token 3 is cut
  const auto hp = histogram(logits, p, 5000);
  EXPECT_FALSE(hp.contains(3));
  EXPECT_TRUE(hp.contains(2));
  SamplingParams tiny;
  tiny.top_p = 0.1f;  // only the most likely token survives
  const auto ht = histogram(logits, tiny, 500);
  EXPECT_EQ(ht.size(), 1u);
  EXPECT_EQ(ht.begin()->first, 0);
}

}  // namespace
}  // namespace kvc
