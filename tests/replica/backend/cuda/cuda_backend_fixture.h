// The CUDA backend tests' fixture: backends on the tiny preset's bf16-rounded weights (CPU twin and
// device), an engine run that records tokens, logits and logit gaps, and the comparisons the tests
// make of two runs. Shared by cuda_backend_test.cc and cuda_fp8_test.cc.
#pragma once

#include "replica/backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/device.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/core/engine.h"
#include "replica/model/weights.h"
#include "replica/tokenizer/tokenizer.h"
#include "tests/testing/fake_clock.h"

namespace kvc {

using Key = std::tuple<uint64_t, int32_t, int32_t>;  // group, sibling, position

struct RunOutput {
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> tokens;
  std::map<Key, std::vector<float>> logits;
  std::map<Key, float> gaps;  // best minus second-best logit
  int64_t preemptions = 0;
  int levels_kept = 0;
};

// Every tensor of `w` rounded to bf16, as the device stores it.
inline void round_to_bf16(ModelWeights& w) {
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
}

// The tiny preset's weights in `family` (Qwen2: q/k/v biases, Qwen3: q/k norms, scaled off 1 so
// that they change the output), rounded to bf16 as the device stores them.
inline ModelWeights bf16_weights(ModelFamily family = ModelFamily::kLlama) {
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
  round_to_bf16(w);
  return w;
}

inline const ModelWeights& weights() {
  static const ModelWeights w = bf16_weights();
  return w;
}

inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A system prompt the tests' requests share (a cascade prefix).
inline const std::string kSystem =
    "You are a helpful assistant. Answer briefly and cite the document when you can. ";

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

  // Two groups, one of them 4 siblings after kSystem: the twin comparisons' requests.
  std::vector<GenerationRequest> twin_requests() {
    return {request(kSystem + "Document A: the cat sat on the mat. Q: where?", 4, 0, 24),
            request("Short prompt with no shared prefix", 1, 0, 24)};
  }
  // `prompts` questions after a doubled kSystem, 8 siblings each: cascade against flat.
  std::vector<GenerationRequest> sibling_requests(int prompts) {
    std::vector<GenerationRequest> reqs;
    for (int i = 0; i < prompts; ++i) {
      reqs.push_back(
          request(kSystem + kSystem + "Question " + std::to_string(i) + ": why?", 8, 0, 24));
    }
    return reqs;
  }
  // The CUDA backend against the CPU backend on `w` (twins under the same quantization),
  // greedy, flat or cascade: logits within `tol` while the two runs' tokens agree (see
  // expect_logits_close). Prints `what` with the rows compared and the worst error.
  std::pair<int, double> expect_twin_logits(const ModelWeights& w, bool fp8_weights, bool fp8_kv,
                                            bool cascade,
                                            const std::vector<GenerationRequest>& reqs, double tol,
                                            const std::string& what) {
    auto c = cpu(512, 16, w, fp8_weights, fp8_kv);
    auto g = cuda(512, 16, false, w, fp8_weights, fp8_kv);
    if (!g) return {0, 0.0};
    const RunOutput ref = run(*c, reqs, cascade, /*keep_logits=*/true);
    const RunOutput dev = run(*g, reqs, cascade, /*keep_logits=*/true);
    const auto result = expect_logits_close(ref, dev, reqs, tol);
    std::printf("%s %s: %d logit rows compared with the CPU twin, worst relative L2 %.3g\n",
                what.c_str(), cascade ? "cascade" : "flat", result.first, result.second);
    return result;
  }
  // On the device under the given quantization: greedy cascade gives flat's tokens except at
  // near-ties, and flat's logits stay within `tol` of bf16's (printed as `what`).
  void expect_cascade_flat_and_near_bf16(bool fp8_weights, bool fp8_kv, double tol,
                                         const std::string& what) {
    const std::vector<GenerationRequest> reqs = sibling_requests(8);
    auto g1 = cuda(2048, 16, false, weights(), fp8_weights, fp8_kv);
    auto g2 = cuda(2048, 16, false, weights(), fp8_weights, fp8_kv);
    auto g3 = cuda(2048);
    ASSERT_TRUE(g1 && g2 && g3);
    const RunOutput flat = run(*g1, reqs, false, /*keep_logits=*/true);
    const RunOutput cascade = run(*g2, reqs, true);
    EXPECT_GT(cascade.levels_kept, 0);
    expect_same_or_near_tie(flat, cascade, reqs, 0.05f);
    const RunOutput bf16 = run(*g3, reqs, false, /*keep_logits=*/true);
    const auto [compared, worst] = expect_logits_close(bf16, flat, reqs, tol);
    std::printf("%s vs bf16 on the device: %d logit rows, worst relative L2 %.3g\n", what.c_str(),
                compared, worst);
  }

  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
};

}  // namespace kvc
