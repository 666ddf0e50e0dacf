// KV events in the router's key space when tokens are not bytes.
//
// With a real tokenizer the prefix cache is keyed by token blocks (hashes of token ids, private
// to the replica), but routers hash prompt bytes. Each committed token block covers the prompt
// bytes its tokens (and those before) decode to; the router byte blocks that become wholly
// covered with it are that token block's *own* byte blocks. A byte block is published (stored)
// while at least one cached token block owns it, and removed when the last one goes.
//
// Boundary effect: a longer text can tokenize its last pre-token differently (BPE merges across
// what was the end of the shorter text), so a request sharing B bytes with a cached prompt reuses
// the cached tokens only up to the start of the pre-token that straddles byte B: the router's
// estimate from byte blocks exceeds the replica's hit by at most one pre-token plus the partial
// token block around it (docs/architecture.md, "Tokenizers").
#pragma once

#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "prefix_index/block_hash.h"
#include "prefix_index/kv_event.h"

namespace kvc {

class ByteSpaceEvents {
 public:
  // Token block `token_block` was committed to the prefix cache (its stored event is among the
  // pool's next events) and is the first to cover `byte_blocks` wholly; byte_blocks[0]'s parent
  // is `parent` (nullopt: a first block), and each later one's parent is the one before it.
  void own(BlockHash token_block, std::optional<BlockHash> parent,
           std::vector<BlockHash> byte_blocks);

  // The pool's events (token blocks) as events on byte blocks.
  std::vector<KvEvent> translate(const std::vector<KvEvent>& token_events);
  // What a new subscriber receives: every published byte block, parents first. token_snapshot is
  // the pool's snapshot (parents first).
  std::vector<KvEvent> snapshot(const std::vector<KvEvent>& token_snapshot) const;

  size_t num_byte_blocks() const { return refs_.size(); }
  // Whether the byte block is published (owned by a cached token block).
  bool publishes(BlockHash byte_block) const { return refs_.count(byte_block) > 0; }

 private:
  struct Owned {
    std::optional<BlockHash> parent;
    std::vector<BlockHash> blocks;
  };
  std::unordered_map<BlockHash, Owned> owned_;   // by token block
  std::unordered_map<BlockHash, int32_t> refs_;  // byte block -> cached token blocks owning it
  std::unordered_set<BlockHash> cached_;         // token blocks the pool reported stored
};

}  // namespace kvc
