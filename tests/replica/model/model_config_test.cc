// parse_model_config on hostile config.json values (findings of the model_config fuzz target,
// docs/fuzzing.md): every accepted config must give the engine sane, overflow-free sizes.
#include "replica/model/model_config.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvc {
namespace {

// A small valid config with `extra` fields appended; a repeated key's last value wins, so `extra`
// may override the defaults.
std::string config_with(const std::string& extra) {
  return R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
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
  auto c = parse_model_config(
      R"({"model_type": "llama", "hidden_size": 2147483640, "num_hidden_layers": 2147483640,
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

// A config of one family with `extra` fields (overriding the defaults).
std::string family_config(const std::string& architecture, const std::string& extra = "") {
  return R"({"architectures": [")" + architecture +
         R"("], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 300,
             "max_position_embeddings": 4096)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string refusal(const std::string& text) {
  auto c = parse_model_config(text, "m");
  return c.ok() ? "(accepted)" : c.error().message;
}

// transformers 5 writes rope_parameters; earlier versions rope_theta and rope_scaling at the top
// level. Both read as the same model.
TEST(ModelConfigTest, BothRopeLayoutsReadTheSame) {
  auto v5 = parse_model_config(family_config("LlamaForCausalLM", R"("rope_parameters": {
      "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                               "m");
  auto classic = parse_model_config(family_config("LlamaForCausalLM", R"("rope_theta": 500000.0,
      "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"),
                                    "m");
  ASSERT_TRUE(v5.ok()) << v5.error().message;
  ASSERT_TRUE(classic.ok()) << classic.error().message;
  for (const ModelConfig* c : {&*v5, &*classic}) {
    EXPECT_EQ(c->rope_theta, 500000.0f);
    EXPECT_TRUE(c->rope_llama3);
    EXPECT_EQ(c->rope_factor, 32.0f);
    EXPECT_EQ(c->rope_original_max_position, 8192);
  }
  auto plain = parse_model_config(
      family_config("MistralForCausalLM",
                    R"("rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0})"),
      "m");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_EQ(plain->rope_theta, 1000000.0f);
  EXPECT_FALSE(plain->rope_llama3);
  EXPECT_EQ(plain->family, ModelFamily::kMistral);
}

TEST(ModelConfigTest, RopeTypesNotImplementedAreRefusedByName) {
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("rope_parameters": {
      "rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})")),
              ::testing::HasSubstr("rope_parameters.rope_type: 'yarn' is not implemented"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM",
                                    R"("rope_scaling": {"type": "linear", "factor": 2.0})")),
              ::testing::HasSubstr("rope_scaling.type: 'linear' is not implemented"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("rope_parameters": {"rope_type":
      "default"})")),
              ::testing::HasSubstr("rope_theta"));
}

TEST(ModelConfigTest, FamiliesAndTheirOptions) {
  struct Case {
    std::string architecture, model_type;
    ModelFamily family;
    bool qkv_bias, qk_norm;
  };
  for (const Case& k : {Case{"LlamaForCausalLM", "llama", ModelFamily::kLlama, false, false},
                        Case{"MistralForCausalLM", "mistral", ModelFamily::kMistral, false, false},
                        Case{"Qwen2ForCausalLM", "qwen2", ModelFamily::kQwen2, true, false},
                        Case{"Qwen3ForCausalLM", "qwen3", ModelFamily::kQwen3, false, true}}) {
    auto by_arch = parse_model_config(family_config(k.architecture), "m");
    ASSERT_TRUE(by_arch.ok()) << by_arch.error().message;
    EXPECT_EQ(by_arch->family, k.family) << k.architecture;
    EXPECT_EQ(by_arch->architecture, k.architecture);
    EXPECT_EQ(by_arch->qkv_bias, k.qkv_bias) << k.architecture;
    EXPECT_EQ(by_arch->qk_norm, k.qk_norm) << k.architecture;
    // Without architectures, model_type decides.
    auto by_type = parse_model_config(
        R"({"model_type": ")" + k.model_type +
            R"(", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 300})",
        "m");
    ASSERT_TRUE(by_type.ok()) << by_type.error().message;
    EXPECT_EQ(by_type->family, k.family) << k.model_type;
  }
  // transformers' default when the field is absent.
  EXPECT_EQ(parse_model_config(family_config("Qwen3ForCausalLM"), "m")->rms_norm_eps, 1e-6f);
}

TEST(ModelConfigTest, WhatIsNotImplementedIsRefusedWithTheFieldNamed) {
  using ::testing::HasSubstr;
  EXPECT_THAT(refusal(family_config("GemmaForCausalLM")),
              HasSubstr("architectures: 'GemmaForCausalLM' is not implemented"));
  EXPECT_THAT(refusal(family_config("Qwen2VLForConditionalGeneration")),
              HasSubstr("architectures"));
  EXPECT_THAT(refusal(R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "intermediate_size": 128, "vocab_size": 300})"),
              HasSubstr("architectures: missing, and no model_type"));
  EXPECT_THAT(refusal(R"({"model_type": "phi3", "hidden_size": 64})"),
              HasSubstr("model_type: 'phi3' is not implemented"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("attention_bias": true)")),
              HasSubstr("attention_bias"));
  EXPECT_THAT(refusal(family_config("Qwen3ForCausalLM", R"("attention_bias": true)")),
              HasSubstr("attention_bias"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("mlp_bias": true)")),
              HasSubstr("mlp_bias"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("hidden_act": "gelu")")),
              HasSubstr("hidden_act"));
  // Quantized checkpoints other than FP8 (kernels/fp8_rule.h) are refused by method, format or
  // scheme; FP8 ones are read (tests/replica/model/weights_test.cc loads them).
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM",
                                    R"("quantization_config": {"quant_method": "awq"})")),
              HasSubstr("quantization_config.quant_method: 'awq' is not supported"));
  EXPECT_EQ(refusal(family_config("LlamaForCausalLM",
                                  R"("quantization_config": {"quant_method": "fp8",
                                      "weight_block_size": [128, 128]})")),
            "(accepted)");
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM",
                                    R"("quantization_config": {"quant_method": "fp8",
                                        "weight_block_size": [128]})")),
              HasSubstr("weight_block_size"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM",
                                    R"("quantization_config": {"quant_method":
                                        "compressed-tensors", "format": "pack-quantized"})")),
              HasSubstr("'pack-quantized' is not supported"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("quantization_config": {
          "quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}})")),
              HasSubstr("only 8-bit float weights"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("quantization_config": {
          "quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float",
                                              "strategy": "group"}}}})")),
              HasSubstr("'group' is not supported"));
  EXPECT_THAT(refusal(family_config("LlamaForCausalLM", R"("quantization_config": {
          "quant_method": "compressed-tensors", "format": "float-quantized",
          "config_groups": {"g": {"weights": {"num_bits": "8"}}}})")),
              HasSubstr("config.json"));  // a field of the wrong type: an error, not a crash
  // Mistral v0.1's window of 4096 is shorter than its context: refused. null is no window.
  EXPECT_THAT(refusal(family_config("MistralForCausalLM", R"("sliding_window": 1024)")),
              HasSubstr("sliding_window: 1024 is shorter than the context served"));
  EXPECT_EQ(refusal(family_config("MistralForCausalLM", R"("sliding_window": null)")),
            "(accepted)");
  EXPECT_EQ(refusal(family_config("MistralForCausalLM", R"("sliding_window": 4096)")),
            "(accepted)");
  // Qwen's window applies only with use_sliding_window.
  EXPECT_EQ(refusal(family_config("Qwen2ForCausalLM",
                                  R"("use_sliding_window": false, "sliding_window": 1024,
                                     "layer_types": ["sliding_attention", "full_attention"])")),
            "(accepted)");
  EXPECT_THAT(refusal(family_config("Qwen2ForCausalLM",
                                    R"("use_sliding_window": true, "sliding_window": 1024)")),
              HasSubstr("sliding_window"));
  EXPECT_THAT(refusal(family_config("Qwen3ForCausalLM",
                                    R"("layer_types": ["full_attention", "sliding_attention"])")),
              HasSubstr("layer_types"));
}

TEST(ModelConfigTest, TextConfigNestingIsRead) {
  auto c = parse_model_config(R"({"architectures": ["MistralForCausalLM"], "text_config": {
      "model_type": "mistral", "hidden_size": 64, "num_hidden_layers": 3,
      "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
      "intermediate_size": 128, "vocab_size": 300, "rope_theta": 1000000.0}})",
                              "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_hidden_layers, 3);
  EXPECT_EQ(c->head_dim, 32);
  EXPECT_EQ(c->rope_theta, 1000000.0f);
}

TEST(ModelConfigTest, EosIdsAndGenerationDefaults) {
  auto c = parse_model_config(family_config("LlamaForCausalLM", R"("eos_token_id": 7)"), "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{7});
  // Llama 3 Instruct: generation_config.json ends on any of three ids, and replaces config.json's.
  ASSERT_TRUE(parse_generation_config(R"({"eos_token_id": [128001, 128008, 128009],
      "temperature": 0.6, "top_p": 0.9, "do_sample": true, "repetition_penalty": 1.0})",
                                      *c)
                  .ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->generation.temperature, 0.6f);
  EXPECT_EQ(c->generation.top_p, 0.9f);
  EXPECT_FALSE(c->generation.top_k.has_value());
  EXPECT_TRUE(c->generation.unsupported.empty());  // a repetition_penalty of 1 is no penalty

  ModelConfig q = *parse_model_config(family_config("Qwen2ForCausalLM"), "m");
  ASSERT_TRUE(parse_generation_config(R"({"top_k": 20, "repetition_penalty": 1.05})", q).ok());
  EXPECT_EQ(q.generation.top_k, 20);
  EXPECT_EQ(q.generation.unsupported, std::vector<std::string>{"repetition_penalty"});

  EXPECT_FALSE(parse_generation_config(R"({"eos_token_id": "x"})", q).ok());
  EXPECT_FALSE(parse_generation_config(R"({"temperature": -1})", q).ok());
  EXPECT_FALSE(parse_generation_config("[1]", q).ok());
  EXPECT_FALSE(
      parse_model_config(family_config("LlamaForCausalLM", R"("eos_token_id": [1, -2])"), "m")
          .ok());
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// hf_config_json writes what parse_model_config reads back to the same model; check_same_model
// accepts that and names the first field of another model.
TEST(ModelConfigTest, HfConfigJsonRoundTripsAndCheckSameModelNamesTheField) {
  for (const std::string& preset : preset_names()) {
    const ModelConfig c = *preset_config(preset);
    auto back = parse_model_config(hf_config_json(c), "folder");
    ASSERT_TRUE(back.ok()) << preset << ": " << back.error().message;
    EXPECT_TRUE(check_same_model(c, *back).ok()) << preset;
    EXPECT_EQ(back->num_parameters(), c.num_parameters()) << preset;
    EXPECT_EQ(back->rope_llama3, c.rope_llama3) << preset;
  }
  const ModelConfig c = *preset_config("tiny");
  ModelConfig other = c;
  other.num_key_value_heads = c.num_attention_heads;
  EXPECT_THAT(check_same_model(c, other).message(), ::testing::HasSubstr("num_key_value_heads"));
  other = c;
  other.rope_theta *= 2;
  EXPECT_THAT(check_same_model(c, other).message(), ::testing::HasSubstr("rope_theta"));
  other = c;
  other.family = ModelFamily::kQwen3;
  EXPECT_THAT(check_same_model(c, other).message(), ::testing::HasSubstr("family"));
  other = c;
  other.name = "another-folder";  // the name is the folder's: not the model
  other.max_position_embeddings *= 2;
  EXPECT_TRUE(check_same_model(c, other).ok());
}

}  // namespace
}  // namespace kvc
