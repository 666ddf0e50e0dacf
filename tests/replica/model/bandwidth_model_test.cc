// `kvcascade plan` must reproduce the seed's worked example (shared-prefix-kv-caching.txt):
// 128 KiB of KV per token, 512 MiB per 4,096-token prefix, 80 GiB vs 17 GiB per step for
// 2 x 64 sequences with 1,024-token completions, ~25.6 ms / ~5.4 ms of attention and ~4.8 ms of
// weights at 3.35 TB/s: about 30 ms -> 10 ms per step.
#include "replica/model/bandwidth_model.h"

#include <gtest/gtest.h>

namespace kvc {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(BandwidthModel, ReproducesTheSeedsWorkedExample) {
  const ModelConfig model = *preset_config("llama3-8b");
  const StepReport r = plan_decode_step(model, DecodeWorkload{2, 64, 4096, 1024}, Hardware{});
  EXPECT_EQ(r.kv_bytes_per_token, 128 * 1024);
  EXPECT_EQ(r.prefix_bytes, 512 * (int64_t{1} << 20));
  EXPECT_EQ(r.flat_kv_bytes(), 80 * kGiB);
  EXPECT_EQ(r.cascade_kv_bytes(), 17 * kGiB);
  EXPECT_EQ(r.cascade_prefix_bytes, 1 * kGiB);
  EXPECT_EQ(r.suffix_bytes, 16 * kGiB);
  EXPECT_NEAR(r.flat_attention_ms, 25.6, 0.1);
  EXPECT_NEAR(r.cascade_attention_ms, 5.4, 0.1);
  EXPECT_NEAR(static_cast<double>(r.weight_bytes) / 1e9, 16.0, 0.2);  // "about 16 GB"
  EXPECT_NEAR(r.weights_ms, 4.8, 0.05);
  EXPECT_NEAR(r.flat_step_ms, 30.0, 0.6);
  EXPECT_NEAR(r.cascade_step_ms, 10.0, 0.3);
  // "The average gain over the run is roughly 3-4x on decode."
  EXPECT_GT(r.mean_gain_over_generation, 3.0);
  EXPECT_LT(r.mean_gain_over_generation, 4.0);
  // "At B = 64 the redundant prefix traffic is twice the weight traffic."
  const StepReport b64 = plan_decode_step(model, DecodeWorkload{1, 64, 4096, 0}, Hardware{});
  EXPECT_NEAR(static_cast<double>(b64.flat_prefix_bytes) / b64.weight_bytes, 2.0, 0.2);
  EXPECT_TRUE(r.prefix_term_comparable_to_weights);
}

TEST(BandwidthModel, ShortPrefixFewSiblingsDoesNotPay) {
  const ModelConfig model = *preset_config("llama3-8b");
  const StepReport r = plan_decode_step(model, DecodeWorkload{1, 4, 200, 500}, Hardware{});
  EXPECT_FALSE(r.prefix_term_comparable_to_weights);
  EXPECT_LT(r.step_gain, 1.05);
}

TEST(BandwidthModel, ParsesHuggingFaceConfig) {
  const auto c =
      parse_model_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
      "vocab_size": 300, "rope_theta": 500000.0, "tie_word_embeddings": true,
      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
                         "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->gqa_group(), 2);
  EXPECT_TRUE(c->rope_llama3);
  EXPECT_FALSE(parse_model_config("{", "m").ok());
  EXPECT_FALSE(parse_model_config(R"({"hidden_size": "x"})", "m").ok());
  EXPECT_FALSE(parse_model_config(R"({"hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 3, "num_key_value_heads": 2, "intermediate_size": 128,
      "vocab_size": 300})",
                                  "m")
                   .ok());  // heads not divisible
  EXPECT_FALSE(parse_model_config(R"({"hidden_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 300,
      "rope_scaling": {"rope_type": 7}})",
                                  "m")
                   .ok());  // wrong type deep inside: an error, not an exception
}

}  // namespace
}  // namespace kvc
