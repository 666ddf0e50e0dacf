// Sibling bursts: identical prompts arriving within a short window (a GRPO client sending its
// n rollouts as n requests), or requests naming the same `group` id, go to the replica chosen for
// the first of them, so the engine there sees them as one batch sharing one prefix.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

#include "base/clock.h"

namespace kvc {

struct SiblingTrackerConfig {
  Clock::Duration window = std::chrono::seconds(2);  // a burst's members arrive within this
  size_t max_entries = 1 << 16;                      // oldest forgotten beyond this
};

class SiblingTracker {
 public:
  SiblingTracker(const Clock& clock, SiblingTrackerConfig config = {});

  // The replica a live burst with this key was pinned to; each hit extends the window.
  std::optional<uint32_t> lookup(const std::string& key);
  // Pins the key to a replica (the first of a burst, or a re-route after a failure).
  void record(const std::string& key, uint32_t replica);
  // A replica went away: its bursts are forgotten.
  void forget_replica(uint32_t replica);
  size_t size() const { return entries_.size(); }

  // The burst key of a request: its group id if any, else the hash of its full prompt bytes.
  static std::string key_for(const std::optional<std::string>& group, uint64_t prompt_hash);

 private:
  struct Entry {
    uint32_t replica;
    Clock::TimePoint expires;
    std::list<std::string>::iterator order;
  };
  void expire();

  const Clock& clock_;
  SiblingTrackerConfig config_;
  std::unordered_map<std::string, Entry> entries_;
  std::list<std::string> order_;  // least recently touched first
};

}  // namespace kvc
