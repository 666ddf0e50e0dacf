// The "BPE" model of a Hugging Face tokenizer.json: a vocabulary of byte strings, merges with
// ranks (lower merges first), optional byte fallback (<0x41>) and unknown token. Encodes one
// pre-token at a time; results for pre-tokens that need merging are cached (text repeats its
// words), so English prose costs mostly one hash lookup per word. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kvc {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenVocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  struct Options {
    // Symbols start as bytes (GPT-2 byte-level BPE) rather than UTF-8 characters.
    bool byte_level = false;
    // A pre-token that is itself in the vocabulary is that token, merges or not (Llama 3).
    bool ignore_merges = false;
    // A character missing from the vocabulary becomes its bytes' <0xNN> tokens.
    bool byte_fallback = false;
    std::optional<int32_t> unk;
  };

  // vocab: token bytes -> id (byte-level alphabet already mapped back to bytes). merges: pairs of
  // token bytes, highest priority first. The error names the first merge that is not in the
  // vocabulary.
  static Result<BpeModel> create(TokenVocab vocab,
                                 const std::vector<std::pair<std::string, std::string>>& merges,
                                 Options options);
  BpeModel(BpeModel&& other) noexcept;

  // Appends the ids of one pre-token.
  void encode(std::string_view piece, std::vector<int32_t>& out) const;
  const TokenVocab& vocab() const { return vocab_; }

 private:
  BpeModel() = default;
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge(std::vector<int32_t>& symbols) const;

  TokenVocab vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  Options options_;
  int32_t byte_ids_[256];      // byte-level: the token of each single byte (-1: none)
  int32_t fallback_ids_[256];  // byte fallback: the <0xNN> token of each byte (-1: none)
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace kvc
