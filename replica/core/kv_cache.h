// Block tables on top of the BlockPool: the one small seam through which the scheduler touches KV
// memory (the vLLM KVCacheManager habit). Prefix-cache reuse, copy-on-write of a shared partial
// block, sibling forks, and committing computed full blocks to the prefix cache.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "replica/core/block_pool.h"
#include "replica/core/byte_space.h"
#include "replica/core/sequence.h"

namespace kvc {

class KvCacheManager {
 public:
  explicit KvCacheManager(BlockPool& pool) : pool_(pool) {}

  // Committed token blocks tell `events` which router byte blocks they cover (sequences whose
  // keys have a byte space: KeySpace::kTokenIds). Null: no translation (the byte tokenizer's
  // blocks are router blocks already).
  void set_byte_space(ByteSpaceEvents* events) { byte_space_ = events; }

  BlockPool& pool() { return pool_; }
  const BlockPool& pool() const { return pool_; }
  int32_t block_size() const { return pool_.block_size(); }
  int32_t blocks_for(int64_t tokens) const {
    return static_cast<int32_t>((tokens + block_size() - 1) / block_size());
  }

  // Leading full blocks of the sequence's chain the pool or its host tier holds, at most
  // max_tokens worth; and of those, how many sit in the LRU (admitting them takes them out of
  // the allocatable set) and how many only in the host tier (each loaded into a new block).
  struct CachedPrefix {
    int32_t blocks = 0;
    int32_t blocks_in_lru = 0;
    int32_t blocks_in_host = 0;
  };
  CachedPrefix find_cached_prefix(const Sequence& seq, int32_t max_tokens) const;

  // Precondition: the sequence holds no blocks. References the cached prefix (as found by
  // find_cached_prefix) and marks it computed, loading its blocks in the host tier into new
  // blocks (BlockPool::load; the caller checked that the pool has room: blocks_in_host more).
  // Returns the tokens reused. The blocks found are noted reused (BlockPool::note_hit), unless
  // `recompute` (a preempted group finding its own).
  int32_t attach_cached_prefix(Sequence& seq, int32_t max_tokens, bool recompute = false);

  // Makes positions [seq.num_computed, end) writable: allocates missing blocks and replaces a
  // shared partial block by a private copy (recorded among the pool's moves, BlockPool::
  // note_copy). On a shortage returns false and leaves the sequence and the moves as they were.
  bool prepare_write(Sequence& seq, int32_t end);

  // After the KV of [0, seq.num_computed) is in the cache: hands newly full blocks to the prefix
  // cache (stored events). Precondition: seq.keys has hashed at least num_computed tokens,
  // unless its chain ended.
  void commit_computed(Sequence& seq);

  // `to` shares every block of `from` (copy-on-write later). Precondition: `to` holds none.
  void fork(const Sequence& from, Sequence& to);

  // Releases every block of the sequence (full committed blocks stay in the prefix cache); the
  // sequence keeps its tokens and must be recomputed to run again. `preempted`: its blocks are
  // not released cold (BlockPool::release_chain), since its recompute looks them up.
  void release(Sequence& seq, bool preempted = false);

 private:
  // The router byte blocks token block i of `seq` is the first to cover wholly.
  void own_byte_blocks(const Sequence& seq, int32_t i, BlockHash token_block);

  BlockPool& pool_;
  ByteSpaceEvents* byte_space_ = nullptr;
};

}  // namespace kvc
