// Small Hugging Face folders for the weight-loading tests (weights_test.cc,
// weights_checkpoint_test.cc): a small config, its tensors under HF names in mixed dtypes, a
// folder writer, and the checks that a load gives them back.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "replica/model/safetensors.h"
#include "replica/model/weights.h"

namespace kvc::testing {

// Small enough to write and read in milliseconds; GQA 2:1, ff not a multiple of h.
inline ModelConfig small_config(bool tied) {
  ModelConfig c;
  c.name = "small";
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.vocab_size = 50;
  c.tie_word_embeddings = tied;
  return c;
}

inline nlohmann::json config_json(const ModelConfig& c) {
  return {{"architectures", {c.architecture}},
          {"head_dim", c.head_dim},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_hidden_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"intermediate_size", c.intermediate_size},
          {"vocab_size", c.vocab_size},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"torch_dtype", "bfloat16"}};
}

// One tensor of a checkpoint as Hugging Face names it, and the dtype the test stores it in.
struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
  DType dtype;
};

// The model's tensors under their HF names. Layer 0 is BF16, layer 1 mixes F16 and BF16, the
// embeddings and norms are F32, lm_head BF16.
inline std::vector<HfTensor> hf_tensors(const ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, ff = c.intermediate_size;
  std::vector<HfTensor> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, w.embed, DType::kF32});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const DType attn = i == 0 ? DType::kBF16 : DType::kF16;
    t.push_back({p + "input_layernorm.weight", {h}, l.attn_norm, DType::kF32});
    t.push_back({p + "self_attn.q_proj.weight", {q, h}, l.wq, attn});
    t.push_back({p + "self_attn.k_proj.weight", {kv, h}, l.wk, attn});
    t.push_back({p + "self_attn.v_proj.weight", {kv, h}, l.wv, attn});
    if (!l.bq.empty()) {  // Qwen2
      t.push_back({p + "self_attn.q_proj.bias", {q}, l.bq, attn});
      t.push_back({p + "self_attn.k_proj.bias", {kv}, l.bk, attn});
      t.push_back({p + "self_attn.v_proj.bias", {kv}, l.bv, attn});
    }
    if (!l.q_norm.empty()) {  // Qwen3
      t.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, l.q_norm, DType::kF32});
      t.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, l.k_norm, DType::kBF16});
    }
    t.push_back({p + "self_attn.o_proj.weight", {h, q}, l.wo, attn});
    t.push_back({p + "post_attention_layernorm.weight", {h}, l.mlp_norm, DType::kF32});
    const auto mid = l.w_gate_up.begin() + ff * h;
    t.push_back({p + "mlp.gate_proj.weight", {ff, h}, {l.w_gate_up.begin(), mid}, DType::kBF16});
    t.push_back({p + "mlp.up_proj.weight", {ff, h}, {mid, l.w_gate_up.end()}, DType::kBF16});
    t.push_back({p + "mlp.down_proj.weight", {h, ff}, l.w_down, DType::kBF16});
  }
  t.push_back({"model.norm.weight", {h}, w.final_norm, DType::kF32});
  if (!c.tie_word_embeddings) {
    t.push_back({"lm_head.weight", {c.vocab_size, h}, w.lm_head, DType::kBF16});
  }
  return t;
}

inline float rounded(float x, DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return f16_to_float(float_to_f16(x));
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(x));
    default:
      return x;
  }
}

// config.json and the tensors split over two shards (plus a stray tensor HF checkpoints carry).
inline void write_folder(const std::string& dir, const nlohmann::json& config,
                         const std::vector<HfTensor>& tensors) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config.dump(2);
  std::vector<NamedTensor> shard[2];
  for (size_t i = 0; i < tensors.size(); ++i) {
    const HfTensor& t = tensors[i];
    shard[i < tensors.size() / 2 ? 0 : 1].push_back(
        make_tensor(t.name, t.dtype, t.shape, t.values));
  }
  const std::vector<float> inv_freq(8, 0.5f);
  shard[0].push_back(
      make_tensor("model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {8}, inv_freq));
  ASSERT_TRUE(write_safetensors(dir + "/model-00001-of-00002.safetensors", shard[0]).ok());
  ASSERT_TRUE(write_safetensors(dir + "/model-00002-of-00002.safetensors", shard[1]).ok());
}

inline std::string load_error(const std::string& dir) {
  Result<ModelWeights> w = load_hf_weights(dir);
  EXPECT_FALSE(w.ok());
  return w.ok() ? "" : w.error().message;
}

inline void expect_loaded(const ModelWeights& original, const ModelWeights& loaded) {
  const std::vector<HfTensor> want = hf_tensors(original), got = hf_tensors(loaded);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    ASSERT_EQ(got[i].values.size(), want[i].values.size());
    for (size_t j = 0; j < want[i].values.size(); ++j) {
      const float x = want[i].values[j];
      ASSERT_EQ(got[i].values[j], rounded(x, want[i].dtype)) << j;
      // half an ulp: at most 2^-8 relative for bf16, 2^-25 for an f16 subnormal
      ASSERT_LE(std::abs(got[i].values[j] - x), std::max(std::abs(x) * 0x1p-8f, 0x1p-25f)) << j;
    }
  }
}

}  // namespace kvc::testing
