#include "replica/core/block_pool.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "prefix_index/radix_index.h"
#include "tests/testing/fake_clock.h"

namespace kvc {

// Readable failure messages: small made-up hashes in decimal.
void PrintTo(const KvStored& e, std::ostream* os) {
  *os << "stored(parent=";
  if (e.parent)
    *os << e.parent->value;
  else
    *os << "none";
  *os << ", [";
  for (const BlockHash& h : e.hashes)
    *os << " " << h.value;
  *os << " ])";
}
void PrintTo(const KvRemoved& e, std::ostream* os) {
  *os << "removed([";
  for (const BlockHash& h : e.hashes)
    *os << " " << h.value;
  *os << " ])";
}
void PrintTo(const KvCleared&, std::ostream* os) {
  *os << "cleared";
}

namespace {

constexpr int32_t kBlocks = 10;
constexpr int32_t kBlockSize = 16;

// The pool never recomputes hashes, so tests use small made-up ones.
BlockHash H(uint64_t v) {
  return BlockHash{v};
}

KvEvent stored(std::optional<uint64_t> parent, std::initializer_list<uint64_t> hashes) {
  KvStored e;
  if (parent) e.parent = H(*parent);
  for (uint64_t h : hashes)
    e.hashes.push_back(H(h));
  return e;
}

KvEvent removed(std::initializer_list<uint64_t> hashes) {
  KvRemoved e;
  for (uint64_t h : hashes)
    e.hashes.push_back(H(h));
  return e;
}

using Events = std::vector<KvEvent>;

void expect_counts(const BlockPool& pool, int32_t used, int32_t cached, int32_t free) {
  const BlockPoolCounts c = pool.counts();
  EXPECT_EQ(c.num_blocks_total, pool.num_blocks());
  EXPECT_EQ(c.num_blocks_used, used);
  EXPECT_EQ(c.num_blocks_cached, cached);
  EXPECT_EQ(c.num_blocks_free, free);
  EXPECT_EQ(pool.num_allocatable(), cached + free);
}

// Allocates every block (ids 0..n-1) and commits hash 100 + id to each, as one chain.
void fill_and_commit_chain(BlockPool& pool) {
  for (int32_t b = 0; b < pool.num_blocks(); ++b) {
    ASSERT_EQ(pool.allocate(), b);
    const std::optional<BlockHash> parent = b == 0 ? std::nullopt : std::optional(H(100 + b - 1));
    ASSERT_TRUE(pool.commit(b, H(100 + b), parent));
  }
}

TEST(BlockPoolTest, AllocatesLowestIdsFirstUntilEveryBlockIsUsed) {
  BlockPool pool(kBlocks, kBlockSize);
  EXPECT_EQ(pool.num_blocks(), kBlocks);
  EXPECT_EQ(pool.block_size(), kBlockSize);
  expect_counts(pool, 0, 0, kBlocks);
  for (int32_t b = 0; b < kBlocks; ++b) {
    EXPECT_EQ(pool.allocate(), b);
    EXPECT_EQ(pool.refcount(b), 1);
    EXPECT_EQ(pool.hash_of(b), std::nullopt);
    expect_counts(pool, b + 1, 0, kBlocks - b - 1);
  }
  EXPECT_EQ(pool.allocate(), std::nullopt);
  expect_counts(pool, kBlocks, 0, 0);
  EXPECT_TRUE(pool.take_events().empty());
}

TEST(BlockPoolTest, ReleasedUnhashedBlocksAreFreeAndReusedLowestFirst) {
  BlockPool pool(kBlocks, kBlockSize);
  for (int32_t b = 0; b < 5; ++b)
    ASSERT_EQ(pool.allocate(), b);
  pool.release(3);
  pool.release(1);
  EXPECT_EQ(pool.refcount(1), 0);
  expect_counts(pool, 3, 0, 7);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.allocate(), 5);
  expect_counts(pool, 6, 0, 4);
  EXPECT_TRUE(pool.take_events().empty());  // unhashed blocks are invisible to routers
}

TEST(BlockPoolTest, RefCountsUsersAndTheLastReleaseCachesAHashedBlock) {
  BlockPool pool(kBlocks, kBlockSize);
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_TRUE(pool.commit(0, H(7), std::nullopt));
  pool.ref(0);
  pool.ref(0);  // three siblings share the prompt block
  EXPECT_EQ(pool.refcount(0), 3);
  pool.release(0);
  pool.release(0);
  EXPECT_EQ(pool.refcount(0), 1);
  expect_counts(pool, 1, 0, 9);
  pool.release(0);
  EXPECT_EQ(pool.refcount(0), 0);
  EXPECT_EQ(pool.hash_of(0), H(7));
  expect_counts(pool, 0, 1, 9);
}

TEST(BlockPoolTest, CachedBlockIsFoundByLookupAndRevivedByRef) {
  BlockPool pool(kBlocks, kBlockSize);
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_EQ(pool.allocate(), 1);
  ASSERT_TRUE(pool.commit(0, H(10), std::nullopt));
  ASSERT_TRUE(pool.commit(1, H(11), H(10)));
  EXPECT_EQ(pool.lookup(H(10)), 0);  // used blocks are found too
  pool.release(0);
  pool.release(1);
  expect_counts(pool, 0, 2, 8);
  EXPECT_EQ(pool.lookup(H(10)), 0);
  EXPECT_EQ(pool.lookup(H(11)), 1);
  EXPECT_EQ(pool.lookup(H(12)), std::nullopt);
  EXPECT_EQ(pool.refcount(0), 0);  // lookup takes no reference

  pool.ref(0);  // a new prompt reuses block 0's KV
  EXPECT_EQ(pool.refcount(0), 1);
  expect_counts(pool, 1, 1, 8);

  // Block 0 left the LRU: filling the pool evicts only block 1.
  (void)pool.take_events();
  for (int32_t b = 2; b < kBlocks; ++b)
    ASSERT_EQ(pool.allocate(), b);
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.take_events(), (Events{removed({11})}));
  EXPECT_EQ(pool.hash_of(0), H(10));
  EXPECT_EQ(pool.lookup(H(11)), std::nullopt);
  EXPECT_EQ(pool.hash_of(1), std::nullopt);
  expect_counts(pool, kBlocks, 0, 0);
}

TEST(BlockPoolTest, EvictsLeastRecentlyReleasedFirstAfterFreeBlocks) {
  BlockPool pool(kBlocks, kBlockSize);
  for (int32_t b = 0; b < 4; ++b) {
    ASSERT_EQ(pool.allocate(), b);
    ASSERT_TRUE(pool.commit(b, H(100 + b), std::nullopt));
  }
  pool.release(2);
  pool.release(0);
  pool.release(3);
  expect_counts(pool, 1, 3, 6);
  (void)pool.take_events();

  // Free blocks go first, even though cached blocks have lower ids.
  for (int32_t b = 4; b < kBlocks; ++b)
    ASSERT_EQ(pool.allocate(), b);
  EXPECT_TRUE(pool.take_events().empty());

  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.refcount(2), 1);
  EXPECT_EQ(pool.hash_of(2), std::nullopt);
  EXPECT_EQ(pool.take_events(), (Events{removed({102})}));
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.take_events(), (Events{removed({100})}));
  EXPECT_EQ(pool.allocate(), 3);
  EXPECT_EQ(pool.take_events(), (Events{removed({103})}));
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_TRUE(pool.take_events().empty());
  expect_counts(pool, kBlocks, 0, 0);
}

TEST(BlockPoolTest, RevivedThenReleasedBlockGoesToTheMostRecentEnd) {
  BlockPool pool(kBlocks, kBlockSize);
  fill_and_commit_chain(pool);
  pool.release(0);
  pool.release(1);
  pool.release(2);  // LRU: 0 1 2
  pool.ref(0);
  pool.release(0);  // LRU: 1 2 0
  expect_counts(pool, 7, 3, 0);
  (void)pool.take_events();
  EXPECT_EQ(pool.allocate(), 1);
  EXPECT_EQ(pool.allocate(), 2);
  EXPECT_EQ(pool.allocate(), 0);
  EXPECT_EQ(pool.allocate(), std::nullopt);
  // Consecutive removals coalesce into one event, in eviction order.
  EXPECT_EQ(pool.take_events(), (Events{removed({101, 102, 100})}));
}

// Insertion by reuse: once the blocks that branched off one cached block are seldom found again,
// the next ones branching there are released to the evicting end (a chain's tail first, each
// block after the one before), ahead of blocks released earlier; a block found again is never
// cold, and a branch whose blocks are found again stays warm.
TEST(BlockPoolTest, SeldomReusedBranchesAreReleasedToTheEvictingEnd) {
  BlockPool pool(32, kBlockSize);
  const int32_t system = *pool.allocate();  // held throughout: the branch point
  ASSERT_TRUE(pool.commit(system, H(1), std::nullopt, pool.branch_at(std::nullopt)));
  const int32_t conversation = *pool.allocate();
  ASSERT_TRUE(pool.commit(conversation, H(2), std::nullopt, pool.branch_at(std::nullopt)));
  pool.release(conversation);  // the least recently released from here on
  // One-shot tails off the system block, none found again: warm under the prior (one reuse in
  // two), cold once fewer than one in ten were reused (1 / (9 + 2) < 0.1).
  for (int i = 0; i < 9; ++i) {
    const CacheBranch branch = pool.branch_at(H(1));
    EXPECT_FALSE(branch.cold) << i;
    const int32_t b = *pool.allocate();
    ASSERT_TRUE(pool.commit(b, H(100 + i), H(1), branch));
    pool.release(b);
  }
  const CacheBranch cold = pool.branch_at(H(1));
  ASSERT_TRUE(cold.cold);
  EXPECT_FALSE(pool.branch_at(std::nullopt).cold);  // 0 of 2 at the root: the prior still holds
  const int32_t head = *pool.allocate(), tail = *pool.allocate();
  ASSERT_TRUE(pool.commit(head, H(200), H(1), cold));
  ASSERT_TRUE(pool.commit(tail, H(201), H(200), cold));
  pool.release_chain(std::vector<int32_t>{head, tail});  // chain order: the tail released first
  // A preempted sequence's blocks are released warm, cold or not: its recompute looks them up.
  const int32_t preempted = *pool.allocate();
  ASSERT_TRUE(pool.commit(preempted, H(400), H(1), cold));
  pool.release_chain(std::vector<int32_t>{preempted}, /*warm=*/true);
  // A cold block found again before its release goes to the most recent end like any other.
  const int32_t found = *pool.allocate();
  ASSERT_TRUE(pool.commit(found, H(300), H(1), cold));
  pool.note_hit(found);
  pool.release(found);
  EXPECT_EQ(pool.counts().num_blocks_cached, 1 + 9 + 2 + 1 + 1);
  (void)pool.take_events();
  while (pool.counts().num_blocks_free > 0)
    (void)pool.allocate();
  for (int i = 0; i < 4; ++i)
    (void)pool.allocate();
  // The cold chain tail first, then what LRU alone would have evicted first.
  EXPECT_EQ(pool.take_events(), (Events{removed({201, 200, 2, 100})}));

  // A branch whose blocks are found again stays warm: one in two.
  pool.release(system);
  BlockPool warm(32, kBlockSize);
  const int32_t root = *warm.allocate();
  ASSERT_TRUE(warm.commit(root, H(1), std::nullopt, warm.branch_at(std::nullopt)));
  for (int i = 0; i < 20; ++i) {
    const CacheBranch branch = warm.branch_at(H(1));
    EXPECT_FALSE(branch.cold) << i;
    const int32_t b = *warm.allocate();
    ASSERT_TRUE(warm.commit(b, H(100 + i), H(1), branch));
    if (i % 2 == 0) warm.note_hit(b);
    warm.release(b);
  }
}

// A branch's counts go with its block (evicted, or every hash cleared), so they are bounded by
// the hashed blocks.
TEST(BlockPoolTest, BranchCountsGoWithTheirBlock) {
  BlockPool pool(4, kBlockSize);
  const int32_t a = *pool.allocate();
  ASSERT_TRUE(pool.commit(a, H(1), std::nullopt, pool.branch_at(std::nullopt)));
  const int32_t b = *pool.allocate();
  ASSERT_TRUE(pool.commit(b, H(2), H(1), pool.branch_at(H(1))));
  EXPECT_EQ(pool.num_branches_counted(), 2u);  // the root and H(1)
  pool.release(b);
  pool.release(a);
  while (pool.allocate()) {
  }
  EXPECT_EQ(pool.num_branches_counted(), 1u);  // H(1) evicted: only the root
  for (int32_t x = 0; x < 4; ++x)
    pool.release(x);
  const int32_t c = *pool.allocate();
  ASSERT_TRUE(pool.commit(c, H(3), std::nullopt, pool.branch_at(std::nullopt)));
  const int32_t d = *pool.allocate();
  ASSERT_TRUE(pool.commit(d, H(4), H(3), pool.branch_at(H(3))));
  EXPECT_EQ(pool.num_branches_counted(), 2u);
  pool.clear_hashes();
  EXPECT_EQ(pool.num_branches_counted(), 1u);
  EXPECT_FALSE(pool.branch_at(std::nullopt).cold);
  // A block committed under a branch whose block is no longer hashed is not counted there.
  ASSERT_TRUE(pool.commit(d, H(5), H(3), CacheBranch{H(3), false}));
  EXPECT_EQ(pool.num_branches_counted(), 1u);
}

TEST(BlockPoolTest, AllocateFailsOnlyWhenEveryBlockIsUsed) {
  BlockPool pool(3, kBlockSize);
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_EQ(pool.allocate(), 1);
  ASSERT_EQ(pool.allocate(), 2);
  ASSERT_TRUE(pool.commit(1, H(5), std::nullopt));
  pool.release(1);
  EXPECT_EQ(pool.num_allocatable(), 1);
  EXPECT_EQ(pool.allocate(), 1);  // a cached block is allocatable
  EXPECT_EQ(pool.allocate(), std::nullopt);
  EXPECT_EQ(pool.allocate(), std::nullopt);  // a failed allocate changes nothing
  expect_counts(pool, 3, 0, 0);
  pool.release(2);
  EXPECT_EQ(pool.allocate(), 2);
}

TEST(BlockPoolTest, DuplicateCommitReturnsFalseAndEmitsNothing) {
  BlockPool pool(kBlocks, kBlockSize);
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_EQ(pool.allocate(), 1);
  ASSERT_TRUE(pool.commit(0, H(42), std::nullopt));
  EXPECT_EQ(pool.take_events(), (Events{stored(std::nullopt, {42})}));

  // Identical sibling content in another block: the first holder keeps the hash.
  EXPECT_FALSE(pool.commit(1, H(42), std::nullopt));
  EXPECT_EQ(pool.hash_of(1), std::nullopt);
  EXPECT_EQ(pool.lookup(H(42)), 0);
  // A block is hashed once.
  EXPECT_FALSE(pool.commit(0, H(43), H(42)));
  EXPECT_EQ(pool.hash_of(0), H(42));
  EXPECT_EQ(pool.lookup(H(43)), std::nullopt);
  EXPECT_TRUE(pool.take_events().empty());

  // The duplicate stays unhashed, so its release frees it.
  pool.release(1);
  expect_counts(pool, 1, 0, 9);
  // Once the holder is evicted the hash can be committed again.
  pool.release(0);
  for (int32_t b = 1; b < kBlocks; ++b)
    ASSERT_EQ(pool.allocate(), b);
  ASSERT_EQ(pool.allocate(), 0);
  EXPECT_TRUE(pool.commit(0, H(42), std::nullopt));
  EXPECT_EQ(pool.take_events(), (Events{removed({42}), stored(std::nullopt, {42})}));
}

TEST(BlockPoolTest, ChainCommittedBlockByBlockIsOneStoredEvent) {
  BlockPool pool(kBlocks, kBlockSize);
  // A sequence that continues a prefix held elsewhere (parent 99), filling blocks one by one.
  for (int32_t b = 0; b < 4; ++b) {
    ASSERT_EQ(pool.allocate(), b);
    ASSERT_TRUE(pool.commit(b, H(100 + b), H(b == 0 ? 99 : 100 + b - 1)));
  }
  EXPECT_EQ(pool.take_events(), (Events{stored(99, {100, 101, 102, 103})}));
  EXPECT_TRUE(pool.take_events().empty());  // taken means gone

  // Coalescing never reaches back into a batch already taken.
  ASSERT_EQ(pool.allocate(), 4);
  ASSERT_TRUE(pool.commit(4, H(104), H(103)));
  EXPECT_EQ(pool.take_events(), (Events{stored(103, {104})}));
}

TEST(BlockPoolTest, InterleavedChainsGiveSeparateEvents) {
  BlockPool pool(kBlocks, kBlockSize);
  for (int32_t b = 0; b < 5; ++b)
    ASSERT_EQ(pool.allocate(), b);
  ASSERT_TRUE(pool.commit(0, H(1), std::nullopt));   // chain A
  ASSERT_TRUE(pool.commit(1, H(11), std::nullopt));  // chain B
  ASSERT_TRUE(pool.commit(2, H(2), H(1)));           // A
  ASSERT_TRUE(pool.commit(3, H(12), H(11)));         // B
  ASSERT_TRUE(pool.commit(4, H(13), H(12)));         // B again: continues the last event
  EXPECT_EQ(pool.take_events(), (Events{stored(std::nullopt, {1}), stored(std::nullopt, {11}),
                                        stored(1, {2}), stored(11, {12, 13})}));
}

TEST(BlockPoolTest, RemovalsAndStoresKeepTheirOrder) {
  BlockPool pool(2, kBlockSize);
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_EQ(pool.allocate(), 1);
  ASSERT_TRUE(pool.commit(0, H(1), std::nullopt));
  ASSERT_TRUE(pool.commit(1, H(2), H(1)));
  pool.release(1);
  pool.release(0);  // LRU: 1 0
  ASSERT_EQ(pool.allocate(), 1);
  ASSERT_TRUE(pool.commit(1, H(3), std::nullopt));
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_TRUE(pool.commit(0, H(4), H(3)));
  // A removal between two stores stops them coalescing, even where one chain continues the other.
  EXPECT_EQ(pool.take_events(), (Events{stored(std::nullopt, {1, 2}), removed({2}),
                                        stored(std::nullopt, {3}), removed({1}), stored(3, {4})}));
}

// Applies `events` to a fresh index as replica 0, failing on any refused event.
void rebuild(RadixIndex& index, const Events& events) {
  for (const KvEvent& e : events) {
    const Status s = index.apply(0, e);
    ASSERT_TRUE(s.ok()) << s.message();
  }
}

TEST(BlockPoolTest, SnapshotListsParentsBeforeChildrenAndRebuildsTheIndex) {
  BlockPool pool(kBlocks, kBlockSize);
  for (int32_t b = 0; b < 8; ++b)
    ASSERT_EQ(pool.allocate(), b);
  // Committed children first, in a scattered order, so block ids do not follow chain order:
  //   1 ─ 2 ─ 3        (blocks 5, 2, 0; 3 is evicted below)
  //    └─ 4 ─ 5        (blocks 6, 1)
  //   7                (block 3)
  //   8                (block 4)
  ASSERT_TRUE(pool.commit(0, H(3), H(2)));
  ASSERT_TRUE(pool.commit(1, H(5), H(4)));
  ASSERT_TRUE(pool.commit(2, H(2), H(1)));
  ASSERT_TRUE(pool.commit(3, H(7), std::nullopt));
  ASSERT_TRUE(pool.commit(4, H(8), std::nullopt));
  ASSERT_TRUE(pool.commit(5, H(1), std::nullopt));
  ASSERT_TRUE(pool.commit(6, H(4), H(1)));
  // Cached blocks are part of the snapshot; evicted ones are not.
  pool.release(0);
  pool.release(6);
  pool.release(4);
  pool.release(7);  // unhashed: free
  ASSERT_EQ(pool.allocate(), 7);
  ASSERT_EQ(pool.allocate(), 8);
  ASSERT_EQ(pool.allocate(), 9);
  ASSERT_EQ(pool.allocate(), 0);  // evicts hash 3

  // Roots in block order (blocks 3, 4, 5), each tree depth first with children by block id; a
  // chain comes out as one event.
  const Events snapshot = pool.snapshot();
  EXPECT_EQ(snapshot, (Events{stored(std::nullopt, {7}), stored(std::nullopt, {8}),
                              stored(std::nullopt, {1, 2}), stored(1, {4, 5})}));
  EXPECT_EQ(pool.snapshot(), snapshot);  // deterministic, and does not consume anything

  testing::FakeClock clock;
  RadixIndex index(clock);
  rebuild(index, snapshot);
  std::vector<BlockHash> held;
  for (int32_t b = 0; b < pool.num_blocks(); ++b) {
    if (const std::optional<BlockHash> h = pool.hash_of(b)) {
      held.push_back(*h);
      EXPECT_TRUE(index.holds(0, *h)) << "block " << b;
    }
  }
  EXPECT_EQ(index.num_blocks(0), held.size());
  EXPECT_EQ(held.size(), 6u);
  index.check_invariants();
}

TEST(BlockPoolTest, SnapshotOfABlockWhoseParentIsGoneNamesThatParent) {
  BlockPool pool(3, kBlockSize);
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_EQ(pool.allocate(), 1);
  ASSERT_TRUE(pool.commit(0, H(1), std::nullopt));
  ASSERT_TRUE(pool.commit(1, H(2), H(1)));
  pool.release(0);  // released parent first: it is the older cached block
  pool.release(1);
  ASSERT_EQ(pool.allocate(), 2);
  ASSERT_EQ(pool.allocate(), 0);  // evicts hash 1, its child stays cached
  EXPECT_EQ(pool.snapshot(), (Events{stored(1, {2})}));
}

TEST(BlockPoolTest, SnapshotOfAnEmptyPoolIsEmpty) {
  BlockPool pool(kBlocks, kBlockSize);
  EXPECT_TRUE(pool.snapshot().empty());
  ASSERT_EQ(pool.allocate(), 0);  // used but unhashed
  EXPECT_TRUE(pool.snapshot().empty());
}

TEST(BlockPoolDeathTest, MisuseAsserts) {
#ifdef NDEBUG
  GTEST_SKIP() << "asserts are compiled out";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        BlockPool pool(kBlocks, kBlockSize);
        pool.release(0);
      },
      "");
  EXPECT_DEATH(
      {
        BlockPool pool(kBlocks, kBlockSize);
        pool.ref(0);
      },
      "");
  EXPECT_DEATH(
      {
        BlockPool pool(kBlocks, kBlockSize);
        pool.commit(0, H(1), std::nullopt);  // commit needs a used block
      },
      "");
#endif
}

// The pool against a model that keeps, per block, a refcount and a hash, plus the LRU as a plain
// vector. Every step checks ids, refcounts, hashes, counts and the exact events; a router view
// built from the events, and one rebuilt from a snapshot, must equal the set of held hashes.
class BlockPoolModelTest : public ::testing::Test {
 protected:
  struct ModelBlock {
    int32_t refcount = 0;
    std::optional<BlockHash> hash;
    std::optional<BlockHash> parent;
  };

  std::vector<int32_t> blocks_in(bool (*pred)(const ModelBlock&)) const {
    std::vector<int32_t> out;
    for (int32_t b = 0; b < kBlocks; ++b)
      if (pred(model_[b])) out.push_back(b);
    return out;
  }
  static bool is_used(const ModelBlock& m) { return m.refcount > 0; }
  static bool is_cached(const ModelBlock& m) { return m.refcount == 0 && m.hash.has_value(); }
  static bool is_free(const ModelBlock& m) { return m.refcount == 0 && !m.hash.has_value(); }
  static bool is_referenceable(const ModelBlock& m) { return is_used(m) || is_cached(m); }

  std::set<uint64_t> model_hashes() const {
    std::set<uint64_t> out;
    for (const ModelBlock& m : model_)
      if (m.hash) out.insert(m.hash->value);
    return out;
  }

  void check_state() {
    int32_t used = 0, cached = 0, free = 0;
    for (int32_t b = 0; b < kBlocks; ++b) {
      const ModelBlock& m = model_[b];
      ASSERT_EQ(pool_.refcount(b), m.refcount) << "block " << b;
      ASSERT_EQ(pool_.hash_of(b), m.hash) << "block " << b;
      if (m.hash) {
        ASSERT_EQ(pool_.lookup(*m.hash), b);
      }
      used += is_used(m);
      cached += is_cached(m);
      free += is_free(m);
    }
    const BlockPoolCounts c = pool_.counts();
    ASSERT_EQ(c.num_blocks_total, kBlocks);
    ASSERT_EQ(c.num_blocks_used + c.num_blocks_cached + c.num_blocks_free, kBlocks);
    ASSERT_EQ(c.num_blocks_used, used);
    ASSERT_EQ(c.num_blocks_cached, cached);
    ASSERT_EQ(c.num_blocks_free, free);
    ASSERT_EQ(pool_.num_allocatable(), cached + free);
    ASSERT_EQ(static_cast<int32_t>(lru_.size()), cached);
  }

  void release_in_model(int32_t b) {
    if (--model_[b].refcount == 0 && model_[b].hash) lru_.push_back(b);
  }

  std::mt19937_64 rng_{20240611};
  BlockPool pool_{kBlocks, kBlockSize};
  std::vector<ModelBlock> model_ = std::vector<ModelBlock>(kBlocks);
  std::vector<int32_t> lru_;   // cached blocks, least recently released first
  std::set<uint64_t> router_;  // what a subscriber knows from the events
  uint64_t next_hash_ = 1;
};

TEST_F(BlockPoolModelTest, RandomOperationsMatchTheModel) {
  int evictions = 0, full_pool = 0, refused_commits = 0, revivals = 0;
  for (int step = 0; step < 2000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    Events expected;
    const int op = static_cast<int>(rng_() % 100);
    const std::vector<int32_t> used = blocks_in(is_used);
    if (op < 30) {  // allocate
      const std::vector<int32_t> free = blocks_in(is_free);
      std::optional<int32_t> want;
      if (!free.empty()) {
        want = free.front();
      } else if (!lru_.empty()) {
        want = lru_.front();
        lru_.erase(lru_.begin());
        ++evictions;
        expected.push_back(KvRemoved{{*model_[*want].hash}});
        model_[*want].hash.reset();
      }
      ASSERT_EQ(pool_.allocate(), want);
      full_pool += !want;
      if (want) model_[*want].refcount = 1;
    } else if (op < 58) {  // release
      if (used.empty()) continue;
      const int32_t b = used[rng_() % used.size()];
      pool_.release(b);
      release_in_model(b);
    } else if (op < 70) {  // ref a used or cached block
      const std::vector<int32_t> live = blocks_in(is_referenceable);
      if (live.empty()) continue;
      const int32_t b = live[rng_() % live.size()];
      pool_.ref(b);
      if (model_[b].refcount++ == 0) {
        lru_.erase(std::find(lru_.begin(), lru_.end(), b));
        ++revivals;
      }
    } else {  // commit
      if (used.empty()) continue;
      const int32_t b = used[rng_() % used.size()];
      const std::set<uint64_t> held = model_hashes();
      const std::vector<uint64_t> held_list(held.begin(), held.end());
      BlockHash hash{next_hash_};
      std::optional<BlockHash> parent;
      const int kind = static_cast<int>(rng_() % 10);
      if (kind < 2 && !held_list.empty()) {
        hash = BlockHash{held_list[rng_() % held_list.size()]};  // duplicate content
      } else {
        ++next_hash_;
      }
      if (kind >= 4 && !held_list.empty()) {
        parent = BlockHash{held_list[rng_() % held_list.size()]};  // extends a held block
      } else if (kind == 3) {
        parent = BlockHash{1'000'000 + rng_() % 100};  // a parent this pool never held
      }
      if (parent == hash) parent.reset();
      const bool ok = !model_[b].hash && !held.contains(hash.value);
      ASSERT_EQ(pool_.commit(b, hash, parent), ok);
      refused_commits += !ok;
      if (ok) {
        model_[b].hash = hash;
        model_[b].parent = parent;
        expected.push_back(KvStored{parent, {hash}});
      }
    }
    const Events events = pool_.take_events();
    ASSERT_EQ(events, expected);
    for (const KvEvent& e : events) {
      if (const auto* s = std::get_if<KvStored>(&e)) {
        for (const BlockHash& h : s->hashes)
          ASSERT_TRUE(router_.insert(h.value).second);
      } else {
        for (const BlockHash& h : std::get<KvRemoved>(e).hashes)
          ASSERT_EQ(router_.erase(h.value), 1u);
      }
    }
    ASSERT_EQ(router_, model_hashes());
    ASSERT_NO_FATAL_FAILURE(check_state());

    if (step % 25 == 0) {
      // Snapshot: every held hash once with its committed parent, a held parent before its child.
      std::set<uint64_t> seen;
      for (const KvEvent& e : pool_.snapshot()) {
        const KvStored& s = std::get<KvStored>(e);
        ASSERT_FALSE(s.hashes.empty());
        if (s.parent && pool_.lookup(*s.parent)) {
          ASSERT_TRUE(seen.contains(s.parent->value));
        }
        std::optional<BlockHash> parent = s.parent;
        for (const BlockHash& h : s.hashes) {
          ASSERT_TRUE(seen.insert(h.value).second);
          ASSERT_EQ(model_[*pool_.lookup(h)].parent, parent);
          parent = h;
        }
      }
      ASSERT_EQ(seen, model_hashes());
    }
  }
  // The walk reached the interesting states, not just an empty pool.
  EXPECT_GT(evictions, 50);
  EXPECT_GT(full_pool, 10);
  EXPECT_GT(refused_commits, 50);
  EXPECT_GT(revivals, 20);
}

}  // namespace
}  // namespace kvc
