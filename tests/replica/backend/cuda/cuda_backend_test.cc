// The engine on the CUDA backend (tiny preset) against the CPU backend on the same bf16-rounded
// weights, cascade against flat on the device, and preemption on the device. Skipped without a
// GPU (compiled whenever CUDA is).
#include "replica/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/cuda/device.h"
#include "kernels/cuda/llama.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/core/engine.h"
#include "replica/model/safetensors.h"
#include "replica/model/weights.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/logprob_check.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using Key = std::tuple<uint64_t, int32_t, int32_t>;  // group, sibling, position

struct RunOutput {
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> tokens;
  std::map<Key, std::vector<float>> logits;
  std::map<Key, float> gaps;  // best minus second-best logit
  int64_t preemptions = 0;
  int levels_kept = 0;
};

// The tiny preset's weights in `family` (Qwen2: q/k/v biases, Qwen3: q/k norms, scaled off 1 so
// that they change the output), rounded to bf16 as the device stores them.
ModelWeights bf16_weights(ModelFamily family = ModelFamily::kLlama) {
  ModelConfig c = *preset_config("tiny");
  c.family = family;
  c.qkv_bias = family == ModelFamily::kQwen2;
  c.qk_norm = family == ModelFamily::kQwen3;
  ModelWeights w = random_weights(c, 42);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  for (LayerWeights& l : w.layers) {
    for (auto* v : {&l.q_norm, &l.k_norm}) {
      for (float& x : *v)
        x = u(rng);
    }
  }
  auto round = [](std::vector<float>& v) {
    for (float& x : v)
      x = bf16_to_float(float_to_bf16(x));
  };
  round(w.embed);
  round(w.final_norm);
  round(w.lm_head);
  for (LayerWeights& l : w.layers) {
    for (auto* v : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.mlp_norm, &l.w_gate_up, &l.w_down,
                    &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm})
      round(*v);
  }
  return w;
}

const ModelWeights& weights() {
  static const ModelWeights w = bf16_weights();
  return w;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!kernels::cuda::device_available()) {
      GTEST_SKIP() << kernels::cuda::device_description();
    }
  }

  std::unique_ptr<Backend> cuda(int32_t blocks, int32_t block_size = 16, bool decode_gemm = false,
                                const ModelWeights& w = weights(), bool fp8 = false,
                                bool fp8_kv = false) {
    CudaBackendOptions o;
    o.num_blocks = blocks;
    o.block_size = block_size;
    o.decode_gemm = decode_gemm;
    o.fp8_weights = fp8;
    o.fp8_kv = fp8_kv;
    auto b = CudaBackend::create(w.config, &w, o);
    EXPECT_TRUE(b.ok()) << (b.ok() ? "" : b.error().message);
    return b.ok() ? std::unique_ptr<Backend>(std::move(b).value()) : nullptr;
  }
  std::unique_ptr<Backend> cpu(int32_t blocks, int32_t block_size = 16,
                               const ModelWeights& w = weights(), bool fp8 = false,
                               bool fp8_kv = false) {
    return std::make_unique<CpuBackend>(w, blocks, block_size, fp8, fp8_kv);
  }

  RunOutput run(Backend& backend, const std::vector<GenerationRequest>& requests, bool cascade,
                bool keep_logits = false) {
    EngineConfig config;
    config.cascade.enabled = cascade;
    config.cascade.min_shared_tokens = 16;
    config.cascade.pass_overhead_bytes = 0;
    config.scheduler.max_tokens_per_step = 64;  // several prefill chunks per prompt
    Engine engine(backend, tokenizer_, config, clock_);
    RunOutput out;
    engine.set_logits_observer([&](uint64_t g, int32_t s, int32_t pos, std::span<const float> l) {
      std::vector<float> sorted(l.begin(), l.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      out.gaps[{g, s, pos}] = sorted[0] - sorted[1];
      if (keep_logits) out.logits[{g, s, pos}].assign(l.begin(), l.end());
    });
    for (const auto& r : requests)
      EXPECT_TRUE(engine.submit(r).ok());
    while (engine.has_work()) {
      StepResult step = engine.step();
      EXPECT_TRUE(step.error.empty()) << step.error;
      if (!step.error.empty()) break;
      out.levels_kept += step.stats.cascade.num_levels_kept();
      for (const auto& g : step.finished) {
        for (const Sequence& s : g->seqs) {
          out.tokens[{g->id, s.sibling}].assign(s.tokens.begin() + g->prompt.size(),
                                                s.tokens.end());
        }
      }
    }
    EXPECT_EQ(engine.pool().counts().num_blocks_used, 0);
    out.preemptions = engine.scheduler().num_preemptions();
    return out;
  }

  GenerationRequest request(const std::string& prompt, int32_t n, float temperature,
                            int32_t max_tokens, uint64_t seed = 7) {
    GenerationRequest r;
    r.prompt = tokenizer_.encode(prompt);
    r.n = n;
    r.params.temperature = temperature;
    r.params.max_tokens = max_tokens;
    r.params.seed = seed;
    r.params.ignore_eos = true;
    return r;
  }

  // Greedy outputs of `b` equal those of `a`, except where `a`'s logits at the first difference
  // were a near-tie (bf16 attention routes round differently).
  static void expect_same_or_near_tie(const RunOutput& a, const RunOutput& b,
                                      const std::vector<GenerationRequest>& reqs, float tie) {
    ASSERT_EQ(a.tokens.size(), b.tokens.size());
    int flips = 0;
    for (const auto& [key, at] : a.tokens) {
      const auto& bt = b.tokens.at(key);
      ASSERT_EQ(at.size(), bt.size());
      const auto diff = std::mismatch(at.begin(), at.end(), bt.begin());
      if (diff.first == at.end()) continue;
      ++flips;
      const int32_t pos =
          static_cast<int32_t>(reqs[key.first - 1].prompt.size() + (diff.first - at.begin()));
      const float gap = a.gaps.at({key.first, key.second, pos});
      EXPECT_LT(gap, tie) << "group " << key.first << " sample " << key.second
                          << " diverged at position " << pos << " with a logit gap of " << gap;
    }
    RecordProperty("flips", flips);
  }

  // Logits of every sampled position of `dev` against `ref`'s (relative L2 <= tol) while the
  // two runs' tokens agree: up to and including the first differing token's position. Returns
  // the rows compared and the worst error.
  static std::pair<int, double> expect_logits_close(const RunOutput& ref, const RunOutput& dev,
                                                    const std::vector<GenerationRequest>& reqs,
                                                    double tol = 2e-2) {
    int compared = 0;
    double worst = 0;
    for (const auto& [key, ct] : ref.tokens) {
      const auto& gt = dev.tokens.at(key);
      const int32_t prompt = static_cast<int32_t>(reqs[std::get<0>(key) - 1].prompt.size());
      for (size_t i = 0; i < ct.size(); ++i) {
        const Key k{key.first, key.second, prompt + static_cast<int32_t>(i)};
        const double e = rel_l2(dev.logits.at(k), ref.logits.at(k));
        worst = std::max(worst, e);
        EXPECT_LE(e, tol) << "position " << std::get<2>(k);
        ++compared;
        if (ct[i] != gt[i]) break;
      }
    }
    return {compared, worst};
  }

  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
};

const std::string kSystem =
    "You are a helpful assistant. Answer briefly and cite the document when you can. ";

// Logits of every sampled position agree with the CPU backend's (float32 model on the same
// bf16-rounded weights) while the two runs' tokens agree, flat and cascade; with cuBLASLt and,
// on Hopper, with the decode GEMM for the decode steps.
TEST_F(CudaBackendTest, TinyLogitsMatchCpuBackend) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A: the cat sat on the mat. Q: where?", 4, 0, 32));
  reqs.push_back(request(kSystem + "Document B: rain in Spain. Q: what falls?", 3, 0, 32));
  reqs.push_back(request("Short prompt with no shared prefix", 1, 0, 32));
  for (int mode = 0; mode < 4; ++mode) {
    const bool cascade = mode % 2 == 1, decode_gemm = mode >= 2;
    SCOPED_TRACE(std::string(cascade ? "cascade" : "flat") + (decode_gemm ? ", decode GEMM" : ""));
    auto c = cpu(512);
    auto g = cuda(512, 16, decode_gemm);
    ASSERT_TRUE(g);
    // The decode GEMM runs on Hopper only (set_decode_gemm leaves it off elsewhere).
    if (decode_gemm && !static_cast<CudaBackend&>(*g).model().decode_gemm()) continue;
    const RunOutput ref = run(*c, reqs, cascade, /*keep_logits=*/true);
    const RunOutput dev = run(*g, reqs, cascade, /*keep_logits=*/true);
    if (cascade) {
      EXPECT_GT(dev.levels_kept, 0);
    }
    const auto [compared, worst] = expect_logits_close(ref, dev, reqs);
    EXPECT_GT(compared, 100);
    RecordProperty(std::string(cascade ? "worst_rel_l2_cascade" : "worst_rel_l2_flat") +
                       (decode_gemm ? "_decode_gemm" : ""),
                   std::to_string(worst));
    std::printf("%s%s: %d logit rows compared, worst relative L2 %.3g\n",
                cascade ? "cascade" : "flat", decode_gemm ? " (decode GEMM)" : "", compared, worst);
  }
}

// The Qwen families on the device (Qwen2's q/k/v biases, Qwen3's q/k norms through
// qkv_bias_norm) against the CPU backend on the same bf16 weights, flat and cascade.
TEST_F(CudaBackendTest, QwenFamiliesMatchCpuBackend) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A: the cat sat on the mat. Q: where?", 4, 0, 24));
  reqs.push_back(request("Short prompt with no shared prefix", 1, 0, 24));
  for (ModelFamily family : {ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    const ModelWeights w = bf16_weights(family);
    for (bool cascade : {false, true}) {
      SCOPED_TRACE(std::string(model_family_name(family)) + (cascade ? " cascade" : " flat"));
      auto c = cpu(512, 16, w);
      auto g = cuda(512, 16, false, w);
      ASSERT_TRUE(g);
      const RunOutput ref = run(*c, reqs, cascade, /*keep_logits=*/true);
      const RunOutput dev = run(*g, reqs, cascade, /*keep_logits=*/true);
      const auto [compared, worst] = expect_logits_close(ref, dev, reqs);
      EXPECT_GT(compared, 50);
      std::printf("%s %s: %d logit rows compared, worst relative L2 %.3g\n",
                  model_family_name(family), cascade ? "cascade" : "flat", compared, worst);
    }
  }
}

// On the device, greedy cascade decode gives flat decode's tokens (16 prompts x n = 8), except at
// near-ties.
TEST_F(CudaBackendTest, GreedyCascadeEqualsFlat) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 16; ++i) {
    reqs.push_back(
        request(kSystem + kSystem + "Question " + std::to_string(i) + ": why?", 8, 0, 24));
  }
  auto g1 = cuda(2048);
  auto g2 = cuda(2048);
  ASSERT_TRUE(g1 && g2);
  const RunOutput flat = run(*g1, reqs, false);
  const RunOutput cascade = run(*g2, reqs, true);
  EXPECT_GT(cascade.levels_kept, 0);
  expect_same_or_near_tie(flat, cascade, reqs, 0.05f);
}

// Decode steps replayed from CUDA graphs give exactly the eager steps' logits and tokens (greedy
// and sampled, cascade and flat), while the batch changes under them: groups of different lengths
// finish, so signatures change, graphs are captured anew and old ones replayed.
TEST_F(CudaBackendTest, CudaGraphsReplayEqualsEagerBitForBit) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(request(kSystem + "Question " + std::to_string(i) + ": why?", 4,
                           i % 2 == 0 ? 0.0f : 0.9f, 20 + 7 * i, 100 + i));
  }
  for (bool cascade : {true, false}) {
    CudaBackendOptions o;
    o.num_blocks = 1024;
    auto graphs = CudaBackend::create(weights().config, &weights(), o);
    o.cuda_graphs = false;
    auto eager = CudaBackend::create(weights().config, &weights(), o);
    ASSERT_TRUE(graphs.ok() && eager.ok());
    const RunOutput a = run(**eager, reqs, cascade, true);
    const RunOutput b = run(**graphs, reqs, cascade, true);
    const auto with = (*graphs)->model().graph_stats();
    const auto without = (*eager)->model().graph_stats();
    EXPECT_EQ(with.disabled, "");
    EXPECT_GT(with.captures, 1);  // the batch shrank: more than one signature
    EXPECT_GT(with.replays, 4 * with.captures);
    EXPECT_EQ(without.replays, 0);
    EXPECT_EQ(a.tokens, b.tokens);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    for (const auto& [key, la] : a.logits)
      ASSERT_EQ(la, b.logits.at(key)) << "logits differ at position " << std::get<2>(key);
  }
}

// A pool so small that whole groups are preempted and recomputed gives the large pool's tokens
// (recompute runs the prefill kernel where the first run decoded: near-ties may flip).
TEST_F(CudaBackendTest, SmallPoolPreemptionKeepsOutputs) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest r = request("Group " + std::to_string(i) + " asks a question.", 4, 0, 48);
    reqs.push_back(r);
  }
  auto big = cuda(1024);
  auto small = cuda(40);
  ASSERT_TRUE(big && small);
  const RunOutput a = run(*big, reqs, true);
  const RunOutput b = run(*small, reqs, true);
  expect_same_or_near_tie(a, b, reqs, 0.05f);
}

// Sampling on the device: the same seeds give the same tokens run after run; other seeds differ.
TEST_F(CudaBackendTest, SameSeedSameSamples) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Tell a story.", 8, 1.0f, 32, 11));
  GenerationRequest topk = request(kSystem + "Top-k and top-p.", 4, 0.8f, 32, 12);
  topk.params.top_k = 20;
  topk.params.top_p = 0.9f;
  reqs.push_back(topk);
  auto g = cuda(512);
  ASSERT_TRUE(g);
  const RunOutput a = run(*g, reqs, true);
  const RunOutput b = run(*g, reqs, true);
  EXPECT_EQ(a.tokens, b.tokens);
  // Siblings of one group draw differently.
  EXPECT_NE(a.tokens.at({1, 0}), a.tokens.at({1, 1}));
  reqs[0].params.seed = 99;
  const RunOutput c = run(*g, reqs, true);
  EXPECT_NE(a.tokens.at({1, 0}), c.tokens.at({1, 0}));
}

// A bf16 safetensors folder (written here: BF16 matrices, F32 norms and embeddings, one F16
// tensor, split over two shards) loads straight to the device and reproduces the backend built
// from the same weights in memory.
TEST_F(CudaBackendTest, SafetensorsFolderReproducesInMemoryWeights) {
  const ModelWeights& w = weights();
  const ModelConfig& c = w.config;
  testing::TempDir tmp;
  const nlohmann::json config{{"architectures", {"LlamaForCausalLM"}},
                              {"hidden_size", c.hidden_size},
                              {"num_hidden_layers", c.num_hidden_layers},
                              {"num_attention_heads", c.num_attention_heads},
                              {"num_key_value_heads", c.num_key_value_heads},
                              {"head_dim", c.head_dim},
                              {"intermediate_size", c.intermediate_size},
                              {"vocab_size", c.vocab_size},
                              {"max_position_embeddings", c.max_position_embeddings},
                              {"rms_norm_eps", c.rms_norm_eps},
                              {"rope_theta", c.rope_theta},
                              {"tie_word_embeddings", c.tie_word_embeddings}};
  std::ofstream(tmp.file("config.json")) << config.dump(2);
  const int64_t h = c.hidden_size, q = int64_t{c.num_attention_heads} * c.head_dim,
                kv = int64_t{c.num_key_value_heads} * c.head_dim, ff = c.intermediate_size;
  std::vector<NamedTensor> shard[2];
  shard[0].push_back(
      make_tensor("model.embed_tokens.weight", DType::kF32, {c.vocab_size, h}, w.embed));
  shard[0].push_back(make_tensor("model.norm.weight", DType::kF32, {h}, w.final_norm));
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    auto& s = shard[i % 2];
    s.push_back(make_tensor(p + "input_layernorm.weight", DType::kF32, {h}, l.attn_norm));
    // Norm-scale values are exact in fp16 too: one F16 tensor exercises the conversion.
    s.push_back(make_tensor(p + "post_attention_layernorm.weight", DType::kF16, {h}, l.mlp_norm));
    s.push_back(make_tensor(p + "self_attn.q_proj.weight", DType::kBF16, {q, h}, l.wq));
    s.push_back(make_tensor(p + "self_attn.k_proj.weight", DType::kBF16, {kv, h}, l.wk));
    s.push_back(make_tensor(p + "self_attn.v_proj.weight", DType::kBF16, {kv, h}, l.wv));
    s.push_back(make_tensor(p + "self_attn.o_proj.weight", DType::kBF16, {h, q}, l.wo));
    const std::span<const float> gu(l.w_gate_up);
    s.push_back(make_tensor(p + "mlp.gate_proj.weight", DType::kBF16, {ff, h}, gu.first(ff * h)));
    s.push_back(make_tensor(p + "mlp.up_proj.weight", DType::kBF16, {ff, h}, gu.last(ff * h)));
    s.push_back(make_tensor(p + "mlp.down_proj.weight", DType::kBF16, {h, ff}, l.w_down));
  }
  ASSERT_TRUE(write_safetensors(tmp.file("model-00001-of-00002.safetensors"), shard[0]).ok());
  ASSERT_TRUE(write_safetensors(tmp.file("model-00002-of-00002.safetensors"), shard[1]).ok());

  CudaBackendOptions o;
  o.num_blocks = 512;
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A. Q: where?", 4, 0, 24));
  reqs.push_back(request(kSystem + "Sampled.", 4, 1.0f, 24, 5));
  // With FP8 weights the pieces gather per matrix (q, k and v into one) before quantization.
  for (bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    o.fp8_weights = fp8;
    auto loaded = CudaBackend::load(tmp.path(), o);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ((*loaded)->quantization(), fp8 ? "fp8" : "");
    auto memory = cuda(512, 16, false, weights(), fp8);
    ASSERT_TRUE(memory);
    const RunOutput a = run(**loaded, reqs, true, /*keep_logits=*/true);
    const RunOutput b = run(*memory, reqs, true, /*keep_logits=*/true);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.logits, b.logits);  // the same bf16 values on the device: the same bits
  }
  o.fp8_weights = false;

  // A missing tensor is a clear error.
  std::filesystem::remove(tmp.file("model-00002-of-00002.safetensors"));
  auto broken = CudaBackend::load(tmp.path(), o);
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.error().message.find("missing tensor"), std::string::npos)
      << broken.error().message;
}

// 250 requests behind one long cached prompt, admitted together: up to 256 prefill chunks in one
// step, each with its sequence's whole block table (~630 entries), ~160,000 entries. The staging
// area for block tables once held 64 full-length tables and such a step failed (and took every
// group of the step with it).
TEST_F(CudaBackendTest, ManyChunksOverALongCachedPromptInOneStep) {
  CudaBackendOptions o;
  o.num_blocks = 4096;
  o.max_tokens_per_step = 8192;
  auto made = CudaBackend::create(weights().config, &weights(), o);
  ASSERT_TRUE(made.ok()) << made.error().message;
  EngineConfig config;
  config.scheduler.max_tokens_per_step = 8192;
  Engine engine(**made, tokenizer_, config, clock_);
  std::string prompt;
  for (int i = 0; prompt.size() < 10000; ++i)
    prompt += kSystem + std::to_string(i);
  GenerationRequest first = request(prompt, 1, 0, 1);
  ASSERT_TRUE(engine.submit(first).ok());
  while (engine.has_work())
    ASSERT_TRUE(engine.step().error.empty());
  for (int i = 0; i < 250; ++i)
    ASSERT_TRUE(engine.submit(request(prompt + "q" + std::to_string(i), 1, 0, 2)).ok());
  int finished = 0;
  size_t largest_admission = 0;
  while (engine.has_work()) {
    StepResult step = engine.step();
    ASSERT_TRUE(step.error.empty()) << step.error;
    largest_admission = std::max(largest_admission, step.stats.admitted.size());
    for (const auto& g : step.finished) {
      for (const Sequence& s : g->seqs)
        finished += s.finish == FinishReason::kLength ? 1 : 0;
    }
  }
  EXPECT_EQ(finished, 250);
  EXPECT_GT(largest_admission, 128u);  // one step prefilled > 128 chunks (> 80,000 table entries)
}

// Start-up errors are messages, not crashes: a KV pool larger than the device, an unsupported head
// size; the device stays usable afterwards.
// Logprobs computed on the device (the sampler's normalizer and the top-logprobs kernel) against
// the device's own logits rows, recomputed in double (testing/logprob_check.h): raw and
// processed, greedy and sampled, cascade decode with siblings, CUDA graphs on.
TEST_F(CudaBackendTest, LogprobsOnTheDeviceAreThoseOfItsLogits) {
  for (const bool processed : {false, true}) {
    auto backend = cuda(256);
    ASSERT_NE(backend, nullptr);
    EngineConfig config;
    config.cascade.enabled = true;
    config.cascade.min_shared_tokens = 16;
    config.cascade.pass_overhead_bytes = 0;
    config.processed_logprobs = processed;
    Engine engine(*backend, tokenizer_, config, clock_);
    const std::string shared(96, 'q');
    std::vector<GenerationRequest> requests;
    const float temps[] = {0.0f, 0.7f, 1.1f};
    const int32_t ks[] = {5, 20, 1};
    for (int i = 0; i < 3; ++i) {
      GenerationRequest r;
      r.prompt = tokenizer_.encode(shared + std::to_string(i));
      r.n = 4;
      r.params.temperature = temps[i];
      r.params.top_k = i == 2 ? 40 : 0;
      r.params.max_tokens = 10;
      r.params.seed = 11 + i;
      r.params.ignore_eos = true;
      r.params.logprobs = ks[i];
      requests.push_back(r);
    }
    const testing::LogprobCheck c =
        testing::run_and_check_logprobs(engine, requests, processed, 2e-3);
    EXPECT_EQ(c.tokens, 3 * 4 * 10) << (processed ? "processed" : "raw");
    EXPECT_EQ(c.top_entries, 4 * 10 * (5 + 20 + 1)) << (processed ? "processed" : "raw");
  }
}

// A weight update on the device (Backend::load_weights): the folder's tensors are streamed over
// the old ones, and the model computes exactly what a backend loaded from that folder computes.
// A checkpoint of another shape is refused before anything is written.
TEST_F(CudaBackendTest, LoadWeightsReplacesTheModelInPlace) {
  testing::TempDir tmp;
  const std::string a = tmp.file("a"), b = tmp.file("b"), wide = tmp.file("wide");
  for (const std::string& d : {a, b, wide})
    std::filesystem::create_directories(d);
  ASSERT_TRUE(write_hf_checkpoint(random_weights(*preset_config("tiny"), 3), a).ok());
  ASSERT_TRUE(write_hf_checkpoint(random_weights(*preset_config("tiny"), 4), b).ok());
  ModelConfig other = *preset_config("tiny");
  other.intermediate_size *= 2;
  ASSERT_TRUE(write_hf_checkpoint(random_weights(other, 1), wide).ok());
  CudaBackendOptions o;
  o.num_blocks = 512;
  auto running = CudaBackend::load(a, o);
  ASSERT_TRUE(running.ok()) << running.error().message;
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A. Q: where?", 4, 0, 24));
  reqs.push_back(request(kSystem + "Sampled.", 4, 1.0f, 24, 5));
  const RunOutput before = run(**running, reqs, true, /*keep_logits=*/true);
  const Status refused = (*running)->load_weights(wide);
  EXPECT_NE(refused.message().find("intermediate_size"), std::string::npos) << refused.message();
  EXPECT_TRUE((*running)->weights_intact());
  EXPECT_EQ(run(**running, reqs, true, true).logits, before.logits);  // untouched
  ASSERT_TRUE((*running)->load_weights(b).ok());
  const RunOutput after = run(**running, reqs, true, /*keep_logits=*/true);
  auto fresh = CudaBackend::load(b, o);
  ASSERT_TRUE(fresh.ok()) << fresh.error().message;
  const RunOutput want = run(**fresh, reqs, true, /*keep_logits=*/true);
  EXPECT_EQ(after.tokens, want.tokens);
  EXPECT_EQ(after.logits, want.logits);  // the same bf16 values: the same bits
  EXPECT_NE(after.tokens, before.tokens);
}

// FP8 weights on the device against the CPU backend's FP8 twin (the same E4M3 weights and
// per-token activation quantization, GEMMs in float32), flat and cascade, in all three families:
// the logits agree within 10% relative L2 (seen: up to 7%). The twins differ where the device
// rounds an intermediate to bf16 (GEMM outputs, the attention output) and a value then lands on
// the neighbouring code (a 1/16 step); FP8 against bf16 differs by 14-25%. The weights take about
// half the bytes.
TEST_F(CudaBackendTest, Fp8WeightsMatchTheCpuFp8Twin) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A: the cat sat on the mat. Q: where?", 4, 0, 24));
  reqs.push_back(request("Short prompt with no shared prefix", 1, 0, 24));
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    const ModelWeights w = bf16_weights(family);
    for (bool cascade : {false, true}) {
      SCOPED_TRACE(std::string(model_family_name(family)) + (cascade ? " cascade" : " flat"));
      auto c = cpu(512, 16, w, /*fp8=*/true);
      auto g = cuda(512, 16, false, w, /*fp8=*/true);
      ASSERT_TRUE(g);
      EXPECT_EQ(g->quantization(), "fp8");
      const RunOutput ref = run(*c, reqs, cascade, /*keep_logits=*/true);
      const RunOutput dev = run(*g, reqs, cascade, /*keep_logits=*/true);
      const auto [compared, worst] = expect_logits_close(ref, dev, reqs, 0.1);
      // Rows are compared while the two runs' tokens agree: at least every sequence's first
      // (a near-tie can part them early; seen: 7 to 116 rows).
      EXPECT_GE(compared, 5);
      std::printf(
          "fp8 %s %s: %d logit rows compared with the CPU FP8 twin, worst relative L2 "
          "%.3g\n",
          model_family_name(family), cascade ? "cascade" : "flat", compared, worst);
    }
  }
  auto bf16 = cuda(512);
  auto fp8 = cuda(512, 16, false, weights(), true);
  const size_t bf16_bytes = static_cast<CudaBackend&>(*bf16).memory().weight_bytes;
  const size_t fp8_bytes = static_cast<CudaBackend&>(*fp8).memory().weight_bytes;
  const ModelConfig& c = weights().config;
  const size_t matrices = size_t(c.num_hidden_layers) * c.hidden_size *
                          ((c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim +
                           c.num_attention_heads * c.head_dim + 3 * c.intermediate_size);
  // Scales: one fp32 per output channel and 128-column block of k (kernels/cuda/gemm.h
  // fp8_weight_scales).
  auto blocks = [](size_t k) { return (k + 127) / 128; };
  const size_t h = c.hidden_size, q = size_t(c.num_attention_heads) * c.head_dim,
               kv = size_t(c.num_key_value_heads) * c.head_dim, ff = c.intermediate_size;
  const size_t scales = size_t(c.num_hidden_layers) *
                        ((q + 2 * kv + 2 * ff) * blocks(h) + h * blocks(q) + h * blocks(ff));
  EXPECT_EQ(bf16_bytes - fp8_bytes, matrices - 4 * scales)
      << "a byte per matrix element saved, less 4 per output channel and 128 columns";
}

// FP8 against bf16 on the device (the accuracy cost of the quantization on this random model),
// and cascade against flat under FP8: near-ties only, as in bf16.
TEST_F(CudaBackendTest, Fp8CascadeEqualsFlatAndStaysNearBf16) {
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(
        request(kSystem + kSystem + "Question " + std::to_string(i) + ": why?", 8, 0, 24));
  }
  auto g1 = cuda(2048, 16, false, weights(), true);
  auto g2 = cuda(2048, 16, false, weights(), true);
  auto g3 = cuda(2048);
  ASSERT_TRUE(g1 && g2 && g3);
  const RunOutput flat = run(*g1, reqs, false, /*keep_logits=*/true);
  const RunOutput cascade = run(*g2, reqs, true);
  EXPECT_GT(cascade.levels_kept, 0);
  expect_same_or_near_tie(flat, cascade, reqs, 0.05f);
  const RunOutput bf16 = run(*g3, reqs, false, /*keep_logits=*/true);
  const auto [compared, worst] = expect_logits_close(bf16, flat, reqs, 0.3);
  std::printf("fp8 vs bf16 on the device: %d logit rows, worst relative L2 %.3g\n", compared,
              worst);
}

// --kv-cache-dtype fp8: the device's E4M3 cache (codes staged and widened to fp16 in every
// attention path, written by the fused RoPE + append) against the CPU backend's (E4M3 values in
// float32) in all three families, flat and cascade, bf16 and FP8 weights; cascade == flat
// (near-ties) on the device; a block costs half the bytes.
TEST_F(CudaBackendTest, Fp8KvCacheMatchesTheCpuTwin) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A: the cat sat on the mat. Q: where?", 4, 0, 24));
  reqs.push_back(request("Short prompt with no shared prefix", 1, 0, 24));
  for (ModelFamily family : {ModelFamily::kLlama, ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    const ModelWeights w = bf16_weights(family);
    for (bool fp8_weights : {false, true}) {
      for (bool cascade : {false, true}) {
        SCOPED_TRACE(std::string(model_family_name(family)) + (fp8_weights ? " fp8 weights" : "") +
                     (cascade ? " cascade" : " flat"));
        auto c = cpu(512, 16, w, fp8_weights, /*fp8_kv=*/true);
        auto g = cuda(512, 16, false, w, fp8_weights, /*fp8_kv=*/true);
        ASSERT_TRUE(g);
        EXPECT_EQ(g->kv_cache_dtype(), "fp8");
        EXPECT_EQ(g->kv_bytes_per_element(), 1);
        const RunOutput ref = run(*c, reqs, cascade, /*keep_logits=*/true);
        const RunOutput dev = run(*g, reqs, cascade, /*keep_logits=*/true);
        // The device quantizes the bf16-rounded keys and values, the twin its float32 ones: a code
        // flips here and there, and FP8 weights amplify the flips (seen on the H200: worst 0.043
        // with bf16 weights, 0.114 with FP8 weights).
        const auto [compared, worst] =
            expect_logits_close(ref, dev, reqs, fp8_weights ? 0.15 : 0.1);
        EXPECT_GE(compared, 5);
        std::printf(
            "fp8 KV %s%s %s: %d logit rows compared with the CPU twin, worst relative L2 %.3g\n",
            model_family_name(family), fp8_weights ? " fp8 weights" : "",
            cascade ? "cascade" : "flat", compared, worst);
      }
    }
  }
  // A checkpoint's KV-cache scales (ModelWeights::kv_scales) reach the device's appends and
  // attention as they reach the twin.
  {
    ModelWeights scaled = bf16_weights(ModelFamily::kLlama);
    scaled.kv_scales.k.assign(scaled.config.num_hidden_layers, 1.0f / 64);
    scaled.kv_scales.v.assign(scaled.config.num_hidden_layers, 1.0f / 32);
    for (bool cascade : {false, true}) {
      auto c = cpu(512, 16, scaled, false, true);
      auto g = cuda(512, 16, false, scaled, false, true);
      ASSERT_TRUE(g);
      const RunOutput ref = run(*c, reqs, cascade, /*keep_logits=*/true);
      const RunOutput dev = run(*g, reqs, cascade, /*keep_logits=*/true);
      const auto [compared, worst] = expect_logits_close(ref, dev, reqs, 0.1);
      EXPECT_GE(compared, 5);
      std::printf("fp8 KV, checkpoint scales, %s: %d rows, worst relative L2 %.3g\n",
                  cascade ? "cascade" : "flat", compared, worst);
    }
  }
  std::vector<GenerationRequest> many;
  for (int i = 0; i < 8; ++i) {
    many.push_back(
        request(kSystem + kSystem + "Question " + std::to_string(i) + ": why?", 8, 0, 24));
  }
  auto g1 = cuda(2048, 16, false, weights(), false, true);
  auto g2 = cuda(2048, 16, false, weights(), false, true);
  auto g3 = cuda(2048);
  ASSERT_TRUE(g1 && g2 && g3);
  const RunOutput flat = run(*g1, many, false, /*keep_logits=*/true);
  const RunOutput cascade = run(*g2, many, true);
  EXPECT_GT(cascade.levels_kept, 0);
  expect_same_or_near_tie(flat, cascade, many, 0.05f);
  const RunOutput bf16 = run(*g3, many, false, /*keep_logits=*/true);
  const auto [compared, worst] = expect_logits_close(bf16, flat, many, 0.3);
  std::printf("fp8 KV vs bf16 KV on the device: %d logit rows, worst relative L2 %.3g\n", compared,
              worst);
  EXPECT_EQ(static_cast<CudaBackend&>(*g1).memory().kv_bytes * 2,
            static_cast<CudaBackend&>(*g3).memory().kv_bytes);
}

TEST_F(CudaBackendTest, StartupErrorsAreClearMessages) {
  CudaBackendOptions o;
  o.num_blocks = 1 << 24;  // 16M blocks x 16 KiB: far beyond any GPU
  auto huge = CudaBackend::create(weights().config, &weights(), o);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.error().message.find("KV cache"), std::string::npos) << huge.error().message;

  ModelConfig odd = weights().config;
  odd.num_attention_heads = 8;
  odd.num_key_value_heads = 2;
  odd.head_dim = 32;
  o.num_blocks = 64;
  auto narrow = CudaBackend::create(odd, nullptr, o);
  ASSERT_FALSE(narrow.ok());
  EXPECT_NE(narrow.error().message.find("head_dim 32"), std::string::npos)
      << narrow.error().message;

  ModelConfig uneven = weights().config;
  uneven.intermediate_size = 776;  // a multiple of 8, not of 16
  o.fp8_weights = true;
  auto no_fp8 = CudaBackend::create(uneven, nullptr, o);
  ASSERT_FALSE(no_fp8.ok());
  EXPECT_NE(no_fp8.error().message.find("multiples of 16"), std::string::npos)
      << no_fp8.error().message;
  o.fp8_weights = false;

  o.gpu_memory_utilization = 0.9;
  o.num_blocks = 0;  // sized from free memory
  auto sized = CudaBackend::create(weights().config, &weights(), o);
  ASSERT_TRUE(sized.ok()) << sized.error().message;
  EXPECT_GT((*sized)->num_blocks(), 1000);
}

}  // namespace
}  // namespace kvc
