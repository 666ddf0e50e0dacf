#include "replica/core/kv_cache.h"

#include <algorithm>
#include <cassert>

namespace kvc {

KvCacheManager::CachedPrefix KvCacheManager::find_cached_prefix(const Sequence& seq,
                                                                int32_t max_tokens) const {
  CachedPrefix found;
  const auto& hashes = seq.keys.hashes();
  const int32_t limit =
      std::min<int32_t>(static_cast<int32_t>(hashes.size()), max_tokens / block_size());
  for (int32_t i = 0; i < limit; ++i) {
    if (const auto block = pool_.lookup(hashes[i])) {
      if (pool_.refcount(*block) == 0) ++found.blocks_in_lru;
    } else if (pool_.host_lookup(hashes[i])) {
      ++found.blocks_in_host;
    } else {
      break;
    }
    ++found.blocks;
  }
  return found;
}

int32_t KvCacheManager::attach_cached_prefix(Sequence& seq, int32_t max_tokens, bool recompute) {
  assert(seq.block_table.empty() && seq.num_computed == 0);
  CachedPrefix found = find_cached_prefix(seq, max_tokens);
  const auto& hashes = seq.keys.hashes();
  // The pool's blocks are referenced and the host tier's slots pinned first, so that the
  // allocations of the loads evict neither.
  std::vector<std::optional<int32_t>> slots(found.blocks);
  for (int32_t i = 0; i < found.blocks; ++i) {
    if (const auto block = pool_.lookup(hashes[i])) {
      pool_.ref(*block);
      if (!recompute) pool_.note_hit(*block);
      seq.block_table.push_back(*block);
    } else {
      slots[i] = pool_.host_lookup(hashes[i]);
      pool_.pin_host(*slots[i]);
      seq.block_table.push_back(-1);
    }
  }
  for (int32_t i = 0; i < found.blocks; ++i) {
    if (!slots[i]) continue;
    const std::optional<int32_t> block = pool_.load(*slots[i], /*reused=*/!recompute);
    if (!block) {
      // No room after all (the caller's check failed): the prefix ends before this block.
      assert(false && "attach_cached_prefix: no block to load into");
      for (int32_t j = i; j < found.blocks; ++j) {
        if (slots[j]) {
          pool_.unpin_host(*slots[j]);
        } else {
          pool_.release(seq.block_table[j]);
        }
      }
      seq.block_table.resize(i);
      found.blocks = i;
      break;
    }
    seq.block_table[i] = *block;
  }
  // A prompt ending on a block boundary recomputes its last token, so its last block, found in
  // the cache, is written again instead of attached (its commit is refused as a duplicate): it
  // was asked for again all the same.
  if (!recompute && found.blocks < static_cast<int32_t>(hashes.size())) {
    if (const auto cut = pool_.lookup(hashes[found.blocks])) pool_.note_hit(*cut);
  }
  seq.cache_branch =
      pool_.branch_at(found.blocks > 0 ? std::optional(hashes[found.blocks - 1]) : std::nullopt);
  seq.num_computed = found.blocks * block_size();
  seq.num_committed_blocks = found.blocks;
  return seq.num_computed;
}

bool KvCacheManager::prepare_write(Sequence& seq, int32_t end) {
  assert(end >= seq.num_computed);
  const int32_t needed = blocks_for(end);
  const size_t old_blocks = seq.block_table.size();
  std::vector<int32_t> taken;
  // The partial block the first new token goes into may be shared with siblings: copy it.
  std::optional<std::pair<int32_t, int32_t>> cow;
  const int32_t first = seq.num_computed / block_size();
  if (seq.num_computed % block_size() != 0 && first < static_cast<int32_t>(old_blocks) &&
      end > seq.num_computed && pool_.refcount(seq.block_table[first]) > 1) {
    const auto fresh = pool_.allocate();
    if (!fresh) return false;
    taken.push_back(*fresh);
    cow = std::pair(seq.block_table[first], *fresh);
  }
  while (static_cast<int32_t>(old_blocks + taken.size() - (cow ? 1 : 0)) < needed) {
    const auto fresh = pool_.allocate();
    if (!fresh) {
      for (int32_t b : taken)
        pool_.release(b);
      return false;
    }
    taken.push_back(*fresh);
  }
  size_t next = 0;
  if (cow) {
    pool_.release(cow->first);
    seq.block_table[first] = cow->second;
    pool_.note_copy(cow->first, cow->second);
    next = 1;
  }
  for (; next < taken.size(); ++next)
    seq.block_table.push_back(taken[next]);
  return true;
}

void KvCacheManager::commit_computed(Sequence& seq) {
  const auto& hashes = seq.keys.hashes();
  // Blocks past the end of the hash chain (SequenceKeys::chain_ended) stay private.
  const int32_t full =
      std::min<int32_t>(seq.num_computed / block_size(), static_cast<int32_t>(hashes.size()));
  assert(seq.keys.chain_ended() ||
         static_cast<int32_t>(hashes.size()) >= seq.num_computed / block_size());
  for (int32_t i = seq.num_committed_blocks; i < full; ++i) {
    const std::optional<BlockHash> parent = i > 0 ? std::optional(hashes[i - 1]) : std::nullopt;
    if (pool_.commit(seq.block_table[i], hashes[i], parent, seq.cache_branch) && byte_space_ &&
        seq.keys.has_byte_space())
      own_byte_blocks(seq, i, hashes[i]);
  }
  seq.num_committed_blocks = std::max(seq.num_committed_blocks, full);
}

void KvCacheManager::own_byte_blocks(const Sequence& seq, int32_t i, BlockHash token_block) {
  const size_t bs = static_cast<size_t>(block_size());
  const size_t end = seq.keys.byte_end(static_cast<size_t>(i + 1) * bs - 1);
  const size_t begin = i > 0 ? seq.keys.byte_end(static_cast<size_t>(i) * bs - 1) : 0;
  const size_t first = begin / bs, last = end / bs;  // byte blocks [first, last) become whole
  const std::vector<BlockHash>& bytes = seq.keys.byte_hashes();
  assert(last <= bytes.size());
  const std::optional<BlockHash> parent =
      first > 0 ? std::optional(bytes[first - 1]) : std::nullopt;
  byte_space_->own(token_block, parent,
                   std::vector<BlockHash>(bytes.begin() + first, bytes.begin() + last));
}

void KvCacheManager::fork(const Sequence& from, Sequence& to) {
  assert(to.block_table.empty());
  for (int32_t b : from.block_table)
    pool_.ref(b);
  to.block_table = from.block_table;
  to.num_computed = from.num_computed;
  to.num_committed_blocks = from.num_committed_blocks;
  to.cache_branch = from.cache_branch;
}

void KvCacheManager::release(Sequence& seq, bool preempted) {
  // Children before parents, so the LRU evicts a chain's tail before its head.
  pool_.release_chain(seq.block_table, /*warm=*/preempted);
  seq.block_table.clear();
  seq.num_computed = 0;
  seq.num_committed_blocks = 0;
}

}  // namespace kvc
