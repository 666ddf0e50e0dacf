// The brute-force model of RadixIndex's documented semantics (prefix_index/radix_index.h): per
// replica, a plain map of held blocks. Shared by the property test and the radix_index fuzz target.
// Every block hash must have one parent, known to `parent_of` (the chain it was hashed in).
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "base/clock.h"
#include "prefix_index/block_hash.h"
#include "prefix_index/radix_index.h"

namespace kvc::testing {

class RadixIndexModel {
 public:
  using Chain = std::vector<BlockHash>;
  // The block before `h` in its chain; nullopt for a first block.
  using ParentOf = std::function<std::optional<BlockHash>(BlockHash)>;

  RadixIndexModel(ParentOf parent_of, const Clock& clock, RadixIndexConfig config)
      : parent_of_(std::move(parent_of)), clock_(clock), config_(config) {}

  struct Held {
    uint64_t seq;
    Clock::TimePoint time;
  };

  void expire() {
    if (!config_.ttl) return;
    for (auto& [r, held] : held_) {
      std::erase_if(held,
                    [&](const auto& kv) { return kv.second.time + *config_.ttl <= clock_.now(); });
    }
  }

  std::set<BlockHash> tree() const {
    std::set<BlockHash> known;
    for (const auto& [r, held] : held_) {
      for (const auto& [h, _] : held) {
        std::optional<BlockHash> cur = h;
        while (cur && known.insert(*cur).second)
          cur = parent_of_(*cur);
      }
    }
    return known;
  }

  // Returns false when the index must refuse (unknown parent).
  bool insert_after(ReplicaId r, std::optional<BlockHash> parent, const Chain& hashes) {
    expire();
    if (parent && !tree().contains(*parent)) return false;
    if (hashes.empty()) return true;
    for (const BlockHash& h : hashes)
      held_[r][h] = Held{seq_, clock_.now()};
    ++seq_;
    evict(r);
    return true;
  }

  size_t remove(ReplicaId r, const Chain& hashes) {
    expire();
    size_t n = 0;
    for (const BlockHash& h : hashes)
      n += held_[r].erase(h);
    return n;
  }

  void clear(ReplicaId r) { held_[r].clear(); }

  bool holds(ReplicaId r, BlockHash h) const {
    auto it = held_.find(r);
    if (it == held_.end()) return false;
    auto b = it->second.find(h);
    return b != it->second.end() && !(config_.ttl && b->second.time + *config_.ttl <= clock_.now());
  }

  std::vector<ReplicaMatch> match(const Chain& chain) const {
    std::vector<ReplicaMatch> out;
    for (const auto& [r, held] : held_) {
      size_t n = 0;
      while (n < chain.size() && holds(r, chain[n]))
        ++n;
      if (n > 0) out.push_back({r, n});
    }
    return out;
  }

  size_t tree_blocks(const Chain& chain) const {
    const auto known = tree();
    size_t n = 0;
    while (n < chain.size() && known.contains(chain[n]))
      ++n;
    return n;
  }

  size_t num_blocks(ReplicaId r) const {
    auto it = held_.find(r);
    return it == held_.end() ? 0 : it->second.size();
  }

 private:
  size_t depth(BlockHash h) const {
    size_t d = 1;
    for (std::optional<BlockHash> p = parent_of_(h); p; p = parent_of_(*p))
      ++d;
    return d;
  }

  // Least recently touched first; among blocks touched together, the deepest first.
  void evict(ReplicaId r) {
    const size_t cap = config_.capacity_blocks_per_replica;
    auto& held = held_[r];
    while (cap > 0 && held.size() > cap) {
      auto victim = std::min_element(held.begin(), held.end(), [&](const auto& a, const auto& b) {
        if (a.second.seq != b.second.seq) return a.second.seq < b.second.seq;
        return depth(a.first) > depth(b.first);
      });
      held.erase(victim);
    }
  }

  ParentOf parent_of_;
  const Clock& clock_;
  RadixIndexConfig config_;
  std::map<ReplicaId, std::map<BlockHash, Held>> held_;
  uint64_t seq_ = 0;
};

}  // namespace kvc::testing
