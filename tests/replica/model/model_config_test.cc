// parse_model_config on hostile config.json values (findings of the model_config fuzz target,
// docs/fuzzing.md): every accepted config must give the engine sane, overflow-free sizes.
#include "replica/model/model_config.h"

#include <string>

#include <gtest/gtest.h>

namespace kvc {
namespace {

// A small valid config with `extra` fields appended; a repeated key's last value wins, so `extra`
// may override the defaults.
std::string config_with(const std::string& extra) {
  return R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 300)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

TEST(ModelConfigTest, BaseConfigParses) {
  auto c = parse_model_config(config_with(""), "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->hidden_size, 64);
}

TEST(ModelConfigTest, IntegersBeyond32BitsAreRefusedNotTruncated) {
  // 2^32 + 64 used to be read as 64.
  auto c = parse_model_config(config_with(R"("hidden_size": 4294967360)"), "m");
  EXPECT_FALSE(c.ok());
  auto negative = parse_model_config(config_with(R"("vocab_size": -4294966996)"), "m");
  EXPECT_FALSE(negative.ok());
}

TEST(ModelConfigTest, HugeSizesAreRefused) {
  // Each within int32, but the parameter count overflowed int64 (UBSan: signed overflow).
  auto c = parse_model_config(R"({"hidden_size": 2147483640, "num_hidden_layers": 2147483640,
      "num_attention_heads": 4, "intermediate_size": 2147483640, "vocab_size": 2147483640})",
                              "m");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("supported maximum"), std::string::npos) << c.error().message;
}

TEST(ModelConfigTest, TheLargestAcceptedSizesDoNotOverflow) {
  ModelConfig c;
  c.hidden_size = kMaxHiddenSize;
  c.num_hidden_layers = kMaxLayers;
  c.num_attention_heads = kMaxHeads;
  c.num_key_value_heads = kMaxHeads;
  c.head_dim = kMaxHeadDim;
  c.intermediate_size = kMaxIntermediateSize;
  c.vocab_size = kMaxVocabSize;
  c.max_position_embeddings = kMaxPositions;
  ASSERT_TRUE(c.validate().ok()) << c.validate().message();
  EXPECT_GT(c.num_parameters(), 0);
  EXPECT_GT(c.kv_bytes_per_token(2), 0);
}

TEST(ModelConfigTest, NonFiniteRopeThetaIsRefused) {
  // 1e300 is +inf as a float.
  EXPECT_FALSE(parse_model_config(config_with(R"("rope_theta": 1e300)"), "m").ok());
  EXPECT_FALSE(parse_model_config(config_with(R"("rms_norm_eps": 1e39)"), "m").ok());
}

TEST(ModelConfigTest, Llama3RopeScalingMustBeUsable) {
  auto scaling = [](const std::string& fields) {
    return config_with(R"("rope_scaling": {"rope_type": "llama3", )" + fields + "}");
  };
  EXPECT_TRUE(parse_model_config(scaling(R"("factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192)"),
                                 "m")
                  .ok());
  // Frequencies are divided by factor: 0 made them infinite, a negative factor negative.
  EXPECT_FALSE(parse_model_config(scaling(R"("factor": 0.0)"), "m").ok());
  EXPECT_FALSE(parse_model_config(scaling(R"("factor": -8.0)"), "m").ok());
  EXPECT_FALSE(parse_model_config(scaling(R"("factor": 8.0,
      "original_max_position_embeddings": 0)"),
                                  "m")
                   .ok());
}

}  // namespace
}  // namespace kvc
