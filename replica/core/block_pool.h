// The replica's pool of fixed-size KV blocks: reference counts, content hashes for the prefix
// cache, an LRU of released-but-cached blocks evicted only when a block is needed, and the KV
// events (router key space) that tell routers what is held.
//
// Insertion by reuse. A released block goes to the most recently used end of the LRU, unless
// the blocks that branched off the same cached block before it were seldom reused: then it goes
// to the evicting end, where the next allocation takes it first. Under LRU alone, prompts whose
// tails nobody asks for again (one-shot questions after a shared system prompt, RAG documents)
// push out what is asked for again (conversations, shared prefixes) whenever the pool is full.
// Each hashed block remembers its CacheBranch; per branch the pool counts blocks committed there
// and those later found by a prefix lookup (note_hit), and predicts cold below kColdReuseRate
// (with one reuse in two blocks as the prior, so a branch is cold only on evidence). A block once
// reused is never cold. On the Mooncake trace, with the A10G fleet's memory pooled as one cache,
// this rule serves 94.1% of what an unbounded cache serves where LRU serves 88.4% (offline,
// bench/results/runs/2026-12-06-s17-mooncake-min/pooled_eviction.py); across the sim fleet's 16
// small pools it moved hits by +0.5 points (bench/results/routing-profiles.md).
//
// A block is in exactly one state:
//   free    refcount 0, no hash          (on the free list)
//   cached  refcount 0, hash             (on the LRU: its KV can be reused by a later prompt)
//   used    refcount > 0, hash or not    (in some sequence's block table)
//
// Host tier (num_host_blocks > 0: --kv-host-memory-gb). A cached block the LRU evicts is not
// lost: its KV is copied to a slot of the host tier (host memory, the same block size), which
// keeps it under an LRU of its own, and a later prompt whose chain reaches it loads it back into
// a pool block instead of computing it (KvTransfer, done by the backend before the step's other
// work). The tier is inclusive: a loaded block stays in its slot, so evicting it from the pool
// again copies nothing. A hash is held while either tier holds it: a removed event only when the
// last of the two lets it go, and no event when a block moves between them, so routers count a
// block in host memory as held (loading it costs a PCIe copy, about 1/20 of computing it on an
// A10G). When the host tier has no slot to give (every slot being loaded), an evicted block is
// dropped as without a tier. SGLang's HiCache and vLLM's CPU offloading do the same.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "prefix_index/block_hash.h"
#include "prefix_index/kv_event.h"
#include "replica/backend/backend.h"
#include "replica/core/cache_branch.h"

namespace kvc {

struct BlockPoolCounts {
  int32_t num_blocks_total = 0;
  int32_t num_blocks_used = 0;
  int32_t num_blocks_cached = 0;
  int32_t num_blocks_free = 0;
};

struct HostTierCounts {
  int32_t num_blocks_total = 0;
  int32_t num_blocks_held = 0;  // slots holding a block's KV
  int64_t offloaded = 0;        // blocks copied to host memory so far
  int64_t loaded = 0;           // blocks loaded back instead of computed
  int64_t dropped = 0;          // evicted blocks with no slot to go to
};

class BlockPool {
 public:
  // Precondition: num_blocks > 0, block_size > 0, num_host_blocks >= 0. `cold_reuse_rate`:
  // kColdReuseRate, or 0 for LRU alone (nothing is predicted cold). `num_host_blocks`: slots of
  // the host tier (0: none).
  BlockPool(int32_t num_blocks, int32_t block_size, double cold_reuse_rate = kColdReuseRate,
            int32_t num_host_blocks = 0);

  int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t num_host_blocks() const { return static_cast<int32_t>(host_hash_.size()); }
  int32_t block_size() const { return block_size_; }

  // A block for new KV, refcount 1: the lowest-numbered free block, else the least recently
  // released cached block (its hash is dropped and a removed event emitted). nullopt when every
  // block is in use.
  std::optional<int32_t> allocate();
  // Another user of a used or cached block (a cached block becomes used and leaves the LRU).
  void ref(int32_t block);
  // One user fewer; at 0 a hashed block becomes cached (most recently used end of the LRU, or
  // its evicting end for a cold one: "Insertion by reuse" above), an unhashed one free.
  void release(int32_t block);
  // release() of a sequence's blocks, given in chain order (head first): released last first,
  // so that the LRU evicts a chain's tail before its head; cold ones go to the evicting end in
  // that order. `warm`: none is cold (a preempted sequence's, which its recompute will look up).
  void release_chain(std::span<const int32_t> chain, bool warm = false);

  // Where a sequence branching off `at` (its deepest cached block; nullopt: none) puts its
  // blocks: the prediction from the blocks that branched there before.
  CacheBranch branch_at(std::optional<BlockHash> at) const;
  // A prefix lookup reuses this hashed block: its branch is credited (once per block), and the
  // block is never cold again.
  void note_hit(int32_t block);

  // The block holding this content (used or cached), if any. Does not take a reference.
  std::optional<int32_t> lookup(BlockHash hash) const;
  // The host tier's slot holding this content, if any (it may be in the pool too).
  std::optional<int32_t> host_lookup(BlockHash hash) const;
  // A slot about to be loaded (pinned: neither evicted nor reused until load() or unpin_host()).
  void pin_host(int32_t host_block);
  void unpin_host(int32_t host_block);
  // A used block (refcount 1) holding the pinned slot's content, by a load recorded for the
  // backend (take_transfers); the slot is unpinned and keeps its copy. `reused`: the block counts
  // as found again (note_hit; not for a preempted group finding its own). nullopt, the slot still
  // pinned, when every block is in use.
  std::optional<int32_t> load(int32_t host_block, bool reused = true);
  // A copy-on-write copy of block src over dst, recorded among the transfers (with a host tier
  // its order against the loads and offloads matters).
  void note_copy(int32_t src, int32_t dst);
  // Transfers recorded since the last call (offloads, loads, copies), in order: the backend does
  // them before the step.
  std::vector<KvTransfer> take_transfers();
  HostTierCounts host_counts() const;
  // Records that a full, used block holds the content `hash` (whose chain parent is `parent`,
  // nullopt for a first block) and emits a stored event. Returns false and leaves the block
  // unhashed when another block already holds this hash (identical siblings), or when the block
  // is already hashed.
  // `branch`: where the sequence writing it branched off the cache (counted there).
  bool commit(int32_t block, BlockHash hash, std::optional<BlockHash> parent,
              CacheBranch branch = {});

  int32_t refcount(int32_t block) const { return refcount_[block]; }
  std::optional<BlockHash> hash_of(int32_t block) const;
  // Blocks allocate() can still hand out: free + cached.
  int32_t num_allocatable() const { return counts().num_blocks_free + counts().num_blocks_cached; }
  BlockPoolCounts counts() const;

  // A branch is predicted cold when fewer than this share of the blocks committed there (prior:
  // one in two) were reused (the default; EngineConfig::cold_reuse_rate).
  static constexpr double kColdReuseRate = 0.1;
  // Per branch, counts are halved past this many blocks, so that the prediction follows change.
  static constexpr double kBranchCountsHalvedAt = 4096;
  // Branches with counts (root included): bounded by the hashed blocks (a branch's counts go with
  // its block).
  size_t num_branches_counted() const { return branch_counts_.size() + 1; }

  // Forgets every block's content: cached blocks become free, used ones unhashed (freed when
  // released), the host tier empty, and one cleared event says so (a weight update: no KV computed
  // with the old weights may be found again). Returns how many blocks held content.
  int32_t clear_hashes();

  // Events since the last call, in order. Consecutive stored events continuing one chain are
  // coalesced into one.
  std::vector<KvEvent> take_events();
  // Stored events describing every hashed block (used or cached), parents before children: what
  // a new subscriber receives first.
  std::vector<KvEvent> snapshot() const;

 private:
  struct BranchCounts {
    double committed = 0, reused = 0;
  };
  // A hashed block's insertion state.
  struct Origin {
    CacheBranch branch;
    bool counted = false;  // committed with its branch counted
    bool reused = false;   // found by a prefix lookup since it was committed
  };

  // (implementation's choice)
  void evict(int32_t block);
  // A slot for an evicted block's KV: a free one, else the host LRU's oldest (its content let
  // go); nullopt when every slot is pinned (or there is no tier).
  std::optional<int32_t> take_host_slot();
  bool held(BlockHash hash) const {
    return by_hash_.contains(hash) || host_by_hash_.contains(hash);
  }
  void emit(KvEvent event);
  BranchCounts* counts_of(const std::optional<BlockHash>& at);
  const BranchCounts* counts_of(const std::optional<BlockHash>& at) const;

  int32_t block_size_;
  double cold_reuse_rate_;
  std::vector<int32_t> refcount_;
  std::vector<std::optional<BlockHash>> hash_;    // set for cached blocks and hashed used ones
  std::vector<std::optional<BlockHash>> parent_;  // meaningful only where hash_ is set
  std::unordered_map<BlockHash, int32_t> by_hash_;
  std::set<int32_t> free_;  // ordered: allocate() hands out the lowest id
  // Cached blocks, least recently released first; lru_pos_[b] is valid while b is cached.
  std::list<int32_t> lru_;
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<KvEvent> events_;  // since the last take_events(), already coalesced
  std::vector<Origin> origin_;   // meaningful only where hash_ is set
  std::unordered_map<BlockHash, BranchCounts> branch_counts_;  // by the branch's block
  BranchCounts root_counts_;                                   // branches off no cached block

  // The host tier: per slot its content (set while it holds one) and that block's parent; pinned
  // slots are off its LRU.
  std::vector<std::optional<BlockHash>> host_hash_;
  std::vector<std::optional<BlockHash>> host_parent_;
  std::vector<int32_t> host_pins_;
  std::unordered_map<BlockHash, int32_t> host_by_hash_;
  std::vector<int32_t> host_free_;  // handed out from the back
  std::list<int32_t> host_lru_;     // least recently evicted from the pool (or loaded) first
  std::vector<std::list<int32_t>::iterator> host_lru_pos_;  // valid while on host_lru_
  std::vector<KvTransfer> transfers_;
  int64_t host_offloaded_ = 0, host_loaded_ = 0, host_dropped_ = 0;
};

}  // namespace kvc
