#include "prefix_index/block_hash.h"

#include <cassert>
#include <cstring>

// Inlined xxHash: the per-block inputs are short (24-80 bytes), where call overhead matters.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvc {
namespace {

constexpr size_t kStackBlock = 256;

void put_le64(uint8_t* out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

BlockHash chain_seed(std::string_view model_name, std::string_view cache_salt) {
  // Domain-separated so a salt cannot be confused with a model-name suffix.
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  static constexpr char kTag[] = "kvcascade/v1";
  XXH3_64bits_update(&state, kTag, sizeof(kTag));
  uint8_t len[8];
  put_le64(len, model_name.size());
  XXH3_64bits_update(&state, len, 8);
  XXH3_64bits_update(&state, model_name.data(), model_name.size());
  put_le64(len, cache_salt.size());
  XXH3_64bits_update(&state, len, 8);
  XXH3_64bits_update(&state, cache_salt.data(), cache_salt.size());
  return BlockHash{XXH3_64bits_digest(&state)};
}

BlockHash hash_block(BlockHash parent, std::span<const uint8_t> block) {
  if (block.size() <= kStackBlock) {
    uint8_t buf[8 + kStackBlock];
    put_le64(buf, parent.value);
    std::memcpy(buf + 8, block.data(), block.size());
    return BlockHash{XXH3_64bits(buf, 8 + block.size())};
  }
  XXH3_state_t state;
  XXH3_64bits_reset(&state);
  uint8_t le[8];
  put_le64(le, parent.value);
  XXH3_64bits_update(&state, le, 8);
  XXH3_64bits_update(&state, block.data(), block.size());
  return BlockHash{XXH3_64bits_digest(&state)};
}

namespace {

// The common block sizes get a fixed-size copy the compiler inlines (no memcpy call per block).
// Appends to `out` (reserved by the caller: no zero-fill of a long prompt's hashes first).
template <size_t kBlock>
void hash_fixed(BlockHash parent, const uint8_t* bytes, size_t n, std::vector<BlockHash>& out) {
  uint8_t buf[8 + kBlock];
  for (size_t i = 0; i < n; ++i) {
    put_le64(buf, parent.value);
    std::memcpy(buf + 8, bytes + i * kBlock, kBlock);
    parent = BlockHash{XXH3_64bits(buf, sizeof buf)};
    out.push_back(parent);
  }
}

}  // namespace

std::vector<BlockHash> hash_blocks(BlockHash seed, std::span<const uint8_t> bytes,
                                   size_t block_size) {
  assert(block_size > 0);
  const size_t n = bytes.size() / block_size;
  std::vector<BlockHash> out;
  out.reserve(n);
  switch (block_size) {
    case 16:
      hash_fixed<16>(seed, bytes.data(), n, out);
      return out;
    case 32:
      hash_fixed<32>(seed, bytes.data(), n, out);
      return out;
    case 64:
      hash_fixed<64>(seed, bytes.data(), n, out);
      return out;
    default:
      break;
  }
  BlockHash parent = seed;
  for (size_t i = 0; i < n; ++i) {
    parent = hash_block(parent, bytes.subspan(i * block_size, block_size));
    out.push_back(parent);
  }
  return out;
}

std::vector<BlockHash> hash_blocks(BlockHash seed, std::string_view bytes, size_t block_size) {
  return hash_blocks(seed, std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
                     block_size);
}

BlockHasher::BlockHasher(BlockHash seed, size_t block_size) : seed_(seed), block_size_(block_size) {
  assert(block_size > 0);
  pending_.reserve(block_size);
}

size_t BlockHasher::append(std::span<const uint8_t> bytes) {
  size_t completed = 0;
  while (!bytes.empty()) {
    if (pending_.empty() && bytes.size() >= block_size_) {
      // Fast path: whole blocks straight from the input.
      hashes_.push_back(hash_block(tail(), bytes.first(block_size_)));
      bytes = bytes.subspan(block_size_);
      ++completed;
      continue;
    }
    const size_t take = std::min(block_size_ - pending_.size(), bytes.size());
    pending_.insert(pending_.end(), bytes.begin(), bytes.begin() + take);
    bytes = bytes.subspan(take);
    if (pending_.size() == block_size_) {
      hashes_.push_back(hash_block(tail(), pending_));
      pending_.clear();
      ++completed;
    }
  }
  return completed;
}

size_t BlockHasher::append(std::string_view bytes) {
  return append(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

}  // namespace kvc
