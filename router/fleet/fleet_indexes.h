// What the router knows each replica holds, in one object with the one lock over it:
//  - exact: fed by the replicas' KV events (stored, removed, cleared; a snapshot on subscribe);
//  - approx: the router's own insertions, at routing time, for replicas without KV events
//    (vLLM, SGLang, plain OpenAI servers), expiring by TTL and LRU;
//  - routed: the prompts this router sent to replicas that do publish KV events, from the moment
//    it sends them until their blocks are stored there and reported (a prompt waits in the
//    replica's queue and is prefilled before its KV events say so: hundreds of ms on a CPU
//    replica, during which a second prompt sharing its document would otherwise be placed as if
//    nobody held it). Short-lived (RouterStackConfig::routed_ttl); a block the replica reports
//    removed goes from here as well. Fed twice: by this router as it sends (its own
//    unacknowledged work, the one local term) and by the replicas' queued events (KvQueued: a
//    request admitted there, from whichever router), which every router receives alike, so
//    routers in front of one fleet place a prompt sharing a queued one's blocks alike.
// Lock order: the pool's lock, then this one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "base/clock.h"
#include "prefix_index/radix_index.h"

namespace kvc {

struct FleetIndexes {
  // The routed index's entries live this long unless told otherwise: past the queue wait and
  // prefill of a loaded CPU replica (TTFT p99 about 4 s in bench/results/routing-profiles.md).
  static constexpr std::chrono::milliseconds kRoutedTtl{10000};

  explicit FleetIndexes(const Clock& clock, RadixIndexConfig approx_config = {},
                        RadixIndexConfig routed_config = {.ttl = kRoutedTtl})
      : exact(clock), approx(clock, approx_config), routed(clock, routed_config) {}
  FleetIndexes(const FleetIndexes&) = delete;
  FleetIndexes& operator=(const FleetIndexes&) = delete;

  // A queued event of replica r: its chain (the exact index's path to its parent, then its
  // blocks) counts as held there until the routed TTL ends. Dropped when the parent is not known
  // (evicted meanwhile). Precondition: mu is held.
  void note_queued_locked(uint32_t r, const KvQueued& queued) {
    std::vector<BlockHash> chain;
    if (queued.parent) {
      chain = exact.chain_to(*queued.parent);
      if (chain.empty()) return;
    }
    chain.insert(chain.end(), queued.hashes.begin(), queued.hashes.end());
    (void)routed.insert(r, chain);  // a chain the tree refuses (a colliding hash) is not kept
  }

  // Blocks held for replica r in both. Precondition: mu is held.
  size_t num_blocks_locked(uint32_t r) const { return exact.num_blocks(r) + approx.num_blocks(r); }

  RadixIndex exact;
  RadixIndex approx;
  RadixIndex routed;
  std::mutex mu;
};

}  // namespace kvc
