// Random initialisation (deterministic, sensibly scaled) and loading a Hugging Face folder:
// sharded, mixed dtypes, tied and untied output embeddings, and the errors of a broken folder.
#include "replica/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/fp8_rule.h"
#include "replica/model/safetensors.h"
#include "replica/model/tensor_parallel.h"
#include "tests/replica/model/hf_folder_testing.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using ::testing::HasSubstr;
using namespace kvc::testing;  // NOLINT(google-build-using-namespace): the folder helpers

TEST(RandomWeights, DeterministicPerSeed) {
  const ModelConfig c = small_config(false);
  const ModelWeights a = random_weights(c, 1), b = random_weights(c, 1),
                     other = random_weights(c, 2);
  ASSERT_TRUE(check_weight_shapes(a).ok());
  EXPECT_EQ(a.embed, b.embed);
  EXPECT_EQ(a.lm_head, b.lm_head);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    EXPECT_EQ(a.layers[i].wq, b.layers[i].wq);
    EXPECT_EQ(a.layers[i].w_gate_up, b.layers[i].w_gate_up);
    EXPECT_EQ(a.layers[i].w_down, b.layers[i].w_down);
    EXPECT_NE(a.layers[i].wq, other.layers[i].wq);
  }
  EXPECT_NE(a.embed, other.embed);
  // Distinct tensors draw distinct streams.
  EXPECT_NE(a.layers[0].wk, a.layers[0].wv);
  EXPECT_NE(a.embed, a.lm_head);
}

TEST(RandomWeights, ScaledByFanIn) {
  const ModelWeights w = random_weights(small_config(true), 3);
  EXPECT_TRUE(w.lm_head.empty());
  EXPECT_EQ(&w.output_embedding(), &w.embed);
  auto moments = [](const std::vector<float>& x) {
    double sum = 0, sq = 0;
    for (float v : x) {
      sum += v;
      sq += double{v} * v;
    }
    const double mean = sum / x.size();
    return std::pair{mean, std::sqrt(sq / x.size() - mean * mean)};
  };
  const auto [gate_mean, gate_std] = moments(w.layers[1].w_gate_up);  // fan-in 64
  EXPECT_NEAR(gate_std, 0.125, 0.005);
  EXPECT_NEAR(gate_mean, 0.0, 0.005);
  EXPECT_NEAR(moments(w.layers[0].w_down).second, 1 / std::sqrt(96.0), 0.005);  // fan-in 96
  EXPECT_NEAR(moments(w.embed).second, 0.125, 0.005);
  for (const LayerWeights& l : w.layers) {
    EXPECT_EQ(l.attn_norm, std::vector<float>(64, 1.0f));
    EXPECT_EQ(l.mlp_norm, std::vector<float>(64, 1.0f));
  }
  EXPECT_EQ(w.final_norm, std::vector<float>(64, 1.0f));
}

TEST(CheckWeightShapes, CatchesAWrongSize) {
  ModelWeights w = random_weights(small_config(false), 1);
  ASSERT_TRUE(check_weight_shapes(w).ok());
  w.layers[1].wv.pop_back();
  EXPECT_FALSE(check_weight_shapes(w).ok());
  w = random_weights(small_config(true), 1);
  w.lm_head = w.embed;  // tied weights carry no lm_head
  EXPECT_FALSE(check_weight_shapes(w).ok());
}

TEST(LoadHfWeights, ShardedMixedDtypesUntied) {
  testing::TempDir tmp;
  const ModelWeights w = random_weights(small_config(false), 5);
  const std::string dir = tmp.file("my-model");
  write_folder(dir, config_json(w.config), hf_tensors(w));

  Result<ModelWeights> loaded = load_hf_weights(dir + "/");
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->config.name, "my-model");
  EXPECT_EQ(loaded->config.hidden_size, 64);
  EXPECT_EQ(loaded->config.num_key_value_heads, 2);
  EXPECT_FALSE(loaded->config.tie_word_embeddings);
  ASSERT_TRUE(check_weight_shapes(*loaded).ok());
  EXPECT_EQ(&loaded->output_embedding(), &loaded->lm_head);
  expect_loaded(w, *loaded);
}

TEST(LoadHfWeights, TiedEmbeddings) {
  testing::TempDir tmp;
  const ModelWeights w = random_weights(small_config(true), 6);
  write_folder(tmp.path(), config_json(w.config), hf_tensors(w));
  Result<ModelWeights> loaded = load_hf_weights(tmp.path());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(loaded->lm_head.empty());
  EXPECT_EQ(&loaded->output_embedding(), &loaded->embed);
  expect_loaded(w, *loaded);
}

// HfFolder (the CUDA backend streams tensors through it): views of the mapped tensors, their
// dtype as stored, and errors naming a missing or mis-shaped tensor.
TEST(HfFolder, TensorsAsStoredAndShapeErrors) {
  testing::TempDir tmp;
  const ModelWeights w = random_weights(small_config(false), 7);
  write_folder(tmp.path(), config_json(w.config), hf_tensors(w));
  Result<HfFolder> f = HfFolder::open(tmp.path());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->config().hidden_size, 64);
  const int64_t q = int64_t{w.config.num_attention_heads} * w.config.head_dim;
  Result<TensorView> wq = f->tensor("model.layers.0.self_attn.q_proj.weight", {q, 64});
  ASSERT_TRUE(wq.ok()) << wq.error().message;
  EXPECT_EQ(wq->dtype, DType::kBF16);
  EXPECT_EQ(wq->numel(), q * 64);
  Result<TensorView> wrong = f->tensor("model.norm.weight", {65});
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.error().message, HasSubstr("model.norm.weight"));
  EXPECT_THAT(wrong.error().message, HasSubstr("[64]"));
  Result<TensorView> missing = f->tensor("model.layers.9.mlp.down_proj.weight", {64, 96});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error().message, HasSubstr("missing tensor"));
}

TEST(LoadHfWeights, FolderErrors) {
  testing::TempDir tmp;
  const ModelWeights w = random_weights(small_config(false), 7);
  const nlohmann::json config = config_json(w.config);

  std::filesystem::create_directories(tmp.file("empty"));
  EXPECT_THAT(load_error(tmp.file("empty")), HasSubstr("no config.json"));
  EXPECT_THAT(load_error(tmp.file("absent")), HasSubstr("no config.json"));

  nlohmann::json broken = config;
  broken.erase("hidden_size");
  write_folder(tmp.file("bad-config"), broken, hf_tensors(w));
  EXPECT_THAT(load_error(tmp.file("bad-config")), HasSubstr("hidden_size"));

  std::filesystem::create_directories(tmp.file("no-shards"));
  std::ofstream(tmp.file("no-shards/config.json")) << config.dump();
  EXPECT_THAT(load_error(tmp.file("no-shards")), HasSubstr("no *.safetensors"));

  std::vector<HfTensor> tensors = hf_tensors(w);
  std::erase_if(tensors,
                [](const HfTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  write_folder(tmp.file("missing"), config, tensors);
  EXPECT_THAT(load_error(tmp.file("missing")),
              HasSubstr("missing tensor 'model.layers.1.mlp.up_proj.weight'"));

  tensors = hf_tensors(w);
  std::erase_if(tensors, [](const HfTensor& t) { return t.name == "lm_head.weight"; });
  write_folder(tmp.file("untied-without-head"), config, tensors);
  EXPECT_THAT(load_error(tmp.file("untied-without-head")),
              HasSubstr("missing tensor 'lm_head.weight'"));

  tensors = hf_tensors(w);
  for (HfTensor& t : tensors) {
    if (t.name == "model.layers.1.mlp.up_proj.weight") {
      t.shape = {96, 63};
      t.values.resize(96 * 63);
    }
  }
  write_folder(tmp.file("misshaped"), config, tensors);
  EXPECT_THAT(
      load_error(tmp.file("misshaped")),
      HasSubstr("model.layers.1.mlp.up_proj.weight: shape [96, 63] in file, expected [96, 64]"));

  write_folder(tmp.file("duplicate"), config, hf_tensors(w));
  const std::vector<float> norm(64, 1.0f);
  ASSERT_TRUE(write_safetensors(tmp.file("duplicate/extra.safetensors"),
                                {make_tensor("model.norm.weight", DType::kF32, {64}, norm)})
                  .ok());
  EXPECT_THAT(load_error(tmp.file("duplicate")), HasSubstr("'model.norm.weight' is in both"));

  write_folder(tmp.file("corrupt-shard"), config, hf_tensors(w));
  std::ofstream(tmp.file("corrupt-shard/model-00002-of-00002.safetensors")) << "garbage";
  EXPECT_THAT(load_error(tmp.file("corrupt-shard")), HasSubstr("model-00002-of-00002.safetensors"));
}

// Qwen2's q/k/v biases and Qwen3's q/k norms load where the family has them, and are required.
TEST(LoadHfWeights, FamilyTensors) {
  for (const auto& [architecture, family] : {std::pair{"Qwen2ForCausalLM", ModelFamily::kQwen2},
                                             std::pair{"Qwen3ForCausalLM", ModelFamily::kQwen3}}) {
    SCOPED_TRACE(architecture);
    testing::TempDir tmp;
    ModelConfig c = small_config(true);
    c.architecture = architecture;
    c.family = family;
    c.qkv_bias = family == ModelFamily::kQwen2;
    c.qk_norm = family == ModelFamily::kQwen3;
    const ModelWeights w = random_weights(c, 8);
    ASSERT_TRUE(check_weight_shapes(w).ok());
    write_folder(tmp.file("m"), config_json(c), hf_tensors(w));
    Result<ModelWeights> loaded = load_hf_weights(tmp.file("m"));
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->config.family, family);
    expect_loaded(w, *loaded);
    if (c.qkv_bias) {
      EXPECT_EQ(loaded->layers[1].bk.size(), size_t(c.num_key_value_heads * c.head_dim));
    } else {
      EXPECT_EQ(loaded->layers[1].k_norm.size(), size_t(c.head_dim));
    }

    // A tensor the family needs is missing: named.
    std::vector<HfTensor> tensors = hf_tensors(w);
    const std::string needed = c.qkv_bias ? "model.layers.1.self_attn.v_proj.bias"
                                          : "model.layers.1.self_attn.q_norm.weight";
    std::erase_if(tensors, [&](const HfTensor& t) { return t.name == needed; });
    write_folder(tmp.file("missing"), config_json(c), tensors);
    EXPECT_THAT(load_error(tmp.file("missing")), HasSubstr("missing tensor '" + needed + "'"));

    // The same tensors under a Llama config: Llama reads neither biases nor q/k norms, so the
    // config does not describe the checkpoint (it would serve a different model).
    nlohmann::json as_llama = config_json(c);
    as_llama["architectures"] = {"LlamaForCausalLM"};
    write_folder(tmp.file("as-llama"), as_llama, hf_tensors(w));
    const std::string error = load_error(tmp.file("as-llama"));
    EXPECT_THAT(error, HasSubstr("does not read"));
    EXPECT_THAT(error, HasSubstr(c.qkv_bias ? "q_proj.bias" : "q_norm.weight"));
  }
}

TEST(LoadHfWeights, GenerationConfigIsRead) {
  testing::TempDir tmp;
  const ModelWeights w = random_weights(small_config(false), 9);
  write_folder(tmp.path(), config_json(w.config), hf_tensors(w));
  std::ofstream(tmp.file("generation_config.json"))
      << R"({"eos_token_id": [3, 4, 5], "temperature": 0.6, "top_p": 0.9})";
  Result<HfFolder> f = HfFolder::open(tmp.path());
  ASSERT_TRUE(f.ok()) << f.error().message;
  EXPECT_EQ(f->config().eos_token_ids, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(f->config().generation.temperature, 0.6f);
  std::ofstream(tmp.file("generation_config.json")) << R"({"eos_token_id": "end"})";
  EXPECT_THAT(load_error(tmp.path()), HasSubstr("generation_config.json: eos_token_id"));
}

}  // namespace
}  // namespace kvc
