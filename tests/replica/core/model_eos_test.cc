// The model's own end ids (config.json / generation_config.json eos_token_id: Llama 3 Instruct
// ends on any of three) end a sequence like the tokenizer's EOS, with finish reason "stop"; with
// ignore_eos they do not. With the byte tokenizer they are not applied: its ids are bytes.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "replica/core/engine.h"
#include "replica/model/model_config.h"
#include "tests/testing/fake_backend.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

// A tokenizer of a model's own vocabulary (not bytes): token t is the text "<t>"; EOS is 299.
class IdTokenizer final : public Tokenizer {
 public:
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text)
      ids.push_back(c % 250);
    return ids;
  }
  std::string decode(int32_t token) const override {
    return std::string("<").append(std::to_string(token)).append(">");
  }
  bool round_trips() const override { return false; }
  int32_t eos_token() const override { return 299; }
  int32_t vocab_size() const override { return 300; }
  std::string name() const override { return "ids"; }
};

ModelConfig model(std::vector<int32_t> eos) {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = 300;
  c.eos_token_ids = std::move(eos);
  return c;
}

// What ended the last run() (its Sequence::stop_reason).
StopReason last_stop_reason;

// The generated tokens and finish reason of one sample (greedy) of `prompt`.
std::pair<std::vector<int32_t>, FinishReason> run(const Tokenizer& tokenizer,
                                                  std::vector<int32_t> eos, bool ignore_eos) {
  testing::FakeBackend backend(model(std::move(eos)), 64, 16);
  testing::FakeClock clock;
  Engine engine(backend, tokenizer, EngineConfig{}, clock);
  GenerationRequest r;
  r.prompt = tokenizer.encode("an ordinary prompt");
  r.params.temperature = 0;
  r.params.max_tokens = 8;
  r.params.ignore_eos = ignore_eos;
  EXPECT_TRUE(engine.submit(std::move(r)).ok());
  for (int i = 0; i < 100 && engine.has_work(); ++i) {
    StepResult s = engine.step();
    for (const auto& g : s.finished) {
      const Sequence& seq = g->seqs[0];
      last_stop_reason = seq.stop_reason;
      return {std::vector<int32_t>(seq.tokens.begin() + static_cast<int64_t>(g->prompt.size()),
                                   seq.tokens.end()),
              seq.finish};
    }
  }
  ADD_FAILURE() << "the group never finished";
  return {};
}

TEST(ModelEos, TheModelsEndIdsStopASequence) {
  IdTokenizer tokenizer;
  const auto [free_run, free_finish] = run(tokenizer, {}, /*ignore_eos=*/false);
  ASSERT_EQ(free_run.size(), 8u);
  EXPECT_EQ(free_finish, FinishReason::kLength);
  // The third token the model draws is one of its end ids: it ends the sequence there, "stop",
  // and is not part of the output.
  const int32_t end_id = free_run[2];
  ASSERT_EQ(std::find(free_run.begin(), free_run.begin() + 2, end_id), free_run.begin() + 2)
      << "the fake model repeated a token early: pick another prompt";
  const auto [stopped, stop_finish] = run(tokenizer, {123456, end_id}, false);
  EXPECT_EQ(stopped, std::vector<int32_t>(free_run.begin(), free_run.begin() + 2));
  EXPECT_EQ(stop_finish, FinishReason::kStop);
  // vLLM adds the model's end ids to the stop tokens: stop_reason names the id.
  EXPECT_EQ(last_stop_reason.token, end_id);
  // ignore_eos runs through it.
  const auto [ignored, ignored_finish] = run(tokenizer, {end_id}, /*ignore_eos=*/true);
  EXPECT_EQ(ignored, free_run);
  EXPECT_EQ(ignored_finish, FinishReason::kLength);
}

TEST(ModelEos, TheByteTokenizerIgnoresThem) {
  ByteTokenizer bytes;
  const auto [free_run, free_finish] = run(bytes, {}, false);
  ASSERT_FALSE(free_run.empty());
  const auto [with_ids, finish] = run(bytes, {free_run[0]}, false);
  EXPECT_EQ(with_ids, free_run);
  EXPECT_EQ(finish, free_finish);
}

}  // namespace
}  // namespace kvc
