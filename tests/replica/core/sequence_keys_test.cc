// A sequence's one hasher in each key space (api/key_space.h).
#include "replica/core/sequence_keys.h"

#include <string>

#include <gtest/gtest.h>

namespace kvc {
namespace {

constexpr int32_t kBlock = 4;

TEST(SequenceKeys, BytesAreTheRoutersBlocksUntilATokenIsNoByte) {
  const BlockHash seed = chain_seed("tiny");
  SequenceKeys keys(KeySpace::kBytes, kBlock, seed, chain_seed("other"));
  for (char c : std::string("abcdefgh"))
    keys.append(static_cast<uint8_t>(c));
  EXPECT_EQ(keys.hashes(), hash_blocks(seed, "abcdefgh", kBlock));
  EXPECT_FALSE(keys.has_byte_space());
  keys.append(256);  // EOS under ignore_eos: the chain ends
  for (char c : std::string("ijkl"))
    keys.append(static_cast<uint8_t>(c));
  EXPECT_TRUE(keys.chain_ended());
  EXPECT_EQ(keys.hashes().size(), 2u);
}

TEST(SequenceKeys, TokenIdsKeyTheCacheAndTrackTheirBytes) {
  const BlockHash byte_seed = chain_seed("tiny"), token_seed = chain_seed("tiny-token-ids");
  SequenceKeys keys(KeySpace::kTokenIds, kBlock, byte_seed, token_seed);
  // Tokens standing for 1, 2 or 3 bytes: 8 tokens, 16 bytes.
  auto bytes_of = [](int32_t t) { return std::string(1 + t % 3, static_cast<char>('a' + t)); };
  std::string text;
  for (int32_t t = 0; t < 8; ++t) {
    keys.append(t, bytes_of);
    text += bytes_of(t);
    EXPECT_EQ(keys.byte_end(static_cast<size_t>(t)), text.size());
  }
  ASSERT_EQ(keys.hashes().size(), 2u);  // 8 tokens = 2 token blocks
  EXPECT_EQ(
      keys.hashes()[0],
      hash_blocks(token_seed, std::string("\0\0\0\0\1\0\0\0\2\0\0\0\3\0\0\0", 16), 4 * kBlock)[0]);
  ASSERT_TRUE(keys.has_byte_space());
  EXPECT_EQ(keys.byte_hashes(), hash_blocks(byte_seed, text, kBlock));
  EXPECT_FALSE(keys.chain_ended());
}

TEST(SequenceKeys, PrivateTokenIdsHaveNoByteSpace) {
  SequenceKeys keys(KeySpace::kPrivateTokenIds, kBlock, chain_seed("a"), chain_seed("b"));
  int asked = 0;
  for (int32_t t = 300; t < 308; ++t)
    keys.append(t, [&](int32_t) {
      ++asked;
      return std::string("x");
    });
  EXPECT_EQ(asked, 0);  // the bytes are never needed
  EXPECT_EQ(keys.hashes().size(), 2u);
  EXPECT_FALSE(keys.has_byte_space());
}

}  // namespace
}  // namespace kvc
