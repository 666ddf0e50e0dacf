// A sequence's prefix-cache keys, in its replica's key space (api/key_space.h): the one hasher a
// sequence carries, whatever the tokenizer.
//  - kBytes: one chain over the tokens as bytes, in router key space; a token that is no byte
//    ends it (chain_ended: later blocks stay private).
//  - kTokenIds: a chain over the token ids (4 bytes each: the chain's block is 4 x the token
//    block) seeded apart from the byte chains, and a second chain over the bytes the tokens stand
//    for, in router blocks, with where each token's bytes end (byte_space.h turns the cached token
//    blocks into the byte blocks they cover).
//  - kPrivateTokenIds: the token-id chain alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/key_space.h"
#include "prefix_index/block_hash.h"

namespace kvc {

class SequenceKeys {
 public:
  // byte_seed: chain_seed(model, cache_salt), the router's; token_seed: the replica's own seed of
  // token-id chains (read unless kBytes). block_size: tokens per KV block.
  SequenceKeys(KeySpace space, int32_t block_size, BlockHash byte_seed, BlockHash token_seed);

  KeySpace space() const { return space_; }
  // Appends one token; bytes_of(token) gives the bytes it stands for (asked only in kTokenIds).
  template <typename BytesOf>
  void append(int32_t token, const BytesOf& bytes_of) {
    if (space_ == KeySpace::kTokenIds) {
      append_token(token, bytes_of(token));
    } else {
      append_token(token, {});
    }
  }
  // The byte tokenizer's tokens (kBytes), or a test's: no bytes to ask for.
  void append(int32_t token) { append_token(token, {}); }

  // The prefix cache's keys: one per full block.
  const std::vector<BlockHash>& hashes() const { return cache_.hashes(); }
  // A token that is no byte ended a kBytes chain: blocks from there on have no key.
  bool chain_ended() const { return chain_ended_; }

  // kTokenIds only: the router byte blocks the tokens so far cover, and the bytes of tokens
  // [0, token].
  bool has_byte_space() const { return bytes_.has_value(); }
  const std::vector<BlockHash>& byte_hashes() const { return bytes_->hashes(); }
  size_t byte_end(size_t token) const { return byte_ends_[token]; }

 private:
  void append_token(int32_t token, const std::string& bytes);

  KeySpace space_;
  BlockHasher cache_;
  bool chain_ended_ = false;
  std::optional<BlockHasher> bytes_;
  std::vector<uint32_t> byte_ends_;
};

}  // namespace kvc
