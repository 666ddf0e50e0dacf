#include "prefix_index/radix_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using ::testing::ElementsAre;

// Chains of small made-up hashes: readable, and the index never recomputes hashes.
std::vector<BlockHash> chain(std::initializer_list<uint64_t> values) {
  std::vector<BlockHash> out;
  for (uint64_t v : values)
    out.push_back(BlockHash{v});
  return out;
}

class RadixIndexTest : public ::testing::Test {
 protected:
  testing::FakeClock clock_;
};

TEST_F(RadixIndexTest, EmptyIndexMatchesNothing) {
  RadixIndex index(clock_);
  const MatchResult m = index.match(chain({1, 2, 3}));
  EXPECT_TRUE(m.replicas.empty());
  EXPECT_EQ(m.tree_blocks, 0u);
  EXPECT_EQ(index.num_blocks(), 0u);
  EXPECT_EQ(index.num_nodes(), 0u);
}

TEST_F(RadixIndexTest, LongestMatchForEveryReplicaInOneWalk) {
  RadixIndex index(clock_);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3, 4, 5})).ok());
  ASSERT_TRUE(index.insert(1, chain({1, 2, 3})).ok());
  ASSERT_TRUE(index.insert(2, chain({1, 2, 9})).ok());
  ASSERT_TRUE(index.insert(3, chain({7})).ok());
  index.check_invariants();

  const MatchResult m = index.match(chain({1, 2, 3, 4, 6}));
  EXPECT_THAT(m.replicas, ElementsAre(ReplicaMatch{0, 4}, ReplicaMatch{1, 3}, ReplicaMatch{2, 2}));
  EXPECT_EQ(m.tree_blocks, 4u);
  EXPECT_EQ(m.diverged_edge_remaining, 1u);  // block 5 continued the known prefix
  EXPECT_EQ(m.best(), 4u);
  EXPECT_EQ(m.blocks_for(3), 0u);
  EXPECT_EQ(index.num_blocks(), 7u);  // 1 2 3 4 5 9 7
  EXPECT_EQ(index.num_blocks(0), 5u);
  EXPECT_EQ(index.num_blocks(2), 3u);
  // Nodes: [1 2] {0,1,2}, [3] {0,1}, [4 5] {0}, [9] {2}, [7] {3}.
  EXPECT_EQ(index.num_nodes(), 5u);
}

TEST_F(RadixIndexTest, NearMissIsAnEarlyDivergenceInsideAKnownPrefix) {
  RadixIndex index(clock_);
  std::vector<BlockHash> system;
  for (uint64_t i = 1; i <= 40; ++i)
    system.push_back(BlockHash{i});
  ASSERT_TRUE(index.insert(0, system).ok());
  // Same first 3 blocks, then a timestamp changes everything after it.
  EXPECT_TRUE(index.match(chain({1, 2, 3, 900, 901})).near_miss());
  // Diverging late (after 38 of 40 known blocks) is an ordinary partial hit.
  std::vector<BlockHash> late(system.begin(), system.begin() + 38);
  late.push_back(BlockHash{999});
  EXPECT_FALSE(index.match(late).near_miss());
  // A query that simply ends early did not diverge.
  EXPECT_FALSE(index.match(chain({1, 2, 3})).near_miss());
  // Unknown first block: nothing known was lost.
  EXPECT_FALSE(index.match(chain({77, 78})).near_miss());
}

TEST_F(RadixIndexTest, RemoveMiddleBlockCutsThatReplicasMatchOnly) {
  RadixIndex index(clock_);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3, 4})).ok());
  ASSERT_TRUE(index.insert(1, chain({1, 2, 3, 4})).ok());
  EXPECT_EQ(index.remove(0, chain({2, 42})), 1u);
  index.check_invariants();
  const MatchResult m = index.match(chain({1, 2, 3, 4}));
  EXPECT_THAT(m.replicas, ElementsAre(ReplicaMatch{0, 1}, ReplicaMatch{1, 4}));
  EXPECT_FALSE(index.holds(0, BlockHash{2}));
  EXPECT_TRUE(index.holds(0, BlockHash{3}));
  EXPECT_EQ(index.num_blocks(0), 3u);
}

TEST_F(RadixIndexTest, RemovingLastHolderPrunesAndRecompresses) {
  RadixIndex index(clock_);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3, 4})).ok());
  ASSERT_TRUE(index.insert(1, chain({1, 2})).ok());
  EXPECT_EQ(index.num_nodes(), 2u);
  index.clear(1);
  index.check_invariants();
  EXPECT_EQ(index.num_nodes(), 1u);  // [1 2] and [3 4] merged back: same holder, same touch
  EXPECT_EQ(index.remove(0, chain({4, 3})), 2u);
  EXPECT_EQ(index.num_blocks(), 2u);
  index.clear(0);
  index.check_invariants();
  EXPECT_EQ(index.num_blocks(), 0u);
  EXPECT_EQ(index.num_nodes(), 0u);
  EXPECT_TRUE(index.replicas().empty());
}

TEST_F(RadixIndexTest, StoredEventContinuesAfterParent) {
  RadixIndex index(clock_);
  ASSERT_TRUE(index.apply(0, KvStored{std::nullopt, chain({1, 2})}).ok());
  ASSERT_TRUE(index.apply(0, KvStored{BlockHash{2}, chain({3, 4})}).ok());
  // Another replica's continuation after a mid-edge block splits the edge.
  ASSERT_TRUE(index.apply(1, KvStored{BlockHash{1}, chain({5})}).ok());
  index.check_invariants();
  EXPECT_EQ(index.match(chain({1, 2, 3, 4})).blocks_for(0), 4u);
  // Replica 1 holds block 5 but not its parent 1: it cannot serve the prefix.
  EXPECT_EQ(index.match(chain({1, 5})).blocks_for(1), 0u);
  EXPECT_EQ(index.match(chain({1, 5})).tree_blocks, 2u);

  const Status unknown = index.apply(0, KvStored{BlockHash{99}, chain({6})});
  EXPECT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("unknown"), std::string::npos);

  ASSERT_TRUE(index.apply(0, KvRemoved{chain({4})}).ok());
  EXPECT_EQ(index.match(chain({1, 2, 3, 4})).blocks_for(0), 3u);
  ASSERT_TRUE(index.apply(0, KvCleared{}).ok());
  EXPECT_EQ(index.num_blocks(0), 0u);
  index.check_invariants();
}

// chain_to walks a block's path back to the root across a split edge (fuzz/radix_index.cc checks
// merged ones too); a queued event (blocks not held yet) changes nothing in an exact index.
TEST_F(RadixIndexTest, ChainToAHashAndQueuedEventsHoldNothing) {
  RadixIndex index(clock_);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3, 4, 5})).ok());
  ASSERT_TRUE(index.insert(1, chain({1, 2, 9})).ok());  // splits [1..5] after 2
  EXPECT_EQ(index.chain_to(BlockHash{1}), chain({1}));
  EXPECT_EQ(index.chain_to(BlockHash{2}), chain({1, 2}));
  EXPECT_EQ(index.chain_to(BlockHash{4}), chain({1, 2, 3, 4}));
  EXPECT_EQ(index.chain_to(BlockHash{5}), chain({1, 2, 3, 4, 5}));
  EXPECT_EQ(index.chain_to(BlockHash{9}), chain({1, 2, 9}));
  EXPECT_TRUE(index.chain_to(BlockHash{77}).empty());

  const size_t nodes = index.num_nodes(), blocks = index.num_blocks();
  ASSERT_TRUE(index.apply(2, KvQueued{BlockHash{5}, chain({6, 7})}).ok());
  ASSERT_TRUE(index.apply(2, KvQueued{std::nullopt, chain({8})}).ok());
  EXPECT_EQ(index.num_nodes(), nodes);
  EXPECT_EQ(index.num_blocks(), blocks);
  EXPECT_EQ(index.num_blocks(2), 0u);
  index.check_invariants();
}

TEST_F(RadixIndexTest, ConflictingChainIsRefusedWithoutCorruption) {
  RadixIndex index(clock_);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3})).ok());
  // Block 3 already lives under 2; a chain claiming it under 7 is inconsistent.
  const Status s = index.insert(1, chain({7, 3}));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("another parent"), std::string::npos);
  index.check_invariants();
  EXPECT_TRUE(index.holds(1, BlockHash{7}));  // what came before the conflict is kept
  EXPECT_EQ(index.match(chain({1, 2, 3})).blocks_for(0), 3u);
  // A chain repeating a hash inside itself is refused too.
  EXPECT_FALSE(index.insert(2, chain({20, 21, 20})).ok());
  index.check_invariants();
  EXPECT_EQ(index.num_blocks(2), 2u);
}

TEST_F(RadixIndexTest, CapacityEvictsLeastRecentlyUsedLeavesFirst) {
  RadixIndexConfig config;
  config.capacity_blocks_per_replica = 5;
  RadixIndex index(clock_, config);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3})).ok());  // oldest
  ASSERT_TRUE(index.insert(0, chain({10, 11})).ok());
  ASSERT_TRUE(index.insert(0, chain({1, 2})).ok());  // touches 1 2 again: 3 is now the oldest
  ASSERT_TRUE(index.insert(0, chain({20})).ok());    // 6 blocks: evict one
  index.check_invariants();
  EXPECT_FALSE(index.holds(0, BlockHash{3}));
  EXPECT_TRUE(index.holds(0, BlockHash{10}));
  ASSERT_TRUE(index.insert(0, chain({30, 31})).ok());  // evict 11 then 10 (deepest first)
  index.check_invariants();
  EXPECT_FALSE(index.holds(0, BlockHash{11}));
  EXPECT_FALSE(index.holds(0, BlockHash{10}));
  EXPECT_TRUE(index.holds(0, BlockHash{1}));
  EXPECT_EQ(index.num_blocks(0), 5u);
  // Capacity is per replica: another replica is not affected.
  ASSERT_TRUE(index.insert(1, chain({1, 2, 3, 4, 5})).ok());
  EXPECT_EQ(index.num_blocks(0), 5u);
  EXPECT_EQ(index.num_blocks(1), 5u);
}

// A replica's own capacity (a foreign replica's KV capacity from its metrics) overrides the
// index's, evicts at once, and survives clear().
TEST_F(RadixIndexTest, PerReplicaCapacityOverridesTheDefault) {
  RadixIndexConfig config;
  config.capacity_blocks_per_replica = 5;
  RadixIndex index(clock_, config);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3, 4})).ok());
  ASSERT_TRUE(index.insert(1, chain({1, 2, 3, 4})).ok());
  index.set_capacity(0, 2);
  index.check_invariants();
  EXPECT_EQ(index.num_blocks(0), 2u);
  EXPECT_TRUE(index.holds(0, BlockHash{2}));
  EXPECT_FALSE(index.holds(0, BlockHash{3}));
  EXPECT_EQ(index.num_blocks(1), 4u);
  index.clear(0);
  ASSERT_TRUE(index.insert(0, chain({7, 8, 9})).ok());
  EXPECT_EQ(index.num_blocks(0), 2u);
  index.set_capacity(1, 8);  // more than the default
  ASSERT_TRUE(index.insert(1, chain({10, 11, 12, 13})).ok());
  EXPECT_EQ(index.num_blocks(1), 8u);
  index.set_capacity(0, 0);  // back to the default
  ASSERT_TRUE(index.insert(0, chain({7, 8, 9, 6, 5})).ok());
  EXPECT_EQ(index.num_blocks(0), 5u);
  index.check_invariants();
}

TEST_F(RadixIndexTest, ChainLongerThanCapacityKeepsItsHead) {
  RadixIndexConfig config;
  config.capacity_blocks_per_replica = 3;
  RadixIndex index(clock_, config);
  ASSERT_TRUE(index.insert(0, chain({1, 2, 3, 4, 5})).ok());
  index.check_invariants();
  EXPECT_EQ(index.match(chain({1, 2, 3, 4, 5})).blocks_for(0), 3u);
}

TEST_F(RadixIndexTest, TtlExpiresUntouchedEntries) {
  RadixIndexConfig config;
  config.ttl = std::chrono::seconds(10);
  RadixIndex index(clock_, config);
  ASSERT_TRUE(index.insert(0, chain({1, 2})).ok());
  clock_.advance(std::chrono::seconds(6));
  ASSERT_TRUE(index.insert(1, chain({1, 2})).ok());
  ASSERT_TRUE(index.insert(0, chain({5})).ok());
  clock_.advance(std::chrono::seconds(5));  // replica 0's [1 2] is 11 s old, the rest 5 s
  // Matching skips expired entries before they are dropped.
  EXPECT_THAT(index.match(chain({1, 2})).replicas, ElementsAre(ReplicaMatch{1, 2}));
  EXPECT_EQ(index.expire(), 2u);
  index.check_invariants();
  EXPECT_EQ(index.num_blocks(0), 1u);
  clock_.advance(std::chrono::seconds(5));
  EXPECT_EQ(index.expire(), 3u);
  EXPECT_EQ(index.num_blocks(), 0u);
  index.check_invariants();
}

TEST_F(RadixIndexTest, MemoryAccountingFollowsContent) {
  RadixIndex index(clock_);
  const size_t empty = index.memory_bytes();
  std::vector<BlockHash> big;
  for (uint64_t i = 1; i <= 1000; ++i)
    big.push_back(BlockHash{i});
  ASSERT_TRUE(index.insert(0, big).ok());
  const size_t full = index.memory_bytes();
  EXPECT_GT(full, empty + 1000 * sizeof(BlockHash));
  index.clear(0);
  EXPECT_LT(index.memory_bytes(), full);
}

TEST_F(RadixIndexTest, DeepChainTearsDownWithoutRecursion) {
  RadixIndex index(clock_);
  // Alternating holders make one node per block: 200k nodes deep.
  std::vector<BlockHash> c;
  for (uint64_t i = 1; i <= 200000; ++i)
    c.push_back(BlockHash{i});
  ASSERT_TRUE(index.insert(0, c).ok());
  std::vector<BlockHash> odd;
  for (uint64_t i = 1; i <= 200000; i += 2)
    odd.push_back(BlockHash{i});
  EXPECT_EQ(index.remove(0, odd), 100000u);
  EXPECT_EQ(index.match(c).blocks_for(0), 0u);
  EXPECT_EQ(index.match(c).tree_blocks, 200000u);
}

}  // namespace
}  // namespace kvc
