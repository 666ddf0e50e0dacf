// The block pool's host tier (replica/core/block_pool.h, "Host tier"): evicted blocks offloaded
// to host memory and loaded back, the events routers see, and the engine's tokens with it on the
// CPU backend, against the same engine without it.
#include <algorithm>
#include <cstdint>
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
  EXPECT_EQ(pool.take_transfers(), (std::vector<KvTransfer>{{KvTransfer::Kind::kOffload, b0, 0},
                                                            {KvTransfer::Kind::kOffload, b1, 1}}));
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
  EXPECT_EQ(pool.take_transfers(), (std::vector<KvTransfer>{{KvTransfer::Kind::kLoad, *block, 0}}));
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

// Random steps on a small pool and host tier, against content. Each step records several
// operations as a schedule does (computing a block, releasing, finding a prefix again in the
// pool or loading it from the host tier, copy-on-write copies), keeping what each block and slot
// should hold at that point of the schedule; then, as the backend does, the step's transfers
// are done in order on the "physical" contents and its computed blocks written. Every used or
// hashed block and every held slot must hold what the schedule said; a router fed the events
// must hold exactly the hashes of either tier, and a snapshot must name each once.
TEST(HostTierTest, RandomStepsKeepEveryBlocksContentAndTheRoutersView) {
  constexpr int32_t kBlocks = 6, kHost = 5;
  BlockPool pool(kBlocks, kBlockSize, 0, kHost);
  std::mt19937_64 rng(7);
  // Contents: what the schedule says (want_) and what the transfers and writes made (device_).
  std::vector<uint64_t> want_device(kBlocks, 0), want_host(kHost, 0), device(kBlocks, 0),
      host(kHost, 0);
  std::set<uint64_t> router;
  std::vector<int32_t> used;  // one entry per reference
  uint64_t next_content = 1;  // hashes computed so far: 1 .. next_content - 1, each its content
  int loads = 0, copies = 0, steps_mixing = 0;
  for (int step = 0; step < 3000; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<std::pair<int32_t, uint64_t>> writes;  // computed this step, written last
    std::set<int32_t> written;                         // their blocks stay used until then
    std::vector<KvTransfer> pending;  // the step's transfers, as the backend will get them
    // The schedule's own view of what each new transfer does, at the point it was recorded.
    auto sync = [&] {
      std::vector<KvTransfer> t = pool.take_transfers();
      for (const KvTransfer& x : t) {
        switch (x.kind) {
          case KvTransfer::Kind::kOffload:
            want_host[x.other] = want_device[x.block];
            break;
          case KvTransfer::Kind::kLoad:
            want_device[x.block] = want_host[x.other];
            break;
          case KvTransfer::Kind::kCopy:
            want_device[x.block] = want_device[x.other];
            break;
        }
      }
      pending.insert(pending.end(), t.begin(), t.end());
    };
    const int ops = 1 + static_cast<int>(rng() % 6);
    for (int k = 0; k < ops; ++k) {
      const int op = static_cast<int>(rng() % 100);
      if (op < 30) {  // compute a block (the allocation may evict)
        const std::optional<int32_t> b = pool.allocate();
        sync();
        if (!b) continue;
        // Mostly new content; at times content only the host tier holds (computed again past a
        // prefix lookup's limit), which is committed without a stored event.
        uint64_t h = 0;
        if (rng() % 5 == 0) {
          for (uint64_t x = 1; x < next_content; ++x)
            if (pool.host_lookup(H(x)) && !pool.lookup(H(x))) h = x;
        }
        if (h == 0) h = next_content++;
        want_device[*b] = h;
        writes.emplace_back(*b, h);
        written.insert(*b);
        std::optional<BlockHash> parent;
        if (h > 1 && rng() % 2 == 0) parent = H(h - 1 - rng() % std::min<uint64_t>(h - 1, 4));
        ASSERT_TRUE(pool.commit(*b, H(h), parent));
        used.push_back(*b);
      } else if (op < 60) {  // release a reference (not of a block computed this step)
        if (used.empty()) continue;
        const size_t i = rng() % used.size();
        if (written.contains(used[i])) continue;
        pool.release(used[i]);
        used.erase(used.begin() + static_cast<std::ptrdiff_t>(i));
      } else if (op < 80) {  // find a recent hash again: in the pool (ref) or the host tier (load)
        if (next_content == 1) continue;
        const uint64_t h = next_content - 1 - rng() % std::min<uint64_t>(next_content - 1, 12);
        if (const std::optional<int32_t> b = pool.lookup(H(h))) {
          pool.ref(*b);
          used.push_back(*b);
        } else if (const std::optional<int32_t> sl = pool.host_lookup(H(h))) {
          pool.pin_host(*sl);
          const std::optional<int32_t> b = pool.load(*sl);
          sync();
          if (!b) {
            pool.unpin_host(*sl);
            continue;
          }
          ASSERT_EQ(want_device[*b], h) << "the schedule loaded the wrong slot";
          ++loads;
          used.push_back(*b);
        }
      } else {  // copy-on-write: a used block's content into a new, unhashed block
        if (used.empty()) continue;
        const int32_t src = used[rng() % used.size()];
        if (written.contains(src)) continue;  // a copy reads KV of earlier steps
        const std::optional<int32_t> dst = pool.allocate();
        sync();
        if (!dst) continue;
        pool.note_copy(src, *dst);
        sync();
        ++copies;
        used.push_back(*dst);
      }
    }
    sync();
    // The step: its transfers in order, then the blocks it computed.
    bool offload_or_load = false, copy = false;
    for (const KvTransfer& x : pending) {
      switch (x.kind) {
        case KvTransfer::Kind::kOffload:
          host[x.other] = device[x.block];
          offload_or_load = true;
          break;
        case KvTransfer::Kind::kLoad:
          device[x.block] = host[x.other];
          offload_or_load = true;
          break;
        case KvTransfer::Kind::kCopy:
          device[x.block] = device[x.other];
          copy = true;
          break;
      }
    }
    steps_mixing += offload_or_load && copy ? 1 : 0;
    for (const auto& [b, c] : writes)
      device[b] = c;
    for (int32_t b = 0; b < kBlocks; ++b) {
      const bool is_used = std::find(used.begin(), used.end(), b) != used.end();
      if (const std::optional<BlockHash> x = pool.hash_of(b)) {
        ASSERT_EQ(want_device[b], x->value) << "block " << b;
      }
      if (is_used || pool.hash_of(b)) {
        ASSERT_EQ(device[b], want_device[b]) << "block " << b;
      }
    }
    std::set<uint64_t> held;
    for (int32_t b = 0; b < kBlocks; ++b)
      if (const std::optional<BlockHash> x = pool.hash_of(b)) held.insert(x->value);
    for (uint64_t x = 1; x < next_content; ++x) {
      if (const std::optional<int32_t> sl = pool.host_lookup(H(x))) {
        ASSERT_EQ(want_host[*sl], x) << "slot " << *sl;
        ASSERT_EQ(host[*sl], x) << "slot " << *sl;
        held.insert(x);
      }
    }
    for (const KvEvent& e : pool.take_events()) {
      if (const auto* st = std::get_if<KvStored>(&e)) {
        for (const BlockHash& x : st->hashes)
          ASSERT_TRUE(router.insert(x.value).second) << "stored twice: " << x.value;
      } else {
        for (const BlockHash& x : std::get<KvRemoved>(e).hashes)
          ASSERT_EQ(router.erase(x.value), 1u) << "removed unheld: " << x.value;
      }
    }
    ASSERT_EQ(router, held);
    if (step % 50 == 0) {
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
  EXPECT_GT(copies, 100);
  EXPECT_GT(steps_mixing, 50);  // steps whose copies and host moves had to keep their order
  EXPECT_GT(pool.host_counts().offloaded, 100);
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

// Three documents of 6 blocks each, asked about in turn, then again: a pool of 16 blocks holds
// two of them (with their tails) at most, so the third pushes the first out. With a host tier the
// first's blocks come back from host memory, loaded, not computed; the tokens are those of a large
// pool that never evicted, and of a pool without a tier that computes them again.
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
