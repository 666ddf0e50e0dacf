// KvCacheManager on a 10-block pool: exact block ids, refcounts, copy-on-write, prefix reuse and
// the events that tell routers what the pool holds.
#include "replica/core/kv_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "prefix_index/radix_index.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using ::testing::ElementsAre;

constexpr int32_t kBlock = 4;

Sequence make_seq(const std::string& text) {
  Sequence s(0, SequenceKeys(KeySpace::kBytes, kBlock, chain_seed("tiny"), {}));
  for (char c : text) {
    s.tokens.push_back(static_cast<uint8_t>(c));
    s.keys.append(static_cast<uint8_t>(c));
  }
  return s;
}

void append(Sequence& s, char c) {
  s.tokens.push_back(static_cast<uint8_t>(c));
  s.keys.append(static_cast<uint8_t>(c));
}

TEST(KvCacheManager, PromptSiblingsCopyOnWriteAndPrefixReuse) {
  BlockPool pool(10, kBlock);
  KvCacheManager kv(pool);

  // A 10-token prompt: blocks 0 1 full, block 2 partial.
  Sequence prompt = make_seq("abcdefghij");
  ASSERT_TRUE(kv.prepare_write(prompt, 10));
  EXPECT_THAT(prompt.block_table, ElementsAre(0, 1, 2));
  prompt.num_computed = 10;
  kv.commit_computed(prompt);
  EXPECT_EQ(prompt.num_committed_blocks, 2);
  EXPECT_TRUE(pool.hash_of(0).has_value());
  EXPECT_FALSE(pool.hash_of(2).has_value());  // partial: not hashed

  // Two siblings fork: every block shared.
  Sequence a = make_seq("abcdefghij"), b = make_seq("abcdefghij");
  a.sibling = 0;
  b.sibling = 1;
  kv.fork(prompt, a);
  kv.fork(prompt, b);
  kv.release(prompt);
  EXPECT_EQ(pool.refcount(2), 2);

  // Sibling a writes position 10 into the shared partial block: copy-on-write to block 3.
  append(a, 'X');
  ASSERT_TRUE(kv.prepare_write(a, 11));
  EXPECT_THAT(a.block_table, ElementsAre(0, 1, 3));
  EXPECT_THAT(pool.take_transfers(), ElementsAre(KvTransfer{KvTransfer::Kind::kCopy, 3, 2}));
  EXPECT_EQ(pool.refcount(2), 1);
  // Sibling b is the last user of block 2 and writes in place.
  append(b, 'Y');
  ASSERT_TRUE(kv.prepare_write(b, 11));
  EXPECT_THAT(b.block_table, ElementsAre(0, 1, 2));
  EXPECT_TRUE(pool.take_transfers().empty());  // no second copy
  EXPECT_EQ(pool.refcount(0), 2);

  // a fills block 3 and grows into a new block 4.
  a.num_computed = 11;
  append(a, 'Z');
  ASSERT_TRUE(kv.prepare_write(a, 12));
  a.num_computed = 12;
  kv.commit_computed(a);
  EXPECT_TRUE(pool.hash_of(3).has_value());
  append(a, 'W');
  ASSERT_TRUE(kv.prepare_write(a, 13));
  EXPECT_THAT(a.block_table, ElementsAre(0, 1, 3, 4));

  // Both finish: full hashed blocks stay cached (LRU), the rest is free.
  kv.release(a);
  kv.release(b);
  BlockPoolCounts c = pool.counts();
  EXPECT_EQ(c.num_blocks_used, 0);
  EXPECT_EQ(c.num_blocks_cached, 3);  // 0, 1, 3
  EXPECT_EQ(c.num_blocks_free, 7);

  // A second request with the same prompt reuses blocks 0 and 1: only the rest is computed.
  Sequence again = make_seq("abcdefghij");
  const auto found = kv.find_cached_prefix(again, 9);
  EXPECT_EQ(found.blocks, 2);
  EXPECT_EQ(found.blocks_in_lru, 2);
  EXPECT_EQ(kv.attach_cached_prefix(again, 9), 8);
  EXPECT_THAT(again.block_table, ElementsAre(0, 1));
  ASSERT_TRUE(kv.prepare_write(again, 10));
  EXPECT_THAT(again.block_table, ElementsAre(0, 1, 2));
  EXPECT_EQ(pool.refcount(0), 1);

  // Different cache salt: a different chain, no reuse.
  Sequence salted(0, SequenceKeys(KeySpace::kBytes, kBlock, chain_seed("tiny", "tenant-b"), {}));
  for (char ch : std::string("abcdefghij"))
    salted.keys.append(static_cast<uint8_t>(ch));
  EXPECT_EQ(kv.find_cached_prefix(salted, 9).blocks, 0);
}

TEST(KvCacheManager, ShortageLeavesSequenceUnchanged) {
  BlockPool pool(3, kBlock);
  KvCacheManager kv(pool);
  Sequence s = make_seq("abcdefgh");
  ASSERT_TRUE(kv.prepare_write(s, 8));
  Sequence t = make_seq("abcdefghijklmnop");
  EXPECT_FALSE(kv.prepare_write(t, 16));  // needs 4, 1 left
  EXPECT_TRUE(t.block_table.empty());
  EXPECT_EQ(pool.counts().num_blocks_free, 1);
}

TEST(KvCacheManager, EventsMatchThePoolsContent) {
  BlockPool pool(6, kBlock);
  KvCacheManager kv(pool);
  testing::FakeClock clock;
  RadixIndex router(clock);  // a router following this replica's events
  auto follow = [&] {
    for (const KvEvent& e : pool.take_events())
      ASSERT_TRUE(router.apply(0, e).ok());
  };
  for (const std::string text : {"aaaabbbbcccc", "aaaabbbbdddd", "eeeeffffgggg"}) {
    Sequence s = make_seq(text);
    kv.attach_cached_prefix(s, static_cast<int32_t>(text.size()) - 1);
    ASSERT_TRUE(kv.prepare_write(s, static_cast<int32_t>(text.size())));
    s.num_computed = static_cast<int32_t>(text.size());
    kv.commit_computed(s);
    kv.release(s);
    follow();
    // After every request, the router holds exactly the pool's hashed blocks.
    size_t hashed = 0;
    for (int32_t b = 0; b < pool.num_blocks(); ++b) {
      if (auto h = pool.hash_of(b)) {
        ++hashed;
        EXPECT_TRUE(router.holds(0, *h)) << "block " << b;
      }
    }
    EXPECT_EQ(router.num_blocks(0), hashed);
  }
  // The router's longest match agrees with what the pool can reuse.
  Sequence probe = make_seq("aaaabbbbdddd");
  EXPECT_EQ(router.match(probe.keys.hashes()).blocks_for(0),
            static_cast<size_t>(kv.find_cached_prefix(probe, 12).blocks));
}

}  // namespace
}  // namespace kvc
