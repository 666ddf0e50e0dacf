// Chained block hashing: the one definition of "which prefix is this" shared by router and replica.
//
//   hash(block i) = XXH3_64(le64(parent) || block bytes),  parent of block 0 = chain_seed(model,
//   salt)
//
// With the byte tokenizer one token is one byte, so the router's byte blocks and the replica's
// token blocks are the same blocks and their hashes are equal by construction. With a model's own
// tokenizer the replica publishes the byte blocks its token blocks cover
// (replica/core/byte_space.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace kvc {

// A block's identity: a hash of its content and of every block before it. A distinct type so it
// cannot be mixed up with a physical block id or a token count.
struct BlockHash {
  uint64_t value = 0;
  friend constexpr auto operator<=>(const BlockHash&, const BlockHash&) = default;
};

inline constexpr size_t kDefaultBlockSize = 16;

// The parent of the first block. Different models (or cache salts: tenants that must not share
// KV) give disjoint chains.
BlockHash chain_seed(std::string_view model_name, std::string_view cache_salt = {});

// The hash of one block given its parent's hash.
BlockHash hash_block(BlockHash parent, std::span<const uint8_t> block);

// Hashes of the full blocks of `bytes` (a trailing partial block is not hashed: it can still
// change). Precondition: block_size > 0.
std::vector<BlockHash> hash_blocks(BlockHash seed, std::span<const uint8_t> bytes,
                                   size_t block_size);
std::vector<BlockHash> hash_blocks(BlockHash seed, std::string_view bytes, size_t block_size);

// Streaming form: extends a chain as a sequence grows (the replica hashes while it decodes).
class BlockHasher {
 public:
  // Precondition: block_size > 0.
  BlockHasher(BlockHash seed, size_t block_size);

  // Appends bytes; returns how many blocks were completed by this call (their hashes are the last
  // entries of hashes()).
  size_t append(std::span<const uint8_t> bytes);
  size_t append(std::string_view bytes);
  size_t append_byte(uint8_t byte) { return append(std::span<const uint8_t>(&byte, 1)); }

  const std::vector<BlockHash>& hashes() const { return hashes_; }
  // Hash of the last full block, or the seed when there is none.
  BlockHash tail() const { return hashes_.empty() ? seed_ : hashes_.back(); }
  BlockHash seed() const { return seed_; }
  size_t block_size() const { return block_size_; }
  size_t num_bytes() const { return hashes_.size() * block_size_ + pending_.size(); }
  // Bytes of the partial block not yet hashed.
  std::span<const uint8_t> pending() const { return pending_; }

 private:
  BlockHash seed_;
  size_t block_size_;
  std::vector<BlockHash> hashes_;
  std::vector<uint8_t> pending_;
};

}  // namespace kvc

template <>
struct std::hash<kvc::BlockHash> {
  size_t operator()(const kvc::BlockHash& h) const noexcept {
    // Already a well-mixed 64-bit hash.
    return static_cast<size_t>(h.value);
  }
};
