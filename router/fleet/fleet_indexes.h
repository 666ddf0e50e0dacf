// What the router knows each replica holds, in one object with the one lock over it:
//  - exact: fed by the replicas' KV events (stored, removed, cleared; a snapshot on subscribe);
//  - approx: the router's own insertions, at routing time, for replicas without KV events
//    (vLLM, SGLang, plain OpenAI servers), expiring by TTL and LRU;
//  - routed: the prompts this router sent to replicas that do publish KV events, from the moment
//    it sends them until their blocks are stored there and reported (a prompt waits in the
//    replica's queue and is prefilled before its KV events say so: hundreds of ms on a CPU
//    replica, during which a second prompt sharing its document would otherwise be placed as if
//    nobody held it). Short-lived (RouterStackConfig::routed_ttl); a block the replica reports
//    removed goes from here as well. This router's own unacknowledged work: other routers do
//    not see it, as they do not see its requests in flight.
// Lock order: the pool's lock, then this one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>

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

  // Blocks held for replica r in both. Precondition: mu is held.
  size_t num_blocks_locked(uint32_t r) const { return exact.num_blocks(r) + approx.num_blocks(r); }

  RadixIndex exact;
  RadixIndex approx;
  RadixIndex routed;
  std::mutex mu;
};

}  // namespace kvc
