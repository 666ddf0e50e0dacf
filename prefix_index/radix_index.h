// The router's index of which replica holds which prefix: a compressed radix tree over block-hash
// chains. Each node is a run of blocks (an edge) that the same replicas hold, touched at the same
// time; a longest-match query walks the tree once and answers for every replica.
//
// Exact mode feeds it each replica's KV events (apply); approximate mode (foreign replicas) inserts
// the routed prompt's chain at routing time and lets entries expire by TTL and per-replica LRU
// capacity.
//
// Eviction order, per replica, at block granularity: least recently touched first (touch = insert
// of that block), and among blocks touched together the deepest first, so leaves go before the
// blocks they extend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "prefix_index/block_hash.h"
#include "prefix_index/kv_event.h"

namespace kvc {

// Dense replica numbers chosen by the owner of the index (the router's replica pool).
using ReplicaId = uint32_t;

struct RadixIndexConfig {
  // Blocks each replica may hold in the index; 0 = unlimited (exact mode: the replica's own
  // removed events keep it in bounds).
  size_t capacity_blocks_per_replica = 0;
  // Entries not touched for this long are dropped (approximate mode); nullopt = never.
  std::optional<Clock::Duration> ttl;
};

struct ReplicaMatch {
  ReplicaId replica;
  size_t blocks;  // leading blocks of the query this replica holds
  friend bool operator==(const ReplicaMatch&, const ReplicaMatch&) = default;
};

struct MatchResult {
  // Every replica holding at least the first block of the query, by replica id.
  std::vector<ReplicaMatch> replicas;
  // Leading blocks of the query present in the tree at all (held by someone, or on the path to a
  // held block). tree_blocks > best() means the prefix is known but its holders lost its start.
  size_t tree_blocks = 0;
  // Blocks of the tree edge that continue past tree_blocks where the query diverged from it (0
  // when the query ended or the tree ended there): how much longer a known prefix was.
  size_t diverged_edge_remaining = 0;

  size_t blocks_for(ReplicaId replica) const;
  size_t best() const;
  // The query left a known prefix early: it diverged inside a tree edge after matching less than
  // `max_fraction` of what was known there, losing at least `min_lost_blocks` (a timestamp or a
  // request id inside a long system prompt looks like this).
  bool near_miss(double max_fraction = 0.5, size_t min_lost_blocks = 4) const;
};

class RadixIndex {
 public:
  explicit RadixIndex(const Clock& clock, RadixIndexConfig config = {});
  ~RadixIndex();
  RadixIndex(const RadixIndex&) = delete;
  RadixIndex& operator=(const RadixIndex&) = delete;

  // Records that `replica` holds the chain's blocks (chain[0] is a first block), touching them.
  Status insert(ReplicaId replica, std::span<const BlockHash> chain);
  // Records blocks continuing the chain after `parent` (nullopt: from the start). Fails when the
  // parent is unknown, or when a hash is already in the tree under another parent (a corrupt or
  // colliding chain); blocks placed before the failure stay.
  Status insert_after(ReplicaId replica, std::optional<BlockHash> parent,
                      std::span<const BlockHash> hashes);
  // Forgets that `replica` holds these blocks; unknown ones are ignored. Returns how many it held.
  size_t remove(ReplicaId replica, std::span<const BlockHash> hashes);
  // Forgets everything `replica` holds.
  void clear(ReplicaId replica);
  // Exact mode: applies one KV event of `replica` (a queued event holds nothing yet: no change).
  Status apply(ReplicaId replica, const KvEvent& event);
  // The capacity of one replica, instead of config.capacity_blocks_per_replica (0: back to that);
  // kept across clear(). Evicts at once down to it.
  void set_capacity(ReplicaId replica, size_t blocks);
  // Drops entries past their TTL. Mutating calls do this first on their own.
  size_t expire();

  MatchResult match(std::span<const BlockHash> chain) const;
  // The chain from its first block through `hash` (empty when `hash` is not in the tree).
  std::vector<BlockHash> chain_to(BlockHash hash) const;
  bool holds(ReplicaId replica, BlockHash hash) const;

  size_t num_blocks() const { return where_.size(); }  // distinct blocks in the tree
  size_t num_blocks(ReplicaId replica) const;          // blocks the replica holds
  size_t num_nodes() const { return num_nodes_; }
  std::vector<ReplicaId> replicas() const;  // replicas holding at least one block
  // Approximate heap bytes used by the index (nodes, edges, entries, maps, LRU sets).
  size_t memory_bytes() const;

  // Test support: asserts every structural invariant (aborts on violation).
  void check_invariants() const;

 private:
  struct Node;
  struct Entry;
  struct LruKey;
  struct LruLess {
    bool operator()(const LruKey& a, const LruKey& b) const;
  };
  struct ReplicaState;
  struct Location {
    Node* node;
    size_t offset;
  };

  Node* split(Node* node, size_t keep);  // returns the new tail node
  void touch(Node* node, ReplicaId replica);
  void drop_entry(Node* node, ReplicaId replica);
  void prune(Node* node);
  void try_merge_with_child(Node* node);
  void erase_leaf(Node* node);
  void set_depth_end(Node* node, size_t depth_end);
  void evict_to_capacity(ReplicaId replica);
  bool expired(const Entry& entry, Clock::TimePoint now) const;
  Node* new_node(Node* parent, std::vector<BlockHash> edge);

  const Clock& clock_;
  RadixIndexConfig config_;
  std::unique_ptr<Node> root_;
  std::unordered_map<BlockHash, Location> where_;
  std::map<ReplicaId, ReplicaState> replicas_;
  std::map<ReplicaId, size_t> capacity_;  // set_capacity's overrides
  uint64_t next_seq_ = 1;
  uint64_t next_uid_ = 1;
  size_t num_nodes_ = 0;
};

}  // namespace kvc
