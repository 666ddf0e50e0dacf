// The block pool's host tier (replica/core/block_pool.h, "Host tier"): evicted blocks offloaded
// to host memory and loaded back, the events routers see, and the engine's tokens with it on the
// CPU backend, against the same engine without it.
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/core/block_pool.h"
#include "replica/core/engine.h"
#include "replica/model/weights.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

constexpr int32_t kBlockSize = 16;

BlockHash H(uint64_t v) {
  return BlockHash{v};
}

// Allocates a block, commits `hash` (parent `parent`) to it and releases it: a cached block.
int32_t cache_block(BlockPool& pool, uint64_t hash, std::optional<uint64_t> parent) {
  const std::optional<int32_t> b = pool.allocate();
  EXPECT_TRUE(b.has_value());
  EXPECT_TRUE(pool.commit(*b, H(hash), parent ? std::optional(H(*parent)) : std::nullopt));
  pool.release(*b);
  return *b;
}

std::vector<uint64_t> removed_hashes(const std::vector<KvEvent>& events) {
  std::vector<uint64_t> out;
  for (const KvEvent& e : events)
    if (const auto* r = std::get_if<KvRemoved>(&e))
      for (const BlockHash& h : r->hashes)
        out.push_back(h.value);
  return out;
}

TEST(HostTierTest, AnEvictedBlockGoesToHostMemoryAndStaysHeld) {
  BlockPool pool(2, kBlockSize, /*cold_reuse_rate=*/0, /*num_host_blocks=*/4);
  const int32_t b0 = cache_block(pool, 1, std::nullopt);
  const int32_t b1 = cache_block(pool, 2, 1);
  (void)pool.take_events();
  // Both blocks are cached; two allocations evict them (oldest first) into slots 0 and 1.
  ASSERT_EQ(pool.allocate(), b0);
  ASSERT_EQ(pool.allocate(), b1);
  EXPECT_TRUE(pool.take_events().empty());  // still held: no removed event
  EXPECT_EQ(pool.lookup(H(1)), std::nullopt);
  EXPECT_EQ(pool.host_lookup(H(1)), 0);
  EXPECT_EQ(pool.host_lookup(H(2)), 1);
  EXPECT_EQ(pool.take_transfers(), (std::vector<KvTransfer>{{true, b0, 0}, {true, b1, 1}}));
  const HostTierCounts c = pool.host_counts();
  EXPECT_EQ(c.num_blocks_total, 4);
  EXPECT_EQ(c.num_blocks_held, 2);
  EXPECT_EQ(c.offloaded, 2);
  EXPECT_EQ(c.loaded, 0);
  // The snapshot a new subscriber gets names them as one chain.
  EXPECT_EQ(pool.snapshot(), (std::vector<KvEvent>{KvStored{std::nullopt, {H(1), H(2)}}}));
}

TEST(HostTierTest, ALoadedBlockKeepsItsSlotSoEvictingItAgainCopiesNothing) {
  BlockPool pool(2, kBlockSize, 0, 4);
  cache_block(pool, 1, std::nullopt);
  ASSERT_TRUE(pool.allocate().has_value());
  ASSERT_TRUE(pool.allocate().has_value());  // evicts hash 1 to slot 0
  (void)pool.take_transfers();
  (void)pool.take_events();
  pool.release(0);
  pool.release(1);
  const std::optional<int32_t> slot = pool.host_lookup(H(1));
  ASSERT_EQ(slot, 0);
  pool.pin_host(*slot);
  const std::optional<int32_t> block = pool.load(*slot);
  ASSERT_TRUE(block.has_value());
  EXPECT_EQ(pool.refcount(*block), 1);
  EXPECT_EQ(pool.hash_of(*block), H(1));
  EXPECT_EQ(pool.lookup(H(1)), *block);
  EXPECT_EQ(pool.host_lookup(H(1)), 0);  // inclusive
  EXPECT_EQ(pool.take_transfers(), (std::vector<KvTransfer>{{false, *block, 0}}));
  EXPECT_TRUE(pool.take_events().empty());  // it was held all along
  EXPECT_EQ(pool.host_counts().loaded, 1);
  // Released and evicted again: its copy is in the slot already.
  pool.release(*block);
  ASSERT_TRUE(pool.allocate().has_value());
  ASSERT_TRUE(pool.allocate().has_value());
  EXPECT_TRUE(pool.take_transfers().empty());
  EXPECT_TRUE(pool.take_events().empty());
  EXPECT_EQ(pool.host_counts().offloaded, 1);
}

TEST(HostTierTest, AFullHostTierLetsItsOldestGoAndOnlyThenIsItRemoved) {
  BlockPool pool(1, kBlockSize, 0, 2);
  for (uint64_t h = 1; h <= 3; ++h) {
    cache_block(pool, h, std::nullopt);
    ASSERT_TRUE(pool.allocate().has_value());  // evicts hash h from the pool
    pool.release(0);
  }
  // Slots held 1 then 2; evicting 3 let 1 go.
  EXPECT_EQ(removed_hashes(pool.take_events()), (std::vector<uint64_t>{1}));
  EXPECT_EQ(pool.host_lookup(H(1)), std::nullopt);
  EXPECT_EQ(pool.host_lookup(H(3)), 0);
  EXPECT_EQ(pool.host_lookup(H(2)), 1);
}

TEST(HostTierTest, PinnedSlotsAreNotReusedAndAnEvictionWithNoSlotIsDropped) {
  BlockPool pool(2, kBlockSize, 0, 1);
  cache_block(pool, 1, std::nullopt);
  ASSERT_TRUE(pool.allocate().has_value());
  ASSERT_TRUE(pool.allocate().has_value());  // hash 1 -> slot 0
  pool.release(0);
  pool.release(1);
  ASSERT_EQ(pool.host_lookup(H(1)), 0);
  // A second block is committed and cached while slot 0 is pinned for a load.
  ASSERT_EQ(pool.allocate(), 0);
  ASSERT_TRUE(pool.commit(0, H(2), std::nullopt));
  pool.release(0);
  (void)pool.take_events();
  (void)pool.take_transfers();
  pool.pin_host(0);
  // The load's allocation takes free block 1; a second allocation evicts hash 2 with no slot free.
  const std::optional<int32_t> loaded = pool.load(0);
  ASSERT_EQ(loaded, 1);
  pool.pin_host(0);  // pinned again, as if a second prompt were loading it
  ASSERT_EQ(pool.allocate(), 0);
  EXPECT_EQ(removed_hashes(pool.take_events()), (std::vector<uint64_t>{2}));
  EXPECT_EQ(pool.host_counts().dropped, 1);
  EXPECT_EQ(pool.host_lookup(H(1)), 0);
  pool.unpin_host(0);
}

TEST(HostTierTest, ClearingForgetsTheHostTierToo) {
  BlockPool pool(1, kBlockSize, 0, 4);
  cache_block(pool, 1, std::nullopt);
  ASSERT_TRUE(pool.allocate().has_value());
  pool.release(0);
  EXPECT_EQ(pool.clear_hashes(), 1);
  EXPECT_EQ(pool.host_lookup(H(1)), std::nullopt);
  EXPECT_EQ(pool.host_counts().num_blocks_held, 0);
  EXPECT_TRUE(pool.take_transfers().empty());
  EXPECT_TRUE(pool.snapshot().empty());
}

// Random operations on a small pool and host tier, against content: each pool block and host
// slot holds a value, the hash computed into it; transfers are applied in order before anything
// writes (as the backend does before a step). Every hashed block and held slot must hold its
// hash, and a router built from the events (and one from a snapshot) must hold exactly the
// hashes of either tier.
TEST(HostTierTest, RandomOperationsKeepEveryHeldBlocksContentAndTheRoutersView) {
  constexpr int32_t kBlocks = 6, kHost = 5;
  BlockPool pool(kBlocks, kBlockSize, 0, kHost);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> device(kBlocks, 0), host(kHost, 0);
  std::set<uint64_t> router;
  std::vector<int32_t> used;  // one entry per reference
  uint64_t next_hash = 1;
  auto apply_transfers = [&] {
    for (const KvTransfer& t : pool.take_transfers()) {
      if (t.to_host) {
        host[t.host_block] = device[t.block];
      } else {
        device[t.block] = host[t.host_block];
      }
    }
  };
  int loads = 0, offloads_seen = 0;
  for (int step = 0; step < 4000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int op = static_cast<int>(rng() % 100);
    if (op < 35) {  // compute a block (the allocation may evict)
      const std::optional<int32_t> b = pool.allocate();
      if (!b) continue;
      apply_transfers();
      // Mostly new content; at times content only the host tier holds (computed again past a
      // prefix lookup's limit), which is committed without a stored event.
      uint64_t h = 0;
      if (rng() % 5 == 0) {
        for (uint64_t x = next_hash - 1; x >= 1 && x + 12 >= next_hash && h == 0; --x)
          if (pool.host_lookup(H(x)) && !pool.lookup(H(x))) h = x;
      }
      if (h == 0) h = next_hash++;
      device[*b] = h;
      std::optional<BlockHash> parent;
      if (h > 1 && rng() % 2 == 0) parent = H(h - 1 - rng() % std::min<uint64_t>(h - 1, 4));
      ASSERT_TRUE(pool.commit(*b, H(h), parent));
      used.push_back(*b);
    } else if (op < 70) {  // release a reference
      if (used.empty()) continue;
      const size_t i = rng() % used.size();
      pool.release(used[i]);
      used.erase(used.begin() + static_cast<std::ptrdiff_t>(i));
    } else {  // find a recent hash again: in the pool (ref) or the host tier (load)
      const uint64_t h =
          next_hash > 1 ? next_hash - 1 - rng() % std::min<uint64_t>(next_hash - 1, 12) : 0;
      if (h == 0) continue;
      if (const std::optional<int32_t> b = pool.lookup(H(h))) {
        pool.ref(*b);
        used.push_back(*b);
      } else if (const std::optional<int32_t> s = pool.host_lookup(H(h))) {
        pool.pin_host(*s);
        const std::optional<int32_t> b = pool.load(*s);
        if (!b) {
          pool.unpin_host(*s);
          continue;
        }
        apply_transfers();
        ++loads;
        ASSERT_EQ(device[*b], h) << "loaded the wrong content";
        used.push_back(*b);
      }
    }
    offloads_seen = static_cast<int>(pool.host_counts().offloaded);
    apply_transfers();
    for (const KvEvent& e : pool.take_events()) {
      if (const auto* s = std::get_if<KvStored>(&e)) {
        for (const BlockHash& x : s->hashes)
          ASSERT_TRUE(router.insert(x.value).second) << "stored twice: " << x.value;
      } else {
        for (const BlockHash& x : std::get<KvRemoved>(e).hashes)
          ASSERT_EQ(router.erase(x.value), 1u) << "removed unheld: " << x.value;
      }
    }
    std::set<uint64_t> held;
    for (int32_t b = 0; b < kBlocks; ++b) {
      if (const std::optional<BlockHash> x = pool.hash_of(b)) {
        ASSERT_EQ(device[b], x->value) << "block " << b;
        held.insert(x->value);
      }
    }
    for (uint64_t x = 1; x < next_hash; ++x) {
      if (const std::optional<int32_t> s = pool.host_lookup(H(x))) {
        ASSERT_EQ(host[*s], x) << "slot " << *s;
        held.insert(x);
      }
    }
    ASSERT_EQ(router, held);
    if (step % 50 == 0) {
      // A snapshot names every held hash once, a held parent before its child.
      std::set<uint64_t> seen;
      for (const KvEvent& e : pool.snapshot()) {
        const KvStored& st = std::get<KvStored>(e);
        if (st.parent && held.contains(st.parent->value)) {
          ASSERT_TRUE(seen.contains(st.parent->value));
        }
        for (const BlockHash& x : st.hashes)
          ASSERT_TRUE(seen.insert(x.value).second);
      }
      ASSERT_EQ(seen, held);
    }
  }
  EXPECT_GT(loads, 100);
  EXPECT_GT(offloads_seen, 100);
  EXPECT_GT(pool.host_counts().num_blocks_held, 0);
}

class HostTierEngineTest : public ::testing::Test {
 protected:
  static ModelWeights& weights() {
    static ModelWeights w = random_weights(*preset_config("tiny"), 42);
    return w;
  }

  GenerationRequest request(const std::string& prompt, int32_t n, int32_t max_tokens) {
    GenerationRequest r;
    r.prompt = tokenizer_.encode(prompt);
    r.n = n;
    r.params.temperature = 0.8f;
    r.params.max_tokens = max_tokens;
    r.params.seed = 11;
    r.params.ignore_eos = true;
    return r;
  }

  struct Run {
    std::vector<std::vector<int32_t>> tokens;  // per request, sibling 0's generated tokens
    int64_t hit_tokens = 0, host_loads = 0, host_offloads = 0;
  };

  // The prompts in turn, each run to its end, on a pool of `blocks` with `host_blocks` slots.
  Run run(const std::vector<std::string>& prompts, int32_t blocks, int32_t host_blocks) {
    CpuBackend backend(weights(), blocks, kBlockSize);
    backend.set_host_blocks(host_blocks);
    Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
    Run out;
    for (const std::string& p : prompts) {
      EXPECT_TRUE(engine.submit(request(p, 2, 6)).ok());
      while (engine.has_work()) {
        StepResult step = engine.step();
        EXPECT_TRUE(step.error.empty()) << step.error;
        out.hit_tokens += step.stats.prefix_cache_hit_tokens;
        out.host_loads += step.stats.num_host_loads;
        out.host_offloads += step.stats.num_host_offloads;
        for (const auto& g : step.finished) {
          const Sequence& s = g->seqs.at(0);
          out.tokens.emplace_back(s.tokens.begin() + static_cast<std::ptrdiff_t>(g->prompt.size()),
                                  s.tokens.end());
        }
      }
    }
    EXPECT_EQ(engine.pool().counts().num_blocks_used, 0);
    return out;
  }

  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
};

// Three documents of 6 blocks each, asked about in turn, then again: a pool of 12 blocks holds
// two of them at most, so the third pushes the first out. With a host tier the first's blocks
// come back from host memory, loaded, not computed; the tokens are those of a large pool that
// never evicted, and of a pool without a tier that computes them again.
TEST_F(HostTierEngineTest, PromptsLoadedFromHostMemoryGiveTheTokensOfComputedOnes) {
  std::vector<std::string> prompts;
  for (char d : {'a', 'b', 'c', 'a', 'b', 'c'})
    prompts.push_back(std::string(96, d) + " question " + std::to_string(prompts.size()));
  const Run large = run(prompts, 256, 0);
  const Run without = run(prompts, 16, 0);
  const Run with = run(prompts, 16, 64);
  ASSERT_EQ(large.tokens.size(), prompts.size());
  EXPECT_EQ(with.tokens, large.tokens);
  EXPECT_EQ(without.tokens, large.tokens);
  // The second round's three prompts find their 96-token documents (6 blocks each).
  EXPECT_EQ(large.hit_tokens, 3 * 96);
  EXPECT_EQ(with.hit_tokens, 3 * 96);
  EXPECT_LT(without.hit_tokens, 3 * 96);
  EXPECT_GT(with.host_loads, 0);
  EXPECT_GT(with.host_offloads, 0);
  EXPECT_EQ(without.host_loads + without.host_offloads, 0);
}

}  // namespace
}  // namespace kvc
