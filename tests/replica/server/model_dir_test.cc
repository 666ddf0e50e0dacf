// `kvcascade replica --model DIR` with a real tokenizer folder, wired as the command wires it
// (BackendOptions -> make_tokenizer / make_chat_template / make_backend -> ReplicaStack): a tiny
// Llama checkpoint written here (random bf16 weights, the real Llama 3 vocabulary size) next to
// the real Llama 3 tokenizer.json and tokenizer_config.json. Completions and chat are served,
// chat through the model's own template, and a second chat turn reuses the first one's KV.
// Skips when scripts/fetch-npm-refs.sh has not fetched the tokenizer.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "replica/model/safetensors.h"
#include "replica/server/backend_factory.h"
#include "replica/server/replica_stack.h"
#include "tests/testing/reference_files.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// A 1-layer Llama (hidden 32) with the Llama 3 tokenizer's vocabulary, random bf16 weights; with
// fp8, an FP8 checkpoint as compressed-tensors writes one (the projections' weights E4M3 codes,
// one F32 scale each).
void write_tiny_llama(const std::string& dir, int64_t vocab, bool fp8 = false) {
  const int64_t h = 32, heads = 2, kv_heads = 1, d = 16, ff = 64;
  json config{{"architectures", {"LlamaForCausalLM"}},
              {"hidden_size", h},
              {"num_hidden_layers", 1},
              {"num_attention_heads", heads},
              {"num_key_value_heads", kv_heads},
              {"head_dim", d},
              {"intermediate_size", ff},
              {"vocab_size", vocab},
              {"max_position_embeddings", 4096},
              {"rms_norm_eps", 1e-5},
              {"rope_theta", 500000.0},
              {"tie_word_embeddings", true},
              {"bos_token_id", 128000},
              {"eos_token_id", 128009},
              {"torch_dtype", "bfloat16"}};
  if (fp8) {
    config["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights", {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}}}}}}};
  }
  std::ofstream(dir + "/config.json") << config.dump(2);
  std::mt19937 rng(5);
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape, bool ones = false) {
    int64_t n = 1;
    for (int64_t s : shape)
      n *= s;
    std::vector<float> v(static_cast<size_t>(n), 1.0f);
    if (!ones) {
      std::uniform_real_distribution<float> u(-0.1f, 0.1f);
      for (float& x : v)
        x = u(rng);
    }
    return make_tensor(name, DType::kBF16, shape, v);
  };
  std::vector<NamedTensor> t;
  // The projections: E4M3 codes of values in [-0.1, 0.1) at a scale of 1/2000 (all within 200).
  auto matrix = [&](const std::string& name, std::vector<int64_t> shape) {
    if (!fp8) return tensor(name, shape);
    NamedTensor n = tensor(name, shape);
    std::vector<float> codes(n.bytes.size() / 2);
    for (size_t i = 0; i < codes.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, n.bytes.data() + 2 * i, 2);
      codes[i] = bf16_to_float(b) * 2000.0f;
    }
    t.push_back(make_tensor(name.substr(0, name.size() - 7) + ".weight_scale", DType::kF32, {1},
                            std::vector<float>{1.0f / 2000.0f}));
    return make_tensor(name, DType::kF8E4M3, shape, codes);
  };
  const std::string l = "model.layers.0.";
  t.push_back(tensor("model.embed_tokens.weight", {vocab, h}));
  t.push_back(tensor("model.norm.weight", {h}, true));
  t.push_back(tensor(l + "input_layernorm.weight", {h}, true));
  t.push_back(matrix(l + "self_attn.q_proj.weight", {heads * d, h}));
  t.push_back(matrix(l + "self_attn.k_proj.weight", {kv_heads * d, h}));
  t.push_back(matrix(l + "self_attn.v_proj.weight", {kv_heads * d, h}));
  t.push_back(matrix(l + "self_attn.o_proj.weight", {h, heads * d}));
  t.push_back(tensor(l + "post_attention_layernorm.weight", {h}, true));
  t.push_back(matrix(l + "mlp.gate_proj.weight", {ff, h}));
  t.push_back(matrix(l + "mlp.up_proj.weight", {ff, h}));
  t.push_back(matrix(l + "mlp.down_proj.weight", {h, ff}));
  ASSERT_TRUE(write_safetensors(dir + "/model.safetensors", t).ok());
}

// A model folder as --model reads it: the tiny Llama with the real Llama 3 tokenizer files.
void write_model_dir(const std::string& tok_dir, const testing::TempDir& dir, bool fp8 = false) {
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(tok_dir + "/" + f, dir.file(f));
  write_tiny_llama(dir.path(), 128256, fp8);
}

// An FP8 checkpoint is served in FP8 unless --quantization none asks for its dequantized
// weights; /v1/info says which, and both serve.
// Serves `backend` on 127.0.0.1, checks that a short completion is answered 200, and returns the
// replica's /v1/info (null when it could not be read).
json serve_and_complete(std::unique_ptr<Backend> backend,
                        std::shared_ptr<const Tokenizer> tokenizer) {
  ReplicaStackConfig c;
  c.engine = fit_engine_config(EngineConfig{}, *backend);
  ReplicaStack stack(std::move(backend), std::move(tokenizer), c);
  auto port = stack.listen("127.0.0.1", 0);
  EXPECT_TRUE(port.ok());
  if (!port.ok()) return nullptr;
  http::Client client;
  auto info = client.request("127.0.0.1", *port, "GET", "/v1/info", "", {}, 30s);
  EXPECT_TRUE(info.ok());
  const json body = {{"model", stack.server().config().served_model_name},
                     {"prompt", "Once upon a time"},
                     {"max_tokens", 4},
                     {"ignore_eos", true}};
  auto r = client.request("127.0.0.1", *port, "POST", "/v1/completions", body.dump(),
                          {{"content-type", "application/json"}}, 60s);
  EXPECT_TRUE(r.ok());
  if (r.ok()) {
    EXPECT_EQ(r->status, 200) << r->body;
  }
  return info.ok() ? json::parse(info->body) : json(nullptr);
}

TEST(ModelDirReplica, Fp8CheckpointsServeInFp8OrDequantized) {
  const std::string tok_dir = testing::llama3_tokenizer_dir();
  if (tok_dir.empty()) GTEST_SKIP() << testing::kMissingLlama3;
  testing::TempDir dir;
  write_model_dir(tok_dir, dir, /*fp8=*/true);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  for (const char* q : {"", "none", "fp8"}) {
    SCOPED_TRACE(std::string("--quantization '") + q + "'");
    BackendOptions f;
    f.model_dir = dir.path();
    f.kv_blocks = 64;
    f.quantization = q;
    auto tokenizer = make_tokenizer(f);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
    auto backend = make_backend(f, **tokenizer);
    ASSERT_TRUE(backend.ok()) << backend.error().message;
    EXPECT_THAT((*backend)->config().checkpoint_quantization, ::testing::HasSubstr("fp8"));
    const bool fp8 = std::string(q) != "none";
    EXPECT_EQ((*backend)->quantization(), fp8 ? "fp8" : "");
    const json info = serve_and_complete(std::move(*backend),
                                         std::shared_ptr<const Tokenizer>(std::move(*tokenizer)));
    ASSERT_TRUE(info.is_object());
    EXPECT_EQ(info["quantization"], fp8 ? json("fp8") : json(nullptr));
  }
  BackendOptions sim;
  sim.backend = "sim";
  sim.quantization = "fp8";
  EXPECT_NE(check_backend_options(sim).message().find("--quantization is not read"),
            std::string::npos);
}

// --kv-cache-dtype fp8 through the options: the CPU backend keeps E4M3 values and says so in
// /v1/info; the sim counts one byte per element, so the same memory holds twice the blocks; the
// CUDA backend refuses it (its attention kernels read bf16 KV), as does any other dtype.
TEST(ModelDirReplica, Fp8KvCacheThroughTheOptions) {
  ByteTokenizer bytes;
  BackendOptions cpu;
  cpu.kv_blocks = 64;
  cpu.kv_cache_dtype = "fp8";
  ASSERT_TRUE(check_backend_options(cpu).ok());
  auto backend = make_backend(cpu, bytes);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  EXPECT_EQ((*backend)->kv_cache_dtype(), "fp8");
  const json info = serve_and_complete(std::move(*backend), std::make_shared<ByteTokenizer>());
  ASSERT_TRUE(info.is_object());
  EXPECT_EQ(info["kv_cache_dtype"], "fp8");

  BackendOptions sim;
  sim.backend = "sim";
  auto bf16_sim = make_backend(sim, bytes);
  sim.kv_cache_dtype = "fp8";
  auto fp8_sim = make_backend(sim, bytes);
  ASSERT_TRUE(bf16_sim.ok() && fp8_sim.ok());
  EXPECT_EQ((*fp8_sim)->kv_bytes_per_element(), 1);
  EXPECT_GE((*fp8_sim)->num_blocks(), 2 * (*bf16_sim)->num_blocks());

  BackendOptions cuda;
  cuda.backend = "cuda";
  cuda.kv_cache_dtype = "fp8";
  EXPECT_TRUE(check_backend_options(cuda).ok());  // the CUDA kernels read E4M3 codes
  BackendOptions bad;
  bad.kv_cache_dtype = "fp8_e5m2";
  EXPECT_THAT(check_backend_options(bad).message(), ::testing::HasSubstr("--kv-cache-dtype"));
}

// --kv-host-memory-gb through the options: the CPU backend's tier in its float32 blocks, the
// sim's in the preset's, and /v1/info says how many blocks it holds.
TEST(ModelDirReplica, HostTierThroughTheOptions) {
  ByteTokenizer bytes;
  BackendOptions cpu;
  cpu.kv_blocks = 64;
  cpu.kv_host_memory_gb = 0.01;  // the tiny model's float32 block: 16 x 2,048 bytes
  ASSERT_TRUE(check_backend_options(cpu).ok());
  auto backend = make_backend(cpu, bytes);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  EXPECT_EQ((*backend)->num_host_blocks(), static_cast<int32_t>(0.01e9 / (16 * 2048)));
  const json info = serve_and_complete(std::move(*backend), std::make_shared<ByteTokenizer>());
  ASSERT_TRUE(info.is_object());
  EXPECT_EQ(info["num_host_kv_blocks"], static_cast<int32_t>(0.01e9 / (16 * 2048)));

  BackendOptions sim;
  sim.backend = "sim";
  sim.sim_preset = "a10g-llama3-8b";
  sim.kv_host_memory_gb = 32;
  auto tiered = make_backend(sim, bytes);
  ASSERT_TRUE(tiered.ok()) << tiered.error().message;
  EXPECT_EQ((*tiered)->num_host_blocks(), static_cast<int32_t>(32e9 / (16 * 131072.0)));
  BackendOptions plain;
  auto none = make_backend(plain, bytes);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->num_host_blocks(), 0);
}

TEST(ModelDirReplica, ServesCompletionsAndChatWithTheModelsTokenizerAndTemplate) {
  const std::string tok_dir = testing::llama3_tokenizer_dir();
  if (tok_dir.empty()) GTEST_SKIP() << testing::kMissingLlama3;
  testing::TempDir dir;
  write_model_dir(tok_dir, dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  BackendOptions f;
  f.model_dir = dir.path();
  f.kv_blocks = 512;
  auto tokenizer = make_tokenizer(f);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  EXPECT_NE((*tokenizer)->name(), "bytes");
  auto chat_template = make_chat_template(**tokenizer);
  ASSERT_TRUE(chat_template.ok()) << chat_template.error().message;
  ASSERT_NE(*chat_template, nullptr) << "tokenizer_config.json has a chat_template";
  auto backend = make_backend(f, **tokenizer);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  ReplicaStackConfig c;
  c.engine = fit_engine_config(EngineConfig{}, **backend);
  c.server.replica_id = "model-dir";
  c.server.chat_template = *chat_template;
  ReplicaStack stack(std::move(*backend), std::shared_ptr<const Tokenizer>(std::move(*tokenizer)),
                     c);
  auto port = stack.listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  http::Client client;
  auto post = [&](const std::string& path, const json& body) {
    auto r = client.request("127.0.0.1", *port, "POST", path, body.dump(),
                            {{"content-type", "application/json"}}, 60s);
    EXPECT_TRUE(r.ok());
    return r.ok() ? json::parse(r->body) : json{};
  };
  const std::string model = stack.server().config().served_model_name;
  const json completion = post("/v1/completions", {{"model", model},
                                                   {"prompt", "The capital of France is"},
                                                   {"max_tokens", 5},
                                                   {"ignore_eos", true}});
  ASSERT_TRUE(completion.contains("choices")) << completion.dump();
  // "The capital of France is" is 5 Llama 3 tokens (its 24 bytes would be 24 byte tokens).
  EXPECT_EQ(completion["usage"]["prompt_tokens"], 5) << completion.dump();
  EXPECT_EQ(completion["usage"]["completion_tokens"], 5);

  const json turn1 = {{"role", "system"}, {"content", std::string(400, 'a') + " be brief."}};
  const json first =
      post("/v1/chat/completions", {{"model", model},
                                    {"messages", {turn1, {{"role", "user"}, {"content", "Hi"}}}},
                                    {"max_tokens", 3}});
  ASSERT_TRUE(first.contains("choices")) << first.dump();
  const json second = post("/v1/chat/completions",
                           {{"model", model},
                            {"messages", {turn1, {{"role", "user"}, {"content", "Hello again"}}}},
                            {"max_tokens", 3}});
  ASSERT_TRUE(second.contains("choices")) << second.dump();
  EXPECT_GT(second["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 32)
      << "the shared system turn is reused";
  // The model's template, not the canonical rendering: Llama 3's header tokens are in the prompt
  // (each counts one token, so the prompt is far shorter than its bytes).
  EXPECT_LT(second["usage"]["prompt_tokens"].get<int>(), 200);
}

// generation_config.json's sampling defaults fill what a request leaves out (vLLM's
// --generation-config auto), and /v1/info says what they are.
TEST(ModelDirReplica, GenerationConfigDefaultsFillWhatTheRequestLeavesOut) {
  const std::string tok_dir = testing::llama3_tokenizer_dir();
  if (tok_dir.empty()) GTEST_SKIP() << testing::kMissingLlama3;
  testing::TempDir dir;
  write_model_dir(tok_dir, dir);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  std::ofstream(dir.file("generation_config.json"))
      << R"({"eos_token_id": [128001, 128008, 128009], "temperature": 0.0,
             "repetition_penalty": 1.1})";
  BackendOptions f;
  f.model_dir = dir.path();
  f.kv_blocks = 256;
  auto tokenizer = make_tokenizer(f);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  auto backend = make_backend(f, **tokenizer);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  EXPECT_NE(generation_config_note((*backend)->config()).find("repetition_penalty"),
            std::string::npos);
  ReplicaStackConfig c;
  c.engine = fit_engine_config(EngineConfig{}, **backend);
  ReplicaStack stack(std::move(*backend), std::shared_ptr<const Tokenizer>(std::move(*tokenizer)),
                     c);
  auto port = stack.listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  http::Client client;
  auto send = [&](const std::string& method, const std::string& path, const json& body) {
    auto r = client.request("127.0.0.1", *port, method, path, body.is_null() ? "" : body.dump(),
                            {{"content-type", "application/json"}}, 60s);
    EXPECT_TRUE(r.ok());
    return r.ok() ? json::parse(r->body) : json{};
  };
  const json info = send("GET", "/v1/info", nullptr);
  EXPECT_EQ(info["generation_defaults"]["temperature"], 0.0) << info.dump();
  EXPECT_EQ(info["generation_defaults"]["eos_token_ids"], json({128001, 128008, 128009}));
  EXPECT_EQ(info["generation_defaults"]["not_applied"], json({"repetition_penalty"}));
  const std::string model = stack.server().config().served_model_name;
  auto text = [&](const json& extra) {
    json body = {
        {"model", model}, {"prompt", "Once upon a time"}, {"max_tokens", 8}, {"ignore_eos", true}};
    body.update(extra);
    const json r = send("POST", "/v1/completions", body);
    EXPECT_TRUE(r.contains("choices")) << r.dump();
    return r.contains("choices") ? r["choices"][0]["text"].get<std::string>() : "";
  };
  // No temperature: the default 0 (greedy), whatever the seed.
  EXPECT_EQ(text({{"seed", 1}}), text({{"seed", 2}}));
  // A request's own temperature wins: at 1 over a 128k vocabulary two seeds differ.
  EXPECT_NE(text({{"seed", 1}, {"temperature", 1.0}}), text({{"seed", 2}, {"temperature", 1.0}}));
}

}  // namespace
}  // namespace kvc
