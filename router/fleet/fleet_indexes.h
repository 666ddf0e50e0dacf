// What the router knows each replica holds, in one object with the one lock over it:
//  - exact: fed by the replicas' KV events (stored, removed, cleared; a snapshot on subscribe);
//  - approx: the router's own insertions, at routing time, for replicas without KV events
//    (vLLM, SGLang, plain OpenAI servers), expiring by TTL and LRU.
// Lock order: the pool's lock, then this one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "base/clock.h"
#include "prefix_index/radix_index.h"

namespace kvc {

struct FleetIndexes {
  explicit FleetIndexes(const Clock& clock, RadixIndexConfig approx_config = {})
      : exact(clock), approx(clock, approx_config) {}
  FleetIndexes(const FleetIndexes&) = delete;
  FleetIndexes& operator=(const FleetIndexes&) = delete;

  // Blocks held for replica r in both. Precondition: mu is held.
  size_t num_blocks_locked(uint32_t r) const { return exact.num_blocks(r) + approx.num_blocks(r); }

  RadixIndex exact;
  RadixIndex approx;
  std::mutex mu;
};

}  // namespace kvc
