// Where a sequence's new KV blocks branch off what the prefix cache already held, and the
// prediction the block pool makes from it (replica/core/block_pool.h, "Insertion by reuse").
#pragma once

#include <optional>

#include "prefix_index/block_hash.h"

namespace kvc {

struct CacheBranch {
  // The deepest block of the sequence's chain the cache held when it was admitted; nullopt:
  // none (its blocks branch off the root).
  std::optional<BlockHash> at;
  // The blocks that branched off `at` before were seldom reused: this sequence's are released
  // to the evicting end of the LRU (unless reused by then).
  bool cold = false;
};

}  // namespace kvc
