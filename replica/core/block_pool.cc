#include "replica/core/block_pool.h"

#include <algorithm>
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

BlockPool::BlockPool(int32_t num_blocks, int32_t block_size, double cold_reuse_rate,
                     int32_t num_host_blocks)
    : block_size_(block_size),
      cold_reuse_rate_(cold_reuse_rate),
      refcount_(num_blocks, 0),
      hash_(num_blocks),
      parent_(num_blocks),
      lru_pos_(num_blocks),
      origin_(num_blocks),
      host_hash_(num_host_blocks),
      host_parent_(num_host_blocks),
      host_pins_(num_host_blocks, 0),
      host_lru_pos_(num_host_blocks) {
  assert(num_blocks > 0 && block_size > 0 && num_host_blocks >= 0);
  for (int32_t b = 0; b < num_blocks; ++b)
    free_.insert(free_.end(), b);
  for (int32_t s = num_host_blocks - 1; s >= 0; --s)
    host_free_.push_back(s);  // slot 0 first
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
  const std::optional<BlockHash> parent = parent_[block];
  by_hash_.erase(hash);
  hash_[block].reset();
  parent_[block].reset();
  origin_[block] = {};
  branch_counts_.erase(hash);  // nothing branches off it while it is out of the pool
  if (const auto it = host_by_hash_.find(hash); it != host_by_hash_.end()) {
    // Its copy is there already (loaded from it): just used, so the host tier keeps it longest.
    if (const int32_t slot = it->second; host_pins_[slot] == 0) {
      host_lru_.splice(host_lru_.end(), host_lru_, host_lru_pos_[slot]);
    }
    return;
  }
  const std::optional<int32_t> slot = take_host_slot();
  if (!slot) {
    if (!host_hash_.empty()) ++host_dropped_;
    emit(KvRemoved{{hash}});
    return;
  }
  host_hash_[*slot] = hash;
  host_parent_[*slot] = parent;
  host_by_hash_.emplace(hash, *slot);
  host_lru_pos_[*slot] = host_lru_.insert(host_lru_.end(), *slot);
  transfers_.push_back(KvTransfer{KvTransfer::Kind::kOffload, block, *slot});
  ++host_offloaded_;
}

std::optional<int32_t> BlockPool::take_host_slot() {
  if (!host_free_.empty()) {
    const int32_t slot = host_free_.back();
    host_free_.pop_back();
    return slot;
  }
  if (host_lru_.empty()) return std::nullopt;
  const int32_t slot = host_lru_.front();
  host_lru_.pop_front();
  const BlockHash gone = *host_hash_[slot];
  host_by_hash_.erase(gone);
  host_hash_[slot].reset();
  host_parent_[slot].reset();
  if (!by_hash_.contains(gone)) emit(KvRemoved{{gone}});
  return slot;
}

std::optional<int32_t> BlockPool::host_lookup(BlockHash hash) const {
  auto it = host_by_hash_.find(hash);
  if (it == host_by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::pin_host(int32_t host_block) {
  assert(host_block >= 0 && host_block < static_cast<int32_t>(host_hash_.size()));
  assert(host_hash_[host_block].has_value());
  if (host_pins_[host_block]++ == 0) host_lru_.erase(host_lru_pos_[host_block]);
}

void BlockPool::unpin_host(int32_t host_block) {
  assert(host_pins_[host_block] > 0);
  if (--host_pins_[host_block] == 0) {
    host_lru_pos_[host_block] = host_lru_.insert(host_lru_.end(), host_block);
  }
}

std::optional<int32_t> BlockPool::load(int32_t host_block, bool reused) {
  assert(host_pins_[host_block] > 0);
  const BlockHash hash = *host_hash_[host_block];
  assert(!by_hash_.contains(hash));
  const std::optional<int32_t> block = allocate();
  if (!block) return std::nullopt;
  hash_[*block] = hash;
  parent_[*block] = host_parent_[host_block];
  by_hash_.emplace(hash, *block);
  // Its branch was counted when it was committed: not again.
  origin_[*block] = Origin{CacheBranch{}, /*counted=*/false, reused};
  transfers_.push_back(KvTransfer{KvTransfer::Kind::kLoad, *block, host_block});
  ++host_loaded_;
  unpin_host(host_block);
  return block;
}

void BlockPool::note_copy(int32_t src, int32_t dst) {
  transfers_.push_back(KvTransfer{KvTransfer::Kind::kCopy, dst, src});
}

std::vector<KvTransfer> BlockPool::take_transfers() {
  return std::exchange(transfers_, {});
}

HostTierCounts BlockPool::host_counts() const {
  HostTierCounts c;
  c.num_blocks_total = static_cast<int32_t>(host_hash_.size());
  c.num_blocks_held = static_cast<int32_t>(host_by_hash_.size());
  c.offloaded = host_offloaded_;
  c.loaded = host_loaded_;
  c.dropped = host_dropped_;
  return c;
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
  const bool was_held = host_by_hash_.contains(hash);  // computed again past a lookup's limit
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
  if (!was_held) emit(KvStored{parent, {hash}});
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
  int32_t held = static_cast<int32_t>(by_hash_.size());
  for (const auto& [hash, slot] : host_by_hash_)
    held += by_hash_.contains(hash) ? 0 : 1;
  assert(std::all_of(host_pins_.begin(), host_pins_.end(), [](int32_t p) { return p == 0; }));
  host_by_hash_.clear();
  host_lru_.clear();
  host_free_.clear();
  for (int32_t s = static_cast<int32_t>(host_hash_.size()) - 1; s >= 0; --s) {
    host_hash_[s].reset();
    host_parent_[s].reset();
    host_free_.push_back(s);
  }
  // The offloads and loads are moot (the content they would move is forgotten); copies of live
  // blocks are not.
  std::erase_if(transfers_, [](const KvTransfer& t) { return t.kind != KvTransfer::Kind::kCopy; });
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
  // The held blocks (either tier) form a forest over parent hashes. Roots are blocks whose parent
  // is not held; each tree is walked depth first, children in entry order (pool blocks by id,
  // then host slots by id), so the order is deterministic and a chain comes out as one coalesced
  // event.
  struct Entry {
    BlockHash hash;
    std::optional<BlockHash> parent;
  };
  std::vector<Entry> entries;
  for (int32_t b = 0; b < num_blocks(); ++b)
    if (hash_[b]) entries.push_back(Entry{*hash_[b], parent_[b]});
  for (size_t s = 0; s < host_hash_.size(); ++s)
    if (host_hash_[s] && !by_hash_.contains(*host_hash_[s]))
      entries.push_back(Entry{*host_hash_[s], host_parent_[s]});
  std::unordered_map<BlockHash, std::vector<size_t>> children;
  std::vector<size_t> stack;
  for (size_t i = entries.size(); i-- > 0;) {
    const Entry& e = entries[i];
    if (e.parent && held(*e.parent)) {
      children[*e.parent].push_back(i);  // descending: popped from the back lowest first
    } else {
      stack.push_back(i);  // a root: its event names its parent even when that is not held
    }
  }
  std::vector<KvEvent> events;
  size_t visited = 0;
  while (!stack.empty()) {
    const Entry& e = entries[stack.back()];
    stack.pop_back();
    ++visited;
    append_coalesced(events, KvStored{e.parent, {e.hash}});
    auto it = children.find(e.hash);
    if (it != children.end()) stack.insert(stack.end(), it->second.begin(), it->second.end());
  }
  // a parent cycle (never produced by chained hashing) would leave blocks unvisited
  assert(visited == entries.size());
  (void)visited;
  return events;
}

}  // namespace kvc
