// Logprobs through the engine on the CPU backend (tiny model, random weights): each generated
// token's logprob and top-k entries against the logits it was drawn from (testing/logprob_check.h),
// raw and processed, greedy and sampled, siblings and cascade; and no top entries unless asked.
#include <gtest/gtest.h>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/core/engine.h"
#include "replica/model/weights.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/logprob_check.h"

namespace kvc {
namespace {

const ModelWeights& tiny() {
  static ModelWeights w = random_weights(*preset_config("tiny"), 42);
  return w;
}

GenerationRequest request(const ByteTokenizer& tok, const std::string& prompt, int32_t n,
                          float temperature, int32_t top_k, int32_t logprobs, uint64_t seed) {
  GenerationRequest r;
  r.prompt = tok.encode(prompt);
  r.n = n;
  r.params.temperature = temperature;
  r.params.top_k = top_k;
  r.params.max_tokens = 12;
  r.params.seed = seed;
  r.params.ignore_eos = true;
  r.params.logprobs = logprobs;
  return r;
}

class EngineLogprobsTest : public ::testing::TestWithParam<bool> {
 protected:
  ByteTokenizer tok_;
  testing::FakeClock clock_;
};

TEST_P(EngineLogprobsTest, EveryTokensLogprobsAreThoseOfItsLogits) {
  const bool processed = GetParam();
  CpuBackend backend(tiny(), 256, 16);
  EngineConfig config;
  config.cascade.enabled = true;
  config.cascade.min_shared_tokens = 16;
  config.cascade.pass_overhead_bytes = 0;
  config.processed_logprobs = processed;
  Engine engine(backend, tok_, config, clock_);
  const std::string shared(80, 'x');
  const std::vector<GenerationRequest> requests = {
      request(tok_, shared + "greedy", 3, 0.0f, 0, 5, 1),
      request(tok_, shared + "sampled", 4, 0.8f, 0, 20, 2),
      request(tok_, shared + "top-k", 2, 1.2f, 30, 3, 3),
      request(tok_, "zero top entries", 1, 1.0f, 0, 0, 4),
  };
  const testing::LogprobCheck c =
      testing::run_and_check_logprobs(engine, requests, processed, 1e-4);
  EXPECT_EQ(c.tokens, (3 + 4 + 2 + 1) * 12);
  EXPECT_EQ(c.top_entries, 12 * (3 * 5 + 4 * 20 + 2 * 3));
}

INSTANTIATE_TEST_SUITE_P(RawAndProcessed, EngineLogprobsTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "processed" : "raw"; });

TEST(EngineLogprobs, NoTopEntriesUnlessAsked) {
  ByteTokenizer tok;
  testing::FakeClock clock;
  CpuBackend backend(tiny(), 64, 16);
  Engine engine(backend, tok, EngineConfig{}, clock);
  ASSERT_TRUE(engine.submit(request(tok, "no logprobs", 2, 1.0f, 0, -1, 5)).ok());
  int tokens = 0;
  while (engine.has_work()) {
    for (const SequenceOutput& o : engine.step().outputs) {
      ASSERT_EQ(o.num_new_tokens, 1);
      EXPECT_TRUE(o.token.top.empty());
      EXPECT_LE(o.token.logprob, 0.0f);  // the token's own logprob is always there
      ++tokens;
    }
  }
  EXPECT_EQ(tokens, 24);
}

}  // namespace
}  // namespace kvc
