#include "router/policy/sibling_tracker.h"

#include <vector>

namespace kvc {

SiblingTracker::SiblingTracker(const Clock& clock, SiblingTrackerConfig config)
    : clock_(clock), config_(config) {}

std::string SiblingTracker::key_for(const std::optional<std::string>& group, uint64_t prompt_hash) {
  return group ? "g:" + *group : "p:" + std::to_string(prompt_hash);
}

void SiblingTracker::expire() {
  const Clock::TimePoint now = clock_.now();
  while (!order_.empty()) {
    auto it = entries_.find(order_.front());
    if (it->second.expires > now && entries_.size() <= config_.max_entries) break;
    entries_.erase(it);
    order_.pop_front();
  }
}

std::optional<uint32_t> SiblingTracker::lookup(const std::string& key) {
  expire();
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  it->second.expires = clock_.now() + config_.window;
  order_.splice(order_.end(), order_, it->second.order);
  return it->second.replica;
}

void SiblingTracker::record(const std::string& key, uint32_t replica) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    it->second.replica = replica;
    it->second.expires = clock_.now() + config_.window;
    order_.splice(order_.end(), order_, it->second.order);
  } else {
    order_.push_back(key);
    entries_.emplace(key, Entry{replica, clock_.now() + config_.window, std::prev(order_.end())});
  }
  expire();
}

void SiblingTracker::forget_replica(uint32_t replica) {
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.replica == replica) {
      order_.erase(it->second.order);
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace kvc
