// Text <-> token ids. The default ByteTokenizer maps each byte to its own token, so the router's
// byte blocks and the replica's token blocks are the same blocks (DESIGN.md, "Block hashing").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvc {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The bytes of one token: possibly empty (EOS, special tokens) or part of a UTF-8 character.
  virtual std::string decode(int32_t token) const = 0;
  virtual int32_t eos_token() const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::string name() const = 0;
};

// Token b (0..255) is the byte b; token 256 is EOS. A model's vocabulary may be larger (the tiny
// preset pads it to 320): tokens above 256 decode to nothing.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEos = 256;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(int32_t token) const override;
  int32_t eos_token() const override { return kEos; }
  int32_t vocab_size() const override { return kEos + 1; }
  std::string name() const override { return "bytes"; }
};

// Appends the bytes of `tokens` to `out` when every token is a byte (0..255), as with the byte
// tokenizer; otherwise returns false and leaves `out` unchanged.
bool tokens_to_bytes(std::span<const int32_t> tokens, std::string& out);

}  // namespace kvc
