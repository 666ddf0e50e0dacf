// The engine on the CUDA backend (tiny preset) against the CPU backend on the same bf16-rounded
// weights, cascade against flat on the device, and preemption on the device. Skipped without a
// GPU (compiled whenever CUDA is).
#include "tests/replica/backend/cuda/cuda_backend_fixture.h"

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
#include "tests/testing/forward_batches.h"
#include "tests/testing/logprob_check.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

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
  const std::vector<GenerationRequest> reqs = twin_requests();
  for (ModelFamily family : {ModelFamily::kQwen2, ModelFamily::kQwen3}) {
    for (bool cascade : {false, true}) {
      SCOPED_TRACE(std::string(model_family_name(family)) + (cascade ? " cascade" : " flat"));
      const auto [compared, worst] = expect_twin_logits(bf16_weights(family), false, false, cascade,
                                                        reqs, 2e-2, model_family_name(family));
      EXPECT_GT(compared, 50);
    }
  }
}

// On the device, greedy cascade decode gives flat decode's tokens (16 prompts x n = 8), except at
// near-ties.
TEST_F(CudaBackendTest, GreedyCascadeEqualsFlat) {
  const std::vector<GenerationRequest> reqs = sibling_requests(16);
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

// The host tier on the device: three documents asked about in turn, then again, on a pool that
// holds two; their blocks come back from pinned host memory (move_blocks), and the tokens are bit
// for bit those of a pool that never evicted (the same prefill kernels over the same KV bytes).
TEST_F(CudaBackendTest, PromptsLoadedFromTheHostTierGiveTheTokensOfAPoolThatKeptThem) {
  std::vector<std::string> prompts;
  for (char d : {'a', 'b', 'c', 'a', 'b', 'c'})
    prompts.push_back(std::string(96, d) + " question " + std::to_string(prompts.size()));
  struct Tiered {
    std::vector<std::vector<int32_t>> tokens;
    int64_t hits = 0, loads = 0, offloads = 0;
  };
  auto run_in_turn = [&](int32_t blocks, double host_gb) {
    CudaBackendOptions o;
    o.num_blocks = blocks;
    o.host_memory_gb = host_gb;
    auto made = CudaBackend::create(weights().config, &weights(), o);
    EXPECT_TRUE(made.ok()) << (made.ok() ? "" : made.error().message);
    Tiered out;
    if (!made.ok()) return out;
    Engine engine(**made, tokenizer_, EngineConfig{}, clock_);
    for (const std::string& p : prompts) {
      EXPECT_TRUE(engine.submit(request(p, 2, 0.8f, 6, 11)).ok());
      while (engine.has_work()) {
        StepResult step = engine.step();
        EXPECT_TRUE(step.error.empty()) << step.error;
        if (!step.error.empty()) return out;
        out.hits += step.stats.prefix_cache_hit_tokens;
        out.loads += step.stats.num_host_loads;
        out.offloads += step.stats.num_host_offloads;
        for (const auto& g : step.finished)
          out.tokens.emplace_back(g->seqs.at(0).tokens.begin() + g->prompt.size(),
                                  g->seqs.at(0).tokens.end());
      }
    }
    return out;
  };
  const Tiered large = run_in_turn(256, 0);
  const Tiered tiered = run_in_turn(16, 0.001);  // 1 MB: tens of the tiny model's blocks
  ASSERT_EQ(large.tokens.size(), prompts.size());
  EXPECT_EQ(tiered.tokens, large.tokens);
  EXPECT_EQ(large.hits, 3 * 96);
  EXPECT_EQ(tiered.hits, 3 * 96);
  EXPECT_GT(tiered.loads, 0);
  EXPECT_GT(tiered.offloads, 0);
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

// The CPU backend's refusals on the device (testing::inconsistent_batches, one case per
// refusal): a step the scheduler got wrong is refused before any upload or launch, and the next
// valid step gives the logits of a backend that never saw the bad ones (several bad prefills
// would have rewritten the prompt's own KV).
TEST_F(CudaBackendTest, InconsistentBatchesAreRefusedBeforeAnythingRuns) {
  constexpr int32_t kBlocks = 24;
  std::mt19937 rng(12);
  std::vector<int32_t> prompt(40);
  for (int32_t& t : prompt)
    t = static_cast<int32_t>(rng() % 256);
  const std::vector<int32_t> table = {4, 9, 2};
  const int32_t u = 'q', vocab = weights().config.vocab_size;
  auto ref = cuda(kBlocks), b = cuda(kBlocks);
  ASSERT_TRUE(ref && b);
  auto logits_of = [](Backend& backend, ForwardBatch step) {
    step.samples.push_back(SampleRequest{.logits_row = 0, .temperature = 0.0f});
    step.return_logits = true;
    ForwardOutput out;
    const Status s = backend.forward(step, out);
    EXPECT_TRUE(s.ok()) << s.message();
    return out.logits;
  };
  ForwardBatch prompt_step;
  prompt_step.prefill.add(testing::chunk(prompt, 0, 40, table, true));
  ForwardBatch decode;
  testing::add_decode(decode.decode, u, 40, table, 16);
  (void)logits_of(*ref, prompt_step);
  (void)logits_of(*b, prompt_step);
  const std::vector<float> want = logits_of(*ref, decode);
  ASSERT_EQ(want.size(), static_cast<size_t>(vocab));

  const auto bad = testing::inconsistent_batches(prompt, table, u, vocab, kBlocks);
  ASSERT_EQ(bad.size(), 17u);
  for (const auto& [what, step] : bad) {
    ForwardOutput out;
    const Status s = b->forward(step, out);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find("forward: invalid batch: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
  EXPECT_LT(rel_l2(logits_of(*b, decode), want), 1e-6);
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
