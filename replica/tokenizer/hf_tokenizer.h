// A model's own tokenizer, read from a Hugging Face "fast" tokenizer.json (and, next to it,
// tokenizer_config.json for the chat template, BOS and EOS; generation_config.json for the
// end-of-turn ids). Supported: the BPE model (byte-level as Llama 3 / GPT-2 / Qwen, or
// character-level with byte fallback as Llama 2 / Mistral), normalizers Prepend / Replace /
// Sequence, pre-tokenizers Split (regex, Isolated) / ByteLevel / Metaspace / Sequence, added and
// special tokens. Anything else is refused at load with the field named.
//
// Encoding follows Hugging Face's order: added tokens are matched in the raw text first (longest
// first), the text between them is normalized, split into pre-tokens, and each pre-token is
// BPE-encoded. Bytes that are not valid UTF-8 are pre-tokens of their own (one byte each), so any
// byte string encodes and a byte-level tokenizer gives it back exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "replica/tokenizer/bpe_model.h"
#include "replica/tokenizer/tokenizer.h"
#include "replica/tokenizer/unicode_regex.h"

namespace kvc {

// What tokenizer_config.json says about chat prompts.
struct ChatTemplateConfig {
  std::string chat_template;         // Jinja source; empty: the model has none
  std::string bos_token, eos_token;  // their text, as templates write them
};

class HfTokenizer final : public Tokenizer {
 public:
  // dir holds tokenizer.json (and optionally tokenizer_config.json, generation_config.json).
  static Result<std::unique_ptr<HfTokenizer>> load_dir(const std::string& dir);
  // From the files' contents; config_json and generation_json may be empty.
  static Result<std::unique_ptr<HfTokenizer>> from_json(std::string_view tokenizer_json,
                                                        std::string_view config_json = {},
                                                        std::string_view generation_json = {});
  ~HfTokenizer() override;

  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::vector<int32_t> encode(std::string_view text,
                              std::span<const TextSpan> literal) const override;
  std::string decode(int32_t token) const override;
  std::string token_bytes(int32_t token) const override;
  bool round_trips() const override { return round_trips_; }
  int32_t eos_token() const override { return eos_; }
  bool is_eos(int32_t token) const override;
  std::vector<int32_t> eos_tokens() const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(pieces_.size()); }
  std::string name() const override { return name_; }
  std::string completion_prefix() const override { return completion_prefix_; }
  std::string completion_suffix() const override { return completion_suffix_; }

  // The token as written in tokenizer.json ("Ġthe", "<|eot_id|>"); empty for an unused id.
  const std::string& piece(int32_t token) const;
  std::optional<int32_t> token_id(std::string_view piece) const;
  bool is_special(int32_t token) const;
  const ChatTemplateConfig& chat() const { return chat_; }
  // A whole sequence's text as Hugging Face's decode gives it: the tokens' bytes, less the
  // leading spaces the decoder's Strip step takes (SentencePiece-style tokenizers such as Llama
  // 2's: "▁Hello" decodes to "Hello" at the start). Special tokens included.
  std::string decode_sequence(std::span<const int32_t> ids) const;

 private:
  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
  };
  struct Step;  // one normalizer or pre-tokenizer step
  HfTokenizer();
  void encode_segment(std::string_view text, std::vector<int32_t>& out) const;
  void pre_tokenize(size_t step, std::string_view piece, std::vector<int32_t>& out) const;
  // The added token matching at text[at], if any (longest first).
  const Added* added_at(std::string_view text, size_t at) const;

  std::string name_;
  std::optional<BpeModel> model_;
  std::vector<Step> normalizers_, pre_tokenizers_;
  std::vector<Added> added_;  // longest content first
  bool added_first_byte_[256] = {};
  std::vector<std::string> pieces_, bytes_;  // by id: as written; bytes for token_bytes
  std::vector<bool> special_;
  int32_t eos_ = -1;
  std::vector<int32_t> eos_ids_;
  bool round_trips_ = true;
  int32_t decode_strip_start_ = 0;  // tokenizer.json decoder's Strip of " ": leading ones
  std::string completion_prefix_, completion_suffix_;  // the post-processor's special tokens
  ChatTemplateConfig chat_;
};

}  // namespace kvc
