// Byte-space KV events (byte_space.h) and the engine with a tokenizer whose tokens are not bytes.
#include "replica/core/byte_space.h"

#include <gtest/gtest.h>

#include "replica/core/engine.h"
#include "replica/model/model_config.h"
#include "replica/tokenizer/hf_tokenizer.h"
#include "tests/testing/fake_backend.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/reference_files.h"

namespace kvc {
namespace {

BlockHash h(uint64_t v) {
  return BlockHash{v};
}

TEST(ByteSpaceEvents, PublishesByteBlocksWhileAnOwningTokenBlockIsCached) {
  ByteSpaceEvents e;
  e.own(h(101), std::nullopt, {h(1), h(2)});
  e.own(h(102), h(2), {h(3)});
  EXPECT_EQ(e.translate({KvStored{std::nullopt, {h(101), h(102)}}}),
            (std::vector<KvEvent>{KvStored{std::nullopt, {h(1), h(2)}}, KvStored{h(2), {h(3)}}}));
  // Another token chain covering the first byte block again (a different tokenization of the
  // same bytes) publishes only what is new.
  e.own(h(201), std::nullopt, {h(1), h(7)});
  EXPECT_EQ(e.translate({KvStored{std::nullopt, {h(201)}}}),
            (std::vector<KvEvent>{KvStored{h(1), {h(7)}}}));
  EXPECT_EQ(e.num_byte_blocks(), 4u);
  // Removing a token block removes the byte blocks no other cached token block owns.
  EXPECT_EQ(e.translate({KvRemoved{{h(102), h(101)}}}),
            (std::vector<KvEvent>{KvRemoved{{h(3), h(2)}}}));
  EXPECT_EQ(e.snapshot({KvStored{std::nullopt, {h(201)}}}),
            (std::vector<KvEvent>{KvStored{std::nullopt, {h(1), h(7)}}}));
  EXPECT_EQ(e.translate({KvCleared{}}), (std::vector<KvEvent>{KvCleared{}}));
  EXPECT_EQ(e.num_byte_blocks(), 0u);
}

// A toy tokenizer whose tokens are pieces of one 4-byte character (U+1F44D) and "a": streaming
// must never cut the character.
class SplitCharTokenizer final : public Tokenizer {
 public:
  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text) const override {
    return std::vector<int32_t>(text.size(), 3);
  }
  std::string decode(int32_t t) const override {
    static const char* pieces[] = {"\xF0\x9F", "\x91", "\x8D", "a"};
    return t >= 0 && t < 4 ? pieces[t] : "";
  }
  int32_t eos_token() const override { return 4; }
  int32_t vocab_size() const override { return 5; }
  std::string name() const override { return "split-char"; }
};

ModelConfig fake_config(int32_t vocab) {
  ModelConfig c = *preset_config("tiny");
  c.vocab_size = vocab;
  return c;
}

// A partial character (lead byte plus fewer continuation bytes than it needs) is held back
// until the token that completes it.
TEST(EngineStreaming, NeverEmitsHalfACharacter) {
  SplitCharTokenizer tok;
  testing::FakeBackend backend(fake_config(5), 64, 16);
  testing::FakeClock clock;
  Engine engine(backend, tok, EngineConfig{}, clock);
  GenerationRequest r;
  r.prompt = tok.encode("aaaa");
  r.n = 8;
  r.params.max_tokens = 64;
  r.params.ignore_eos = true;
  r.params.seed = 3;
  r.params.temperature = 1.0f;
  ASSERT_TRUE(engine.submit(std::move(r)).ok());
  std::map<int32_t, std::string> streamed;
  std::map<int32_t, std::vector<size_t>> cuts;  // where each sibling's deltas ended
  while (engine.has_work()) {
    for (const SequenceOutput& o : engine.step().outputs) {
      streamed[o.sibling] += o.text_delta;
      cuts[o.sibling].push_back(streamed[o.sibling].size());
    }
  }
  int32_t cut_checked = 0;
  for (const auto& [sibling, text] : streamed) {
    for (size_t cut : cuts[sibling]) {
      // No whole character of the final text straddles a cut.
      for (size_t k = 1; k <= 3 && k <= cut; ++k) {
        if (text.compare(cut - k, 4, "\xF0\x9F\x91\x8D") == 0)
          ADD_FAILURE() << "sibling " << sibling << " cut inside a character at " << cut;
      }
      ++cut_checked;
    }
  }
  EXPECT_GT(cut_checked, 100);
  bool whole = false;
  for (const auto& [sibling, s] : streamed)
    whole = whole || s.find("\xF0\x9F\x91\x8D") != std::string::npos;
  EXPECT_TRUE(whole) << "no sibling drew the whole character: the test proves nothing";
}

class Llama3Engine : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::llama3_tokenizer_dir();
    if (dir.empty()) GTEST_SKIP() << testing::kMissingLlama3;
    static std::unique_ptr<HfTokenizer> loaded = std::move(HfTokenizer::load_dir(dir)).value();
    tok_ = loaded.get();
    backend_ = std::make_unique<testing::FakeBackend>(fake_config(tok_->vocab_size()), 256, 16);
    engine_ = std::make_unique<Engine>(*backend_, *tok_, EngineConfig{}, clock_);
  }

  // Runs one request to its end; returns its prefix-cache hit in tokens.
  int32_t run(const std::string& prompt) {
    GenerationRequest r;
    r.prompt = tok_->encode(prompt);
    r.params.max_tokens = 2;
    r.params.ignore_eos = true;
    EXPECT_TRUE(engine_->submit(std::move(r)).ok());
    int32_t hit = 0;
    while (engine_->has_work())
      for (auto& g : engine_->step().finished)
        hit = g->num_cached_prompt_tokens;
    return hit;
  }

  const HfTokenizer* tok_ = nullptr;
  testing::FakeClock clock_;
  std::unique_ptr<testing::FakeBackend> backend_;
  std::unique_ptr<Engine> engine_;
};

const std::string kDocument =
    "The replica keeps a prefix cache of KV blocks keyed by token ids, while the router hashes "
    "prompt bytes. Both must agree on which blocks a replica holds: the replica maps each cached "
    "token block to the bytes it covers and publishes the byte blocks wholly covered. Tokens are "
    "longer than bytes, so a block of sixteen tokens covers some sixty bytes of English prose, "
    "and the router sees several byte blocks per token block. A longer text can tokenize its "
    "last word differently, which bounds the error to one pre-token.";

// The published byte blocks are the router's hashes of the prompt's leading bytes: exactly the
// byte blocks that the committed token blocks cover.
TEST_F(Llama3Engine, KvEventsAreTheRoutersByteBlocksOfTheCoveredPrompt) {
  run(kDocument);
  std::vector<BlockHash> published;
  for (const KvEvent& e : engine_->take_kv_events())
    if (const auto* s = std::get_if<KvStored>(&e))
      published.insert(published.end(), s->hashes.begin(), s->hashes.end());
  const std::vector<int32_t> tokens = tok_->encode(kDocument);
  // The prompt's full token blocks are committed (the generated token's KV is not computed
  // when max_tokens is reached).
  const size_t token_blocks = (tokens.size() + 1) / 16;
  std::string covered;
  for (size_t i = 0; i < token_blocks * 16; ++i)
    covered += tok_->token_bytes(tokens[i]);
  const std::vector<BlockHash> router = hash_blocks(engine_->chain_seed(""), covered, 16);
  ASSERT_GT(router.size(), 10u);
  EXPECT_EQ(published, router);
  // A new subscriber's snapshot says the same.
  std::vector<BlockHash> snap;
  for (const KvEvent& e : engine_->kv_snapshot())
    if (const auto* s = std::get_if<KvStored>(&e))
      snap.insert(snap.end(), s->hashes.begin(), s->hashes.end());
  EXPECT_EQ(snap, router);
}

// A submitted prompt is announced at once (KvQueued) as the router's byte blocks of its text;
// a later prompt extending a cached one, as the blocks past the last published one.
TEST_F(Llama3Engine, SubmittedPromptsAreQueuedEventsInTheRoutersByteBlocks) {
  GenerationRequest r;
  r.prompt = tok_->encode(kDocument);
  r.params.max_tokens = 2;
  ASSERT_TRUE(engine_->submit(r).ok());
  const std::vector<BlockHash> all = hash_blocks(engine_->chain_seed(""), kDocument, 16);
  std::vector<KvEvent> events = engine_->take_kv_events();
  ASSERT_EQ(events.size(), 2u);  // the queued blocks, then the work (KvWork), in any key space
  ASSERT_TRUE(std::holds_alternative<KvWork>(events[1]));
  ASSERT_TRUE(std::holds_alternative<KvQueued>(events[0]));
  EXPECT_EQ(std::get<KvQueued>(events[0]), (KvQueued{std::nullopt, all}));
  while (engine_->has_work())
    engine_->step();
  std::vector<BlockHash> published;
  for (const KvEvent& e : engine_->take_kv_events())
    if (const auto* st = std::get_if<KvStored>(&e))
      published.insert(published.end(), st->hashes.begin(), st->hashes.end());
  ASSERT_FALSE(published.empty());

  const std::string longer = kDocument + " And a question about it, with more words in it.";
  r.prompt = tok_->encode(longer);
  ASSERT_TRUE(engine_->submit(r).ok());
  events = engine_->take_kv_events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<KvWork>(events[1]));
  const auto& q = std::get<KvQueued>(events[0]);
  const std::vector<BlockHash> want = hash_blocks(engine_->chain_seed(""), longer, 16);
  EXPECT_EQ(q.parent, published.back());
  EXPECT_EQ(q.hashes,
            std::vector<BlockHash>(want.begin() + static_cast<std::ptrdiff_t>(published.size()),
                                   want.end()));
}

// A second prompt sharing a long byte prefix reuses the cached tokens up to the last pre-token
// before the divergence, rounded down to a block.
TEST_F(Llama3Engine, SharedBytePrefixHitsWithinOnePreTokenAndABlock) {
  run(kDocument);
  const size_t shared_bytes = kDocument.find("bounds the error");
  const std::string shared = kDocument.substr(0, shared_bytes);
  const int32_t hit = run(shared + "changes nothing at all, we hope.");
  const int32_t shared_tokens = static_cast<int32_t>(tok_->encode(shared).size());
  const int32_t last_pre_token = static_cast<int32_t>(tok_->encode(" bounds").size());
  EXPECT_LE(hit, shared_tokens);
  EXPECT_GE(hit, (shared_tokens - last_pre_token) / 16 * 16);
}

TEST_F(Llama3Engine, SpecialTokensInThePromptAreFineAndEndOfTextStops) {
  GenerationRequest r;
  r.prompt = tok_->encode("<|begin_of_text|>hi<|eot_id|>");
  r.params.max_tokens = 1;
  EXPECT_TRUE(engine_->submit(std::move(r)).ok());
  GenerationRequest bad;
  bad.prompt = {tok_->vocab_size()};
  EXPECT_FALSE(engine_->submit(std::move(bad)).ok());
  EXPECT_TRUE(tok_->is_eos(128001));
}

}  // namespace
}  // namespace kvc
