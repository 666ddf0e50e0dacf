// The scheduler's partners (replica/core/scheduler.h): which waiting or running groups go
// together (an affinity's members, scheduled as one unit when they fit), which share one prompt's
// computation (a leader and its followers), and how long a declared group's present members wait
// for the rest (affinity_wait, affinity_idle). Admission, preemption and the step are in
// scheduler.cc.
#include "replica/core/scheduler.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace kvc {

bool Scheduler::joins_started_affinity(const SequenceGroup& g) const {
  if (g.affinity.empty()) return false;
  return std::any_of(running_.begin(), running_.end(), [&](const auto& r) {
    return r->affinity == g.affinity && r->chain_seed == g.chain_seed;
  });
}

std::vector<SequenceGroup*> Scheduler::affinity_set(SequenceGroup& g) const {
  std::vector<SequenceGroup*> set{&g};
  if (g.affinity.empty()) return set;
  const bool running = g.state == GroupState::kPrompt || g.state == GroupState::kRunning;
  auto add_partners = [&](const auto& groups) {
    for (const auto& other : groups) {
      if (other.get() != &g && other->affinity == g.affinity) set.push_back(other.get());
    }
  };
  if (running) {
    add_partners(running_);
  } else {
    add_partners(waiting_);
  }
  // Only a set that could run to completion on its own is a unit: otherwise its members would
  // preempt each other forever. Larger sets are scheduled member by member.
  // Members with the same prompt share its blocks: counted once.
  int64_t blocks = 0, seqs = 0;
  std::vector<const SequenceGroup*> counted;
  auto count = [&](const auto& groups) {
    for (const auto& other : groups) {
      if (other->affinity != g.affinity) continue;
      blocks += worst_case_blocks(*other);
      seqs += other->num_samples;
      for (const SequenceGroup* c : counted) {
        if (c->prompt == other->prompt && c->chain_seed == other->chain_seed) {
          blocks -= shared_prompt_blocks(*other);
          break;
        }
      }
      counted.push_back(other.get());
    }
  };
  count(running_);
  count(waiting_);
  if (blocks > kv_.pool().num_blocks() || seqs > config_.max_num_seqs) return {&g};
  return set;
}

// Members of one affinity whose prompt computation can be shared: same prompt and salt, and both
// new or both recomputing (so the leader's last chunk asks for logits exactly when they need them).
bool Scheduler::same_prompt(const SequenceGroup& a, const SequenceGroup& b) {
  return !a.affinity.empty() && a.affinity == b.affinity && a.chain_seed == b.chain_seed &&
         a.seqs.empty() == b.seqs.empty() && a.prompt == b.prompt;
}

SequenceGroup* Scheduler::prompt_leader_for(const SequenceGroup& g) const {
  if (g.affinity.empty()) return nullptr;
  for (const auto& r : running_) {
    if (r.get() != &g && r->state == GroupState::kPrompt && r->prompt_leader == 0 &&
        r->prompt_seq && same_prompt(*r, g)) {
      return r.get();
    }
  }
  return nullptr;
}

std::vector<SequenceGroup*> Scheduler::prompt_followers(const SequenceGroup& leader) const {
  std::vector<SequenceGroup*> out;
  for (const auto& r : running_) {
    if (r->prompt_leader == leader.id && r.get() != &leader) out.push_back(r.get());
  }
  return out;
}

// The leader goes away (preempted, aborted) before its prompt completed: its first follower
// computes the rest of the prompt (it holds the same blocks, computed as far as the leader got)
// and the others follow it.
void Scheduler::promote_followers(const SequenceGroup& leader) {
  const std::vector<SequenceGroup*> followers = prompt_followers(leader);
  for (SequenceGroup* f : followers)
    f->prompt_leader = f == followers.front() ? 0 : followers.front()->id;
}

bool Scheduler::waits_for_members(const SequenceGroup& g, Clock::TimePoint now) const {
  const std::optional<Clock::TimePoint> due = members_due(g);
  return due && now < *due;
}

// Until when a declared group's present members wait for the rest: affinity_wait after the
// first arrived, or affinity_idle after the latest, whichever comes first. nullopt: they do not
// wait (no declared size, preempted, a late member, or all present).
std::optional<Clock::TimePoint> Scheduler::members_due(const SequenceGroup& g) const {
  if (g.declared_affinity_size <= 1 || g.affinity.empty() || g.preempted) return std::nullopt;
  if (joins_started_affinity(g)) return std::nullopt;  // late member: joins at once
  int32_t present = 0;
  Clock::TimePoint first = g.arrived, last = g.arrived;
  for (const auto& w : waiting_) {
    if (w->affinity != g.affinity) continue;
    ++present;
    first = std::min(first, w->arrived);
    last = std::max(last, w->arrived);
  }
  if (present >= g.declared_affinity_size) return std::nullopt;
  Clock::TimePoint due = first + config_.affinity_wait;
  if (config_.affinity_idle > Clock::Duration::zero()) {
    due = std::min(due, last + config_.affinity_idle);
  }
  return due;
}

std::optional<Clock::TimePoint> Scheduler::held_until(Clock::TimePoint now) const {
  if (!running_.empty() || waiting_.empty()) return std::nullopt;
  std::optional<Clock::TimePoint> until;
  for (const auto& w : waiting_) {
    const std::optional<Clock::TimePoint> due = members_due(*w);
    if (!due || now >= *due) return std::nullopt;
    if (!until || *due < *until) until = *due;
  }
  return until;
}

}  // namespace kvc
