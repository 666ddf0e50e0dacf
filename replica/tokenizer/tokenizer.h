// Text <-> token ids. The default ByteTokenizer maps each byte to its own token, so the router's
// byte blocks and the replica's token blocks are the same blocks (DESIGN.md, "Block hashing").
// HfTokenizer (hf_tokenizer.h) is a model's own Hugging Face tokenizer; then the replica maps its
// token blocks back to the prompt bytes they cover to publish KV events (byte_space.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/text_span.h"

namespace kvc {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // As encode, but no added/special token is matched inside the `literal` ranges (sorted,
  // disjoint): they are the client's text in a rendered chat prompt.
  virtual std::vector<int32_t> encode(std::string_view text,
                                      std::span<const TextSpan> literal) const {
    return encode(text);
  }
  // The text of one token for the client: possibly empty (EOS, special tokens) or part of a
  // UTF-8 character.
  virtual std::string decode(int32_t token) const = 0;
  // The bytes a token stands for in the prompt's byte space (the router's key space): decode,
  // except that a special token is its text ("<|eot_id|>"), which is how a chat template writes
  // it. Concatenated over encode(text) this gives `text` back when round_trips().
  virtual std::string token_bytes(int32_t token) const { return decode(token); }
  // token_bytes over encode(text) is text for every text (byte-level BPE; not SentencePiece-style
  // tokenizers that prepend a space).
  virtual bool round_trips() const { return true; }
  // Token t is byte t (t < 256): token blocks are byte blocks, with the same hashes.
  virtual bool tokens_are_bytes() const { return false; }
  virtual int32_t eos_token() const = 0;
  // Tokens that end a sequence (a chat model's end-of-turn as well as the EOS token).
  virtual bool is_eos(int32_t token) const { return token == eos_token(); }
  // Every token is_eos accepts, sorted (/v1/info reports them).
  virtual std::vector<int32_t> eos_tokens() const { return {eos_token()}; }
  virtual int32_t vocab_size() const = 0;
  virtual std::string name() const = 0;
  // Text put around a completion prompt before encoding: the special tokens a tokenizer's
  // post-processor adds (BOS). Chat templates write their own, so chat prompts get none. Routers
  // hash the same bytes (/v1/info publishes them).
  virtual std::string completion_prefix() const { return {}; }
  virtual std::string completion_suffix() const { return {}; }
};

// Token b (0..255) is the byte b; token 256 is EOS. A model's vocabulary may be larger (the tiny
// preset pads it to 320): tokens above 256 decode to nothing.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEos = 256;

  using Tokenizer::encode;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(int32_t token) const override;
  bool tokens_are_bytes() const override { return true; }
  int32_t eos_token() const override { return kEos; }
  int32_t vocab_size() const override { return kEos + 1; }
  std::string name() const override { return "bytes"; }
};

// Appends the bytes of `tokens` to `out` when every token is a byte (0..255), as with the byte
// tokenizer; otherwise returns false and leaves `out` unchanged.
bool tokens_to_bytes(std::span<const int32_t> tokens, std::string& out);

}  // namespace kvc
