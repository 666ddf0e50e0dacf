#include "replica/core/block_pool.h"

#include <cassert>
#include <iterator>
#include <utility>

namespace kvc {
namespace {

// Appends `event` to `events`, folding it into the last event when that says the same thing in
// one: a stored event whose parent is the last hash of the previous stored event continues its
// chain, and consecutive removed events are one set.
void append_coalesced(std::vector<KvEvent>& events, KvEvent event) {
  if (!events.empty()) {
    if (auto* stored = std::get_if<KvStored>(&event)) {
      auto* last = std::get_if<KvStored>(&events.back());
      if (last != nullptr && !last->hashes.empty() && stored->parent == last->hashes.back()) {
        last->hashes.insert(last->hashes.end(), stored->hashes.begin(), stored->hashes.end());
        return;
      }
    } else if (auto* removed = std::get_if<KvRemoved>(&event)) {
      if (auto* last = std::get_if<KvRemoved>(&events.back())) {
        last->hashes.insert(last->hashes.end(), removed->hashes.begin(), removed->hashes.end());
        return;
      }
    }
  }
  events.push_back(std::move(event));
}

}  // namespace

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, double cold_reuse_rate)
    : block_size_(block_size),
      cold_reuse_rate_(cold_reuse_rate),
      refcount_(num_blocks, 0),
      hash_(num_blocks),
      parent_(num_blocks),
      lru_pos_(num_blocks),
      origin_(num_blocks) {
  assert(num_blocks > 0 && block_size > 0);
  for (int32_t b = 0; b < num_blocks; ++b)
    free_.insert(free_.end(), b);
}

std::optional<int32_t> BlockPool::allocate() {
  int32_t block;
  if (!free_.empty()) {
    block = *free_.begin();
    free_.erase(free_.begin());
  } else if (!lru_.empty()) {
    block = lru_.front();
    lru_.pop_front();
    evict(block);
  } else {
    return std::nullopt;
  }
  refcount_[block] = 1;
  return block;
}

// Precondition: `block` has just left the LRU.
void BlockPool::evict(int32_t block) {
  const BlockHash hash = *hash_[block];
  by_hash_.erase(hash);
  hash_[block].reset();
  parent_[block].reset();
  origin_[block] = {};
  branch_counts_.erase(hash);  // nothing branches off it while it is gone
  emit(KvRemoved{{hash}});
}

BlockPool::BranchCounts* BlockPool::counts_of(const std::optional<BlockHash>& at) {
  if (!at) return &root_counts_;
  auto it = branch_counts_.find(*at);
  return it == branch_counts_.end() ? nullptr : &it->second;
}

const BlockPool::BranchCounts* BlockPool::counts_of(const std::optional<BlockHash>& at) const {
  return const_cast<BlockPool*>(this)->counts_of(at);
}

CacheBranch BlockPool::branch_at(std::optional<BlockHash> at) const {
  const BranchCounts* c = counts_of(at);
  const double committed = c ? c->committed : 0, reused = c ? c->reused : 0;
  return CacheBranch{at, (reused + 1) / (committed + 2) < cold_reuse_rate_};
}

void BlockPool::note_hit(int32_t block) {
  assert(block >= 0 && block < num_blocks() && hash_[block]);
  Origin& o = origin_[block];
  if (o.reused) return;
  o.reused = true;
  if (!o.counted) return;
  if (BranchCounts* c = counts_of(o.branch.at)) c->reused += 1;
}

void BlockPool::ref(int32_t block) {
  assert(block >= 0 && block < num_blocks());
  if (refcount_[block] == 0) {
    // only a cached block can be revived: a free one holds no KV anyone could want
    assert(hash_[block].has_value());
    lru_.erase(lru_pos_[block]);
  }
  ++refcount_[block];
}

void BlockPool::release(int32_t block) {
  release_chain(std::span<const int32_t>(&block, 1));
}

void BlockPool::release_chain(std::span<const int32_t> chain, bool warm) {
  // Cold blocks of this chain go to the evicting end tail first, each right after the one
  // before.
  std::optional<std::list<int32_t>::iterator> last_cold;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const int32_t block = *it;
    assert(block >= 0 && block < num_blocks());
    assert(refcount_[block] > 0);
    if (--refcount_[block] > 0) continue;
    if (!hash_[block]) {
      free_.insert(block);
    } else if (const Origin& o = origin_[block]; !warm && o.branch.cold && !o.reused) {
      lru_pos_[block] = lru_.insert(last_cold ? std::next(*last_cold) : lru_.begin(), block);
      last_cold = lru_pos_[block];
    } else {
      lru_pos_[block] = lru_.insert(lru_.end(), block);
    }
  }
}

std::optional<int32_t> BlockPool::lookup(BlockHash hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

bool BlockPool::commit(int32_t block, BlockHash hash, std::optional<BlockHash> parent,
                       CacheBranch branch) {
  assert(block >= 0 && block < num_blocks());
  assert(refcount_[block] > 0);
  assert(parent != hash);
  if (hash_[block] || by_hash_.contains(hash)) return false;
  hash_[block] = hash;
  parent_[block] = parent;
  by_hash_.emplace(hash, block);
  // The branch's block is held by the sequence writing this one (or is the root); counted only
  // while it is hashed (not after a clear_hashes()), so counts never outlive their block.
  BranchCounts* c = counts_of(branch.at);
  if (!c && by_hash_.contains(*branch.at)) c = &branch_counts_[*branch.at];
  if (c) {
    if (c->committed >= kBranchCountsHalvedAt) {
      c->committed /= 2;
      c->reused /= 2;
    }
    c->committed += 1;
  }
  origin_[block] = Origin{branch, /*counted=*/c != nullptr, /*reused=*/false};
  emit(KvStored{parent, {hash}});
  return true;
}

std::optional<BlockHash> BlockPool::hash_of(int32_t block) const {
  assert(block >= 0 && block < num_blocks());
  return hash_[block];
}

BlockPoolCounts BlockPool::counts() const {
  BlockPoolCounts c;
  c.num_blocks_total = num_blocks();
  c.num_blocks_free = static_cast<int32_t>(free_.size());
  c.num_blocks_cached = static_cast<int32_t>(lru_.size());
  c.num_blocks_used = c.num_blocks_total - c.num_blocks_free - c.num_blocks_cached;
  return c;
}

int32_t BlockPool::clear_hashes() {
  const auto held = static_cast<int32_t>(by_hash_.size());
  for (int32_t b : lru_)
    free_.insert(b);
  lru_.clear();
  for (auto& h : hash_)
    h.reset();
  for (auto& p : parent_)
    p.reset();
  for (auto& o : origin_)
    o = {};
  branch_counts_.clear();
  root_counts_ = {};
  by_hash_.clear();
  emit(KvCleared{});
  return held;
}

void BlockPool::emit(KvEvent event) {
  append_coalesced(events_, std::move(event));
}

std::vector<KvEvent> BlockPool::take_events() {
  return std::exchange(events_, {});
}

std::vector<KvEvent> BlockPool::snapshot() const {
  // The held blocks form a forest over parent hashes. Roots are blocks whose parent is not held;
  // each tree is walked depth first, children by block id, so the order is deterministic and a
  // chain comes out as one coalesced event.
  std::unordered_map<BlockHash, std::vector<int32_t>> children;
  std::vector<int32_t> stack;
  for (int32_t b = num_blocks() - 1; b >= 0; --b) {
    if (!hash_[b]) continue;
    if (parent_[b] && by_hash_.contains(*parent_[b])) {
      children[*parent_[b]].push_back(b);  // descending ids: popped from the back lowest first
    } else {
      stack.push_back(b);  // a root: its event names its parent even when that is not held
    }
  }
  std::vector<KvEvent> events;
  size_t visited = 0;
  while (!stack.empty()) {
    const int32_t b = stack.back();
    stack.pop_back();
    ++visited;
    append_coalesced(events, KvStored{parent_[b], {*hash_[b]}});
    auto it = children.find(*hash_[b]);
    if (it != children.end()) stack.insert(stack.end(), it->second.begin(), it->second.end());
  }
  // a parent cycle (never produced by chained hashing) would leave blocks unvisited
  assert(visited == by_hash_.size());
  (void)visited;
  return events;
}

}  // namespace kvc
