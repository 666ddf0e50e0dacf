#include "prefix_index/block_hash.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <xxhash.h>

namespace kvc {
namespace {

std::string le64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(v >> (8 * i));
  return out;
}

// The definition, written out independently of block_hash.cc: XXH3_64(le64(parent) || block).
uint64_t manual_hash(uint64_t parent, std::string_view block) {
  const std::string input = le64(parent) + std::string(block);
  return XXH3_64bits(input.data(), input.size());
}

std::vector<uint64_t> manual_chain(uint64_t seed, std::string_view bytes, size_t block_size) {
  std::vector<uint64_t> out;
  uint64_t parent = seed;
  for (size_t start = 0; start + block_size <= bytes.size(); start += block_size) {
    parent = manual_hash(parent, bytes.substr(start, block_size));
    out.push_back(parent);
  }
  return out;
}

std::vector<uint64_t> values(const std::vector<BlockHash>& hashes) {
  std::vector<uint64_t> out;
  for (const BlockHash h : hashes)
    out.push_back(h.value);
  return out;
}

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::string out(n, '\0');
  for (char& c : out)
    c = static_cast<char>(byte(rng));
  return out;
}

std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(ChainSeedTest, MatchesWireDefinition) {
  // Routers and replicas of different builds must agree on the seed, so its definition is pinned:
  // XXH3_64("kvcascade/v1\0" || le64(|model|) || model || le64(|salt|) || salt).
  const std::string input =
      std::string("kvcascade/v1", 13) + le64(5) + "llama" + le64(6) + "tenant";
  EXPECT_EQ(chain_seed("llama", "tenant").value, XXH3_64bits(input.data(), input.size()));
}

TEST(ChainSeedTest, DependsOnModelAndSalt) {
  EXPECT_NE(chain_seed("model-a"), chain_seed("model-b"));
  EXPECT_NE(chain_seed("m", "tenant-1"), chain_seed("m", "tenant-2"));
  EXPECT_NE(chain_seed("m", "s"), chain_seed("m"));
  EXPECT_EQ(chain_seed("m", ""), chain_seed("m"));
  // Length-prefixed, so the boundary between model and salt matters.
  EXPECT_NE(chain_seed("ab", "c"), chain_seed("a", "bc"));
  EXPECT_NE(chain_seed("abc", ""), chain_seed("ab", "c"));
}

TEST(ChainSeedTest, DifferentSeedsGiveDisjointChains) {
  const std::string bytes(64, 'x');
  const auto a = hash_blocks(chain_seed("m", "tenant-1"), bytes, 16);
  const auto b = hash_blocks(chain_seed("m", "tenant-2"), bytes, 16);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NE(a[i], b[i]) << i;
}

TEST(HashBlockTest, MatchesManualDefinitionAcrossStackBufferBoundary) {
  std::mt19937_64 rng(1);
  // 256 is the largest block hashed from the stack buffer; longer ones take the streaming path.
  for (size_t n : {0, 1, 15, 16, 17, 255, 256, 257, 1000, 4096}) {
    const uint64_t parent = rng();
    const std::string block = random_bytes(rng, n);
    EXPECT_EQ(hash_block(BlockHash{parent}, as_bytes(block)).value, manual_hash(parent, block))
        << "block size " << n;
  }
}

TEST(HashBlocksTest, MatchesManualChain) {
  std::mt19937_64 rng(2);
  const BlockHash seed = chain_seed("m");
  const std::string bytes = random_bytes(rng, 100);
  const auto hashes = hash_blocks(seed, bytes, 16);
  ASSERT_EQ(hashes.size(), 6u);
  EXPECT_EQ(values(hashes), manual_chain(seed.value, bytes, 16));
  EXPECT_EQ(hashes[0].value, manual_hash(seed.value, std::string_view(bytes).substr(0, 16)));
  EXPECT_EQ(hash_blocks(seed, as_bytes(bytes), 16), hashes);
}

TEST(HashBlocksTest, PartialTrailingBlockIsNotHashed) {
  std::mt19937_64 rng(3);
  const BlockHash seed = chain_seed("m");
  std::string bytes = random_bytes(rng, 100);
  EXPECT_EQ(hash_blocks(seed, std::string_view(bytes).substr(0, 96), 16).size(), 6u);
  EXPECT_EQ(hash_blocks(seed, std::string_view(bytes).substr(0, 95), 16).size(), 5u);
  EXPECT_TRUE(hash_blocks(seed, std::string_view(bytes).substr(0, 15), 16).empty());
  EXPECT_TRUE(hash_blocks(seed, std::string_view(), 16).empty());

  const auto before = hash_blocks(seed, bytes, 16);
  bytes[97] ^= 0x5a;
  EXPECT_EQ(hash_blocks(seed, bytes, 16), before);
}

TEST(HashBlocksTest, ChainsEveryBlockToItsPrefix) {
  std::mt19937_64 rng(4);
  const BlockHash seed = chain_seed("m");
  const std::string bytes = random_bytes(rng, 128);
  const auto original = hash_blocks(seed, bytes, 16);
  ASSERT_EQ(original.size(), 8u);

  std::string first_changed = bytes;
  first_changed[0] ^= 1;
  const auto a = hash_blocks(seed, first_changed, 16);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_NE(a[i], original[i]) << i;

  std::string block3_changed = bytes;
  block3_changed[3 * 16 + 7] ^= 1;
  const auto b = hash_blocks(seed, block3_changed, 16);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_EQ(b[i], original[i]) << i;
  for (size_t i = 3; i < 8; ++i)
    EXPECT_NE(b[i], original[i]) << i;
}

TEST(HashBlocksTest, BigBlocksMatchManualDefinition) {
  std::mt19937_64 rng(5);
  const BlockHash seed = chain_seed("m", "s");
  const std::string bytes = random_bytes(rng, 3500);
  const auto hashes = hash_blocks(seed, bytes, 1000);
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(values(hashes), manual_chain(seed.value, bytes, 1000));

  BlockHasher hasher(seed, 1000);
  EXPECT_EQ(hasher.append(std::string_view(bytes).substr(0, 999)), 0u);
  EXPECT_EQ(hasher.append(std::string_view(bytes).substr(999)), 3u);
  EXPECT_EQ(hasher.hashes(), hashes);
}

TEST(BlockHasherTest, FreshHasherState) {
  const BlockHash seed{0x1234};
  BlockHasher hasher(seed, 4);
  EXPECT_EQ(hasher.seed(), seed);
  EXPECT_EQ(hasher.tail(), seed);
  EXPECT_EQ(hasher.block_size(), 4u);
  EXPECT_EQ(hasher.num_bytes(), 0u);
  EXPECT_TRUE(hasher.pending().empty());
  EXPECT_TRUE(hasher.hashes().empty());
  EXPECT_EQ(hasher.append(std::string_view()), 0u);
  EXPECT_EQ(hasher.num_bytes(), 0u);
}

TEST(BlockHasherTest, TailPendingAndNumBytes) {
  const BlockHash seed{42};
  BlockHasher hasher(seed, 4);
  EXPECT_EQ(hasher.append("abc"), 0u);
  EXPECT_EQ(hasher.tail(), seed);
  EXPECT_EQ(hasher.num_bytes(), 3u);
  EXPECT_EQ(std::string(hasher.pending().begin(), hasher.pending().end()), "abc");

  EXPECT_EQ(hasher.append_byte('d'), 1u);
  EXPECT_TRUE(hasher.pending().empty());
  EXPECT_EQ(hasher.num_bytes(), 4u);
  EXPECT_EQ(hasher.tail().value, manual_hash(42, "abcd"));

  EXPECT_EQ(hasher.append("efghijklm"), 2u);
  EXPECT_EQ(hasher.num_bytes(), 13u);
  EXPECT_EQ(std::string(hasher.pending().begin(), hasher.pending().end()), "m");
  EXPECT_EQ(values(hasher.hashes()), manual_chain(42, "abcdefghijklm", 4));
  EXPECT_EQ(hasher.tail(), hasher.hashes().back());
}

TEST(BlockHasherTest, StreamingEqualsOneShotForRandomSplits) {
  std::mt19937_64 rng(6);
  for (int iter = 0; iter < 300; ++iter) {
    const size_t block_size = std::uniform_int_distribution<size_t>(1, 40)(rng);
    const std::string bytes = random_bytes(rng, std::uniform_int_distribution<size_t>(0, 400)(rng));
    const BlockHash seed{rng()};
    BlockHasher hasher(seed, block_size);
    size_t pos = 0;
    while (pos < bytes.size()) {
      // Mostly tiny pieces (0 and 1 bytes included), sometimes several blocks at once.
      const size_t max_piece = (rng() % 4 == 0) ? 3 * block_size : 2;
      const size_t piece =
          std::min(std::uniform_int_distribution<size_t>(0, max_piece)(rng), bytes.size() - pos);
      const size_t before = hasher.hashes().size();
      const size_t completed = hasher.append(std::string_view(bytes).substr(pos, piece));
      pos += piece;

      const auto expected = hash_blocks(seed, std::string_view(bytes).substr(0, pos), block_size);
      ASSERT_EQ(hasher.hashes(), expected) << "iter " << iter << " pos " << pos;
      ASSERT_EQ(completed, expected.size() - before);
      ASSERT_EQ(hasher.num_bytes(), pos);
      ASSERT_EQ(hasher.tail(), expected.empty() ? seed : expected.back());
      const std::string pending(hasher.pending().begin(), hasher.pending().end());
      ASSERT_EQ(pending,
                bytes.substr(expected.size() * block_size, pos - expected.size() * block_size));
    }
  }
}

}  // namespace
}  // namespace kvc
