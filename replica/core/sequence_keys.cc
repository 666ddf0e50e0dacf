#include "replica/core/sequence_keys.h"

#include <span>

namespace kvc {
namespace {

// A token id's entry in a token-id chain: 4 bytes little-endian.
void append_token_key(BlockHasher& hasher, int32_t token) {
  const auto u = static_cast<uint32_t>(token);
  const uint8_t bytes[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8),
                            static_cast<uint8_t>(u >> 16), static_cast<uint8_t>(u >> 24)};
  hasher.append(std::span<const uint8_t>(bytes, 4));
}

}  // namespace

SequenceKeys::SequenceKeys(KeySpace space, int32_t block_size, BlockHash byte_seed,
                           BlockHash token_seed)
    : space_(space),
      cache_(space == KeySpace::kBytes ? byte_seed : token_seed,
             static_cast<size_t>(space == KeySpace::kBytes ? block_size : 4 * block_size)) {
  if (space == KeySpace::kTokenIds) bytes_.emplace(byte_seed, static_cast<size_t>(block_size));
}

void SequenceKeys::append_token(int32_t token, const std::string& bytes) {
  if (space_ == KeySpace::kBytes) {
    if (token < 0 || token >= 256) chain_ended_ = true;
    if (!chain_ended_) cache_.append_byte(static_cast<uint8_t>(token));
    return;
  }
  append_token_key(cache_, token);
  if (!bytes_) return;
  bytes_->append(bytes);
  byte_ends_.push_back(static_cast<uint32_t>(bytes_->num_bytes()));
}

}  // namespace kvc
