// The one test whose reference nobody here wrote: tiny checkpoints written by Hugging Face
// transformers (save_pretrained, bf16 safetensors) and transformers' own float32 logits of greedy
// continuations of three prompts (hf_reference/make_hf_reference.py, run on the GPU host; the
// files are committed as it wrote them). Each checkpoint is loaded as `kvcascade --model` loads
// it and run through the engine on the CPU backend (prefill, then decode; n = 2 siblings so the
// cascade path runs too): every logit row agrees with transformers' to a relative error of 1e-4
// and the greedy tokens are transformers' tokens. The classic config layout (rope_theta and
// rope_scaling at the top level, as transformers 4 wrote it) is checked on the same weights.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/backend/cpu/tensor_parallel_backend.h"
#include "replica/core/engine.h"
#include "replica/model/weights.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/temp_dir.h"

#ifndef KVC_HF_REFERENCE_DIR
#error "KVC_HF_REFERENCE_DIR: the folder of the committed transformers checkpoints"
#endif

namespace kvc {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* const kFamilies[] = {"llama3", "llama32", "mistral", "qwen2", "qwen3"};

struct Prompt {
  std::vector<int32_t> tokens, generated;
  std::vector<std::vector<float>> logits;  // the row that chose each generated token
};

std::vector<Prompt> read_reference(const std::string& dir) {
  std::ifstream in(dir + "/reference.json");
  EXPECT_TRUE(in) << dir << "/reference.json";
  const json j = json::parse(in);
  std::vector<Prompt> out;
  for (const json& p : j["prompts"]) {
    out.push_back({p["prompt"].get<std::vector<int32_t>>(),
                   p["generated"].get<std::vector<int32_t>>(),
                   p["logits"].get<std::vector<std::vector<float>>>()});
  }
  return out;
}

double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// A tokenizer of the model's own ids: prompts are given as ids, nothing is decoded.
class IdTokenizer final : public Tokenizer {
 public:
  explicit IdTokenizer(int32_t vocab) : vocab_(vocab) {}
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(int32_t) const override { return {}; }
  bool round_trips() const override { return false; }
  int32_t eos_token() const override { return -1; }
  int32_t vocab_size() const override { return vocab_; }
  std::string name() const override { return "ids"; }

 private:
  int32_t vocab_;
};

// tensor_parallel > 1: the model split over that many ranks (CpuTensorParallelBackend).
void check_family(const std::string& dir, int32_t tensor_parallel = 1) {
  Result<ModelWeights> w = load_hf_weights(dir);
  ASSERT_TRUE(w.ok()) << w.error().message;
  const std::vector<Prompt> prompts = read_reference(dir);
  ASSERT_EQ(prompts.size(), 3u);
  std::unique_ptr<Backend> made;
  if (tensor_parallel > 1) {
    ASSERT_TRUE(check_tensor_parallel(w->config, tensor_parallel).ok());
    made = std::make_unique<CpuTensorParallelBackend>(*w, tensor_parallel, 256, 16);
  } else {
    made = std::make_unique<CpuBackend>(std::move(w).value(), 256, 16);
  }
  Backend& backend = *made;
  IdTokenizer tokenizer(backend.config().vocab_size);
  testing::FakeClock clock;
  EngineConfig config;
  config.cascade.min_shared_tokens = 16;
  config.cascade.pass_overhead_bytes = 0;
  config.scheduler.max_tokens_per_step = 32;  // the long prompts prefill in several chunks
  Engine engine(backend, tokenizer, config, clock);
  // (group, sibling, position) -> logits row
  std::map<std::tuple<uint64_t, int32_t, int32_t>, std::vector<float>> rows;
  engine.set_logits_observer([&](uint64_t g, int32_t s, int32_t pos, std::span<const float> l) {
    rows[{g, s, pos}].assign(l.begin(), l.end());
  });
  std::vector<uint64_t> ids;
  for (const Prompt& p : prompts) {
    GenerationRequest r;
    r.prompt = p.tokens;
    r.n = 2;
    r.params.temperature = 0;
    r.params.max_tokens = static_cast<int32_t>(p.generated.size());
    r.params.ignore_eos = true;
    Result<uint64_t> id = engine.submit(std::move(r));
    ASSERT_TRUE(id.ok()) << id.error().message;
    ids.push_back(*id);
  }
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> generated;
  for (int i = 0; i < 1000 && engine.has_work(); ++i) {
    StepResult s = engine.step();
    ASSERT_TRUE(s.error.empty()) << s.error;
    for (const auto& g : s.finished) {
      for (const Sequence& seq : g->seqs) {
        generated[{g->id, seq.sibling}].assign(
            seq.tokens.begin() + static_cast<int64_t>(g->prompt.size()), seq.tokens.end());
      }
    }
  }
  double worst = 0;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const Prompt& want = prompts[p];
    const int32_t len = static_cast<int32_t>(want.tokens.size());
    for (int32_t sibling = 0; sibling < 2; ++sibling) {
      SCOPED_TRACE("prompt " + std::to_string(p) + " (" + std::to_string(len) +
                   " tokens), sibling " + std::to_string(sibling));
      const std::vector<int32_t>& got = generated[std::pair{ids[p], sibling}];
      EXPECT_EQ(got, want.generated);
      for (size_t i = 0; i < want.generated.size(); ++i) {
        // The row that drew generated token i, keyed by the position that token takes.
        const auto key = std::tuple{ids[p], sibling, len + static_cast<int32_t>(i)};
        auto it = rows.find(key);
        ASSERT_NE(it, rows.end()) << "no logits observed at position " << std::get<2>(key);
        const double e = rel_error(it->second, want.logits[i]);
        worst = std::max(worst, e);
        EXPECT_LE(e, 1e-4) << "generated token " << i;
      }
    }
  }
  ::testing::Test::RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("%s: worst relative error of a logit row %.2e\n", dir.c_str(), worst);
}

TEST(HfReference, EveryFamilyMatchesTransformersOnTheCpuBackend) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const std::string dir = std::string(KVC_HF_REFERENCE_DIR) + "/" + family;
    ASSERT_TRUE(fs::exists(dir + "/model.safetensors")) << dir;
    check_family(dir);
  }
}

// The same checkpoints split over two ranks (each rank its query and KV heads, its intermediate
// columns and LM-head rows; the o and down projections summed over the ranks): transformers'
// logits and tokens still, so the sharding is checked against a reference nobody here wrote.
TEST(HfReference, EveryFamilySplitOverTwoRanksMatchesTransformers) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    check_family(std::string(KVC_HF_REFERENCE_DIR) + "/" + family, /*tensor_parallel=*/2);
  }
}

// The classic layout of the same config (transformers 4's rope_theta / rope_scaling at the top
// level) reads as the same model: same logits.
TEST(HfReference, TheClassicConfigLayoutReadsTheSameModel) {
  for (const char* family : kFamilies) {
    SCOPED_TRACE(family);
    const std::string dir = std::string(KVC_HF_REFERENCE_DIR) + "/" + family;
    testing::TempDir tmp;
    const std::string classic = tmp.file(family);
    fs::create_directories(classic);
    fs::copy_file(dir + "/config.classic.json", classic + "/config.json");
    fs::copy_file(dir + "/model.safetensors", classic + "/model.safetensors");
    fs::copy_file(dir + "/reference.json", classic + "/reference.json");
    check_family(classic);
  }
}

}  // namespace
}  // namespace kvc
