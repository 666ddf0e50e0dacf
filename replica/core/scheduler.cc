#include "replica/core/scheduler.h"

#include <algorithm>
#include <cassert>
#include <climits>
#include <cmath>
#include <string_view>
#include <unordered_set>

#include "api/openai_request.h"

namespace kvc {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kNone:
      break;
  }
  return "";
}

const char* group_state_name(GroupState s) {
  switch (s) {
    case GroupState::kWaiting:
      return "waiting";
    case GroupState::kPrompt:
      return "prompt";
    case GroupState::kRunning:
      return "running";
    case GroupState::kFinished:
      return "finished";
  }
  return "";
}

struct Scheduler::StepState {
  SchedulerOutput out;
  int32_t budget = 0;
  int32_t num_seqs = 0;  // sequences of groups running after this step's admissions
};

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv)
    : config_(config),
      kv_(kv),
      growth_ratio_(config.growth_ratio_max),
      open_completion_mean_(kPlannedOpenCompletionTokens) {
  // Every running sequence must be able to decode in every step.
  config_.max_tokens_per_step = std::max(config_.max_tokens_per_step, config_.max_num_seqs);
}

// The length a sibling now `length` tokens long is projected to reach.
int32_t Scheduler::projected_length(const SequenceGroup& g, int32_t length) const {
  if (!config_.project_growth) return length;
  const int32_t end = static_cast<int32_t>(g.prompt.size()) + g.params.max_tokens;
  int32_t left = std::max(0, end - length);
  if (g.params.runs_to_max_tokens()) return length + left;
  // An open group's bound is the context, not a length: projected as a few of the lengths such
  // samples reached here (preemption covers the longer ones), or one open chat at a time would
  // hold a large-context model's pool.
  if (g.open_completion) left = std::min(left, kOpenGrowthPlans * planned_open_completion());
  return length + static_cast<int32_t>(std::ceil(growth_ratio_ * left));
}

// Blocks the running groups are projected to need beyond those they hold: each live sibling up
// to its projected length (recompute included), counting the prompt's full blocks as shared.
int32_t Scheduler::projected_growth_of_running() const {
  if (!config_.project_growth) return 0;
  int64_t blocks = 0;
  for (const auto& g : running_) {
    const int32_t shared_full = static_cast<int32_t>(g->prompt.size()) / kv_.block_size();
    const int32_t prompt_len = static_cast<int32_t>(g->prompt.size());
    if (g->seqs.empty()) {
      const int32_t own = kv_.blocks_for(projected_length(*g, prompt_len)) - shared_full;
      // The prompt's partial block, held already, is one sibling's own (a member sharing another
      // member's prompt holds none of its own: its siblings copy it).
      const bool holds_partial = prompt_has_partial_block(*g) && g->prompt_leader == 0;
      blocks += std::max<int64_t>(
          0, static_cast<int64_t>(g->num_samples) * std::max(0, own) - (holds_partial ? 1 : 0));
      continue;
    }
    for (const Sequence& s : g->seqs) {
      if (s.finished()) continue;
      const int32_t held = std::max(shared_full, static_cast<int32_t>(s.block_table.size()));
      blocks += std::max(0, kv_.blocks_for(projected_length(*g, s.length())) - held);
    }
  }
  return static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX));
}

int32_t Scheduler::shared_prompt_blocks(const SequenceGroup& g) const {
  return static_cast<int32_t>(static_cast<int64_t>(g.prompt.size()) / kv_.block_size());
}
bool Scheduler::prompt_has_partial_block(const SequenceGroup& g) const {
  return static_cast<int64_t>(g.prompt.size()) % kv_.block_size() != 0;
}

// The prompt's full blocks are shared; its partial last block is shared until a sibling writes
// to it, when every sibling but the last to write copies it (KvCacheManager::prepare_write): at
// most one copy of that position per sibling, which is its own from then on.
int32_t Scheduler::worst_case_blocks(const SequenceGroup& g) const {
  const int64_t prompt = static_cast<int64_t>(g.prompt.size());
  const int32_t shared = shared_prompt_blocks(g);
  const int32_t per_sibling = kv_.blocks_for(prompt + g.params.max_tokens) - shared;
  return shared + g.num_samples * per_sibling;
}

int32_t Scheduler::max_tokens_fit(const SequenceGroup& g) const {
  const int64_t prompt = static_cast<int64_t>(g.prompt.size());
  const int64_t context = config_.max_model_len - prompt;
  // worst_case_blocks(g) <= the pool: each sibling's blocks past the shared ones fit its share.
  const int64_t shared = shared_prompt_blocks(g);
  // A declared group is admitted whole: its members' siblings share the pool too.
  const int64_t members = !g.affinity.empty() && g.declared_affinity_size > 1
                              ? int64_t{g.num_samples} * g.declared_affinity_size
                              : std::max(1, g.num_samples);
  const int64_t per_sibling = (kv_.pool().num_blocks() - shared) / members;
  const int64_t pool = (shared + per_sibling) * kv_.block_size() - prompt;
  return static_cast<int32_t>(std::clamp<int64_t>(std::min(context, pool), 0, 1 << 30));
}

Status Scheduler::check_fits(const SequenceGroup& g) const {
  if (g.prompt.empty()) return Error{"prompt is empty"};
  if (g.num_samples < 1) return Error{"n must be at least 1"};
  if (g.num_samples > config_.max_num_seqs) {
    return Error{"n = " + std::to_string(g.num_samples) +
                 " is more than this replica runs at once (" +
                 std::to_string(config_.max_num_seqs) + ")"};
  }
  const int64_t total = static_cast<int64_t>(g.prompt.size()) + g.params.max_tokens;
  if (total > config_.max_model_len) {
    return Error{"prompt (" + std::to_string(g.prompt.size()) + " tokens) + max_tokens (" +
                 std::to_string(g.params.max_tokens) + ") exceeds the model length " +
                 std::to_string(config_.max_model_len)};
  }
  if (!g.affinity.empty() && g.declared_affinity_size > 1) {
    // A declared group is admitted whole: all of it must fit at once.
    const int64_t seqs = int64_t{g.num_samples} * g.declared_affinity_size;
    // The members share the prompt's full blocks.
    const int64_t shared = shared_prompt_blocks(g);
    const int64_t blocks = shared + (worst_case_blocks(g) - shared) * g.declared_affinity_size;
    if (seqs > config_.max_num_seqs || blocks > kv_.pool().num_blocks()) {
      return Error{"group_size " + std::to_string(g.declared_affinity_size) +
                   " x n = " + std::to_string(g.num_samples) + " needs " + std::to_string(seqs) +
                   " sequences and up to " + std::to_string(blocks) +
                   " KV blocks at once; this replica runs " + std::to_string(config_.max_num_seqs) +
                   " sequences with " + std::to_string(kv_.pool().num_blocks()) + " blocks"};
    }
  }
  // The prompt and its first generated token alone: no n or max_tokens makes it fit.
  const int64_t prompt_blocks = kv_.blocks_for(static_cast<int32_t>(g.prompt.size()) + 1);
  if (prompt_blocks > kv_.pool().num_blocks()) {
    return Error{"prompt (" + std::to_string(g.prompt.size()) + " tokens) needs " +
                 std::to_string(prompt_blocks) + " KV blocks but the pool has " +
                 std::to_string(kv_.pool().num_blocks()) + ": it cannot run on this replica"};
  }
  const int32_t worst = worst_case_blocks(g);
  if (worst > kv_.pool().num_blocks()) {
    return Error{"the group needs up to " + std::to_string(worst) + " KV blocks (" +
                 std::to_string(g.num_samples) + " samples of up to " + std::to_string(total) +
                 " tokens) but the pool has " + std::to_string(kv_.pool().num_blocks()) +
                 "; lower n or max_tokens"};
  }
  return Status::Ok();
}

void Scheduler::add(std::unique_ptr<SequenceGroup> group) {
  assert(check_fits(*group).ok());
  group->arrival = next_arrival_++;
  group->state = GroupState::kWaiting;
  group->expected_prefill_tokens = expected_prefill(*group);
  waiting_.push_back(std::move(group));
}

int32_t Scheduler::expected_prefill(const SequenceGroup& g) const {
  auto shares = [&](const auto& other) { return same_prompt(*other, g); };
  if (std::any_of(waiting_.begin(), waiting_.end(), shares) ||
      std::any_of(running_.begin(), running_.end(), shares)) {
    return 0;  // another member computes it (prompt_leader_for), or has
  }
  const auto length = static_cast<int32_t>(g.prompt.size());
  if (!g.prompt_template) return length;
  const int32_t cached = kv_.find_cached_prefix(*g.prompt_template, length - 1).blocks;
  return std::max(0, length - cached * kv_.block_size());
}

void Scheduler::release_all(SequenceGroup& g, bool preempted) {
  if (g.prompt_seq) {
    kv_.release(*g.prompt_seq, preempted);
    g.prompt_seq.reset();
  }
  for (Sequence& s : g.seqs)
    kv_.release(s, preempted);
}

bool Scheduler::has_started_work() const {
  if (!running_.empty()) return true;
  return std::any_of(waiting_.begin(), waiting_.end(), [](const auto& g) { return g->preempted; });
}

std::vector<uint64_t> Scheduler::started_groups() const {
  std::vector<uint64_t> ids;
  for (const auto& g : running_)
    ids.push_back(g->id);
  for (const auto& g : waiting_)
    if (g->preempted) ids.push_back(g->id);
  return ids;
}

void Scheduler::abort(uint64_t group_id) {
  auto end_group = [&](std::unique_ptr<SequenceGroup> g) {
    promote_followers(*g);
    release_all(*g);
    for (Sequence& s : g->seqs)
      if (!s.finished()) s.finish = FinishReason::kAbort;
    g->state = GroupState::kFinished;
    finished_.push_back(std::move(g));
  };
  for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
    if ((*it)->id == group_id) {
      auto g = std::move(*it);
      waiting_.erase(it);
      return end_group(std::move(g));
    }
  }
  for (auto it = running_.begin(); it != running_.end(); ++it) {
    if ((*it)->id == group_id) {
      auto g = std::move(*it);
      running_.erase(it);
      return end_group(std::move(g));
    }
  }
}

void Scheduler::preempt(SequenceGroup& g, StepState& step) {
  promote_followers(g);
  g.prompt_leader = 0;  // re-admission looks for a leader again
  release_all(g, /*preempted=*/true);
  g.state = GroupState::kWaiting;
  g.preempted = true;
  ++g.num_preemptions;
  ++num_preemptions_;
  growth_ratio_ = config_.growth_ratio_max;  // outputs run longer than projected
  step.out.preempted.push_back(g.id);
  // Take back whatever was scheduled for it this step.
  std::erase_if(step.out.decode, [&](const ScheduledDecode& d) {
    if (d.group != &g) return false;
    ++step.budget;
    return true;
  });
  std::erase_if(step.out.prefill, [&](const ScheduledChunk& c) {
    if (c.group != &g) return false;
    step.budget += c.length;
    return true;
  });
  for (const Sequence& s : g.seqs)
    step.num_seqs -= s.finished() ? 0 : 1;
  auto it =
      std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &g; });
  std::unique_ptr<SequenceGroup> owned = std::move(*it);
  running_.erase(it);
  // Preempted groups wait ahead of new ones, among themselves in arrival order.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) {
    return !w->preempted || w->arrival > owned->arrival;
  });
  waiting_.insert(pos, std::move(owned));
}

bool Scheduler::prepare_or_preempt(SequenceGroup& owner, Sequence& seq, int32_t end,
                                   StepState& step) {
  while (!kv_.prepare_write(seq, end)) {
    // Out of blocks: preempt the most recently admitted group with every group sharing its
    // affinity; that may include the owner itself.
    bool owner_preempted = false;
    for (SequenceGroup* victim : affinity_set(*preemption_victim())) {
      owner_preempted = owner_preempted || victim == &owner;
      preempt(*victim, step);
    }
    if (owner_preempted) return false;
  }
  return true;
}

// The most recently admitted group whose affinity set spares the oldest running group: the
// oldest is never preempted for a younger one, so it always runs to its end (check_fits
// guarantees it fits alone). Only when every running group belongs to the oldest's set (which fits
// the pool by construction) is that set the victim.
SequenceGroup* Scheduler::preemption_victim() const {
  const SequenceGroup* oldest = running_.front().get();
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    SequenceGroup& g = **it;
    if (&g == oldest) break;
    const auto set = affinity_set(g);
    if (std::find(set.begin(), set.end(), oldest) == set.end()) return &g;
  }
  return running_.back().get();
}

// Decodes and recompute chunks of a running group; false if the group was preempted.
bool Scheduler::schedule_running(SequenceGroup& g, StepState& step) {
  for (Sequence& s : g.seqs) {
    if (s.finished() || s.num_computed != s.length() - 1) continue;
    if (!prepare_or_preempt(g, s, s.length(), step)) return false;
    step.out.decode.push_back(ScheduledDecode{&g, s.sibling});
    --step.budget;
  }
  return true;
}

bool Scheduler::schedule_prompt_chunk(SequenceGroup& g, StepState& step) {
  if (g.state == GroupState::kPrompt) {
    if (g.prompt_leader != 0) return true;  // the leader's chunks compute this prompt
    Sequence& p = *g.prompt_seq;
    const int32_t len = std::min(step.budget, p.length() - p.num_computed);
    if (len <= 0) return true;
    const bool completes = p.num_computed + len == p.length();
    step.out.prefill.push_back(
        ScheduledChunk{&g, -1, p.num_computed, len, completes && g.seqs.empty()});
    step.budget -= len;
    return true;
  }
  // Recompute after preemption: each sibling's own tokens, all but the last (the next input).
  for (Sequence& s : g.seqs) {
    if (s.finished() || s.num_computed >= s.length() - 1) continue;
    const int32_t len = std::min(step.budget, s.length() - 1 - s.num_computed);
    if (len <= 0) return true;
    if (!prepare_or_preempt(g, s, s.num_computed + len, step)) return false;
    step.out.prefill.push_back(ScheduledChunk{&g, s.sibling, s.num_computed, len, false});
    step.budget -= len;
  }
  return true;
}

Sequence Scheduler::prompt_sequence(const SequenceGroup& g) const {
  assert(g.prompt_template);  // Engine::prepare hashes every prompt
  return *g.prompt_template;
}

Scheduler::AdmissionNeeds Scheduler::admission_needs(const SequenceGroup& g,
                                                     bool prompt_shared) const {
  AdmissionNeeds needs;
  needs.seqs = g.num_samples;
  if (!g.seqs.empty()) {
    needs.seqs = 0;
    for (const Sequence& s : g.seqs)
      needs.seqs += s.finished() ? 0 : 1;
  }
  if (!prompt_shared) {
    const Sequence prompt = prompt_sequence(g);
    // Leave at least one prompt token to compute: its logits give the first tokens.
    const auto cached = kv_.find_cached_prefix(prompt, static_cast<int32_t>(g.prompt.size()) - 1);
    // Its full blocks: a partial last block is one sibling's own (the others copy it when
    // they write: worst_case_blocks), counted below.
    // Blocks only in the host tier are loaded into new ones.
    needs.blocks =
        shared_prompt_blocks(g) - cached.blocks + cached.blocks_in_lru + cached.blocks_in_host;
  }
  // Each sibling's private blocks up to its projected length: a preempted group's whole
  // recompute footprint plus its growth, so it is not re-admitted only to be preempted again.
  const int32_t shared_full = shared_prompt_blocks(g);
  auto own = [&](int32_t length) {
    return std::max(config_.reserve_blocks_per_sibling,
                    kv_.blocks_for(projected_length(g, length)) - shared_full);
  };
  if (g.seqs.empty()) {
    needs.blocks += g.num_samples * own(static_cast<int32_t>(g.prompt.size()));
  } else {
    for (const Sequence& s : g.seqs)
      needs.blocks += s.finished() ? 0 : own(s.length());
  }
  return needs;
}

// Precondition: admission_needs(g) fits.
void Scheduler::admit(SequenceGroup& g, StepState& step) {
  std::optional<Sequence> shared;
  int32_t hit = 0;
  if (SequenceGroup* leader = prompt_leader_for(g)) {
    // The prompt is being computed for another member: share its blocks, compute nothing.
    shared.emplace(prompt_sequence(g));
    kv_.fork(*leader->prompt_seq, *shared);
    g.prompt_leader = leader->id;
    hit = shared->length();
  }
  Sequence prompt = shared ? std::move(*shared) : prompt_sequence(g);
  if (!shared) {
    hit = kv_.attach_cached_prefix(prompt, prompt.length() - 1, /*recompute=*/g.preempted);
    const bool ok = kv_.prepare_write(prompt, prompt.length());
    assert(ok);  // checked by the caller
    (void)ok;
  }
  step.out.prefix_cache_query_tokens += prompt.length();
  step.out.prefix_cache_hit_tokens += hit;
  if (!g.preempted) g.num_cached_prompt_tokens = hit;
  g.prompt_seq.emplace(std::move(prompt));
  g.state = GroupState::kPrompt;
  step.num_seqs +=
      g.seqs.empty()
          ? g.num_samples
          : static_cast<int32_t>(std::count_if(g.seqs.begin(), g.seqs.end(),
                                               [](const Sequence& s) { return !s.finished(); }));
  step.out.admitted.push_back(g.id);
  auto it =
      std::find_if(waiting_.begin(), waiting_.end(), [&](const auto& w) { return w.get() == &g; });
  std::unique_ptr<SequenceGroup> owned = std::move(*it);
  waiting_.erase(it);
  auto pos = std::upper_bound(running_.begin(), running_.end(), owned->arrival,
                              [](uint64_t a, const auto& r) { return a < r->arrival; });
  running_.insert(pos, std::move(owned));
  schedule_prompt_chunk(g, step);
}

// Admits the group at the head of the queue together with the waiting groups sharing its
// affinity, all or none.
bool Scheduler::try_admit_with_partners(SequenceGroup& head, StepState& step) {
  std::vector<SequenceGroup*> set = affinity_set(head);
  // Blocks free for newcomers once the running groups have grown as projected.
  const int32_t room = kv_.pool().num_allocatable() - projected_growth_of_running();
  AdmissionNeeds total;
  for (size_t i = 0; i < set.size(); ++i) {
    const SequenceGroup& g = *set[i];
    // A member whose prompt another member computes (running, or admitted just before it)
    // needs no prompt blocks of its own.
    bool shared = prompt_leader_for(g) != nullptr;
    for (size_t j = 0; j < i && !shared; ++j)
      shared = same_prompt(*set[j], g);
    const AdmissionNeeds n = admission_needs(g, shared);
    total.seqs += n.seqs;
    total.blocks += n.blocks;
  }
  if (step.num_seqs + total.seqs <= config_.max_num_seqs && total.blocks <= room) {
    for (SequenceGroup* g : set)
      admit(*g, step);
    return true;
  }
  // Together they do not fit now. Wait for running groups to finish, unless waiting cannot help
  // (nothing runs, or the set could never fit at once): then the head goes alone.
  const bool never_together = total.seqs > config_.max_num_seqs ||
                              total.blocks > kv_.pool().num_blocks() || running_.empty();
  if (set.size() == 1 || !never_together) return false;
  const AdmissionNeeds alone = admission_needs(head, prompt_leader_for(head) != nullptr);
  if (step.num_seqs + alone.seqs > config_.max_num_seqs || alone.blocks > room) return false;
  admit(head, step);
  return true;
}

SchedulerOutput Scheduler::schedule(Clock::TimePoint now) {
  growth_ratio_ = std::max(config_.growth_ratio_min, growth_ratio_ - config_.growth_ratio_decay);
  StepState step;
  step.budget = config_.max_tokens_per_step;
  for (const auto& g : running_) {
    for (const Sequence& s : g->seqs)
      step.num_seqs += s.finished() ? 0 : 1;
    if (g->seqs.empty()) step.num_seqs += g->num_samples;
  }
  // 1. Decodes first, oldest groups first. Preemption can remove groups (and their affinity
  // partners) anywhere in the list, so walk a snapshot and skip those no longer running.
  std::vector<SequenceGroup*> order;
  for (const auto& g : running_)
    order.push_back(g.get());
  auto still_running = [&](SequenceGroup* g) {
    return g->state == GroupState::kPrompt || g->state == GroupState::kRunning;
  };
  for (SequenceGroup* g : order) {
    if (still_running(g) && g->state == GroupState::kRunning) schedule_running(*g, step);
  }
  // 2. Prompt and recompute chunks with the budget left.
  for (SequenceGroup* g : order) {
    if (step.budget <= 0) break;
    if (still_running(g)) schedule_prompt_chunk(*g, step);
  }
  // 3. Admissions, strictly first come first served (preempted groups are at the front), except
  // that declared groups still waiting for their members (at most affinity_wait) let later groups
  // pass.
  while (step.budget > 0) {
    SequenceGroup* head = nullptr;
    for (const auto& w : waiting_) {
      if (!admitting_ && !w->preempted && !joins_started_affinity(*w)) continue;
      if (!waits_for_members(*w, now)) {
        head = w.get();
        break;
      }
    }
    if (head == nullptr || !try_admit_with_partners(*head, step)) break;
  }
  step.out.kv_moves = kv_.pool().take_transfers();
  // Copies into blocks of groups preempted later in the step are moot. (Only a step that both
  // copied and preempted can hold such copies: skip the set of every live block otherwise, which
  // costs more than the rest of the schedule at 128 long sequences.)
  if (step.out.preempted.empty() ||
      std::none_of(step.out.kv_moves.begin(), step.out.kv_moves.end(),
                   [](const KvTransfer& t) { return t.kind == KvTransfer::Kind::kCopy; })) {
    return std::move(step.out);
  }
  std::unordered_set<int32_t> live;
  for (const auto& g : running_) {
    if (g->prompt_seq)
      live.insert(g->prompt_seq->block_table.begin(), g->prompt_seq->block_table.end());
    for (const Sequence& s : g->seqs)
      live.insert(s.block_table.begin(), s.block_table.end());
  }
  // The kept moves stay in their places.
  std::erase_if(step.out.kv_moves, [&](const KvTransfer& t) {
    return t.kind == KvTransfer::Kind::kCopy && !live.contains(t.block);
  });
  return std::move(step.out);
}

void Scheduler::complete_chunk(const ScheduledChunk& chunk) {
  Sequence& s = chunk.seq();
  assert(s.num_computed == chunk.start);
  s.num_computed += chunk.length;
  kv_.commit_computed(s);
  if (chunk.sibling >= 0) return;
  // The followers' prompts are the same blocks: computed (and committed) as far as this one.
  for (SequenceGroup* f : prompt_followers(*chunk.group)) {
    f->prompt_seq->num_computed = s.num_computed;
    f->prompt_seq->num_committed_blocks = s.num_committed_blocks;
  }
}

void Scheduler::fork_siblings(SequenceGroup& g, const std::vector<int32_t>& first_tokens) {
  assert(g.state == GroupState::kPrompt && g.prompt_seq &&
         g.prompt_seq->num_computed == g.prompt_seq->length());
  Sequence& prompt = *g.prompt_seq;
  if (g.seqs.empty()) {
    assert(static_cast<int32_t>(first_tokens.size()) == g.num_samples);
    for (int32_t i = 0; i < g.num_samples; ++i) {
      Sequence s(i, prompt.keys);
      s.tokens = prompt.tokens;
      kv_.fork(prompt, s);
      g.seqs.push_back(std::move(s));
    }
  } else {
    for (Sequence& s : g.seqs) {
      if (!s.finished()) kv_.fork(prompt, s);
    }
  }
  kv_.release(prompt);
  g.prompt_seq.reset();
  g.state = GroupState::kRunning;
  g.preempted = false;
  g.prompt_leader = 0;
}

void Scheduler::complete_decode(const ScheduledDecode& d) {
  Sequence& s = d.seq();
  assert(s.num_computed == s.length() - 1);
  s.num_computed += 1;
  kv_.commit_computed(s);
}

void Scheduler::finish(SequenceGroup& g, int32_t sibling, FinishReason reason,
                       int32_t completion_tokens) {
  Sequence& s = g.seqs[sibling];
  assert(!s.finished());
  s.finish = reason;
  kv_.release(s);
  // (Aborted samples never come here: abort() ends them.)
  if (g.open_completion) {
    constexpr double kWeight = 1.0 / 64;  // planned_open_completion: about the last 64 samples
    open_completion_mean_ += kWeight * (completion_tokens - open_completion_mean_);
    ++num_open_samples_ended_;
  }
  if (!g.all_finished()) return;
  g.state = GroupState::kFinished;
  auto it =
      std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == &g; });
  assert(it != running_.end());
  finished_.push_back(std::move(*it));
  running_.erase(it);
}

std::vector<std::unique_ptr<SequenceGroup>> Scheduler::take_finished() {
  return std::exchange(finished_, {});
}

namespace {

// Tokens a group is planned to generate still: per unfinished sibling, max_tokens less what it
// generated, and for an open group no more than `open_plan`.
int64_t decode_tokens_left(const SequenceGroup& g, int32_t open_plan) {
  const int64_t max_tokens = std::max(g.params.max_tokens, 0);
  auto plan = [&](int64_t generated) {
    const int64_t left = std::max<int64_t>(0, max_tokens - generated);
    return g.open_completion ? std::min<int64_t>(left, open_plan) : left;
  };
  if (g.seqs.empty()) return plan(0) * g.num_samples;
  const auto prompt = static_cast<int64_t>(g.prompt.size());
  int64_t left = 0;
  for (const Sequence& s : g.seqs) {
    if (!s.finished()) left += plan(s.length() - prompt);
  }
  return left;
}

}  // namespace

int64_t Scheduler::new_group_work(const SequenceGroup& g) const {
  return g.expected_prefill_tokens + decode_tokens_left(g, planned_open_completion());
}

int32_t Scheduler::planned_open_completion() const {
  return std::max(1, static_cast<int32_t>(std::lround(open_completion_mean_)));
}

SchedulerCounts Scheduler::counts() const {
  SchedulerCounts c;
  c.planned_open_completion_tokens = planned_open_completion();
  c.num_open_samples_ended = num_open_samples_ended_;
  // Requests sharing an affinity are one group: running if any member runs.
  std::unordered_set<std::string_view> running_sets, waiting_sets;
  for (const auto& g : running_) {
    if (g->affinity.empty() || running_sets.insert(g->affinity).second) ++c.num_groups_running;
  }
  for (const auto& g : waiting_) {
    if (g->affinity.empty() ||
        (!running_sets.contains(g->affinity) && waiting_sets.insert(g->affinity).second)) {
      ++c.num_groups_waiting;
    }
    int32_t seqs = g->num_samples;
    int64_t tokens = static_cast<int64_t>(g->prompt.size());
    if (!g->seqs.empty()) {
      seqs = 0;
      for (const Sequence& s : g->seqs) {
        if (s.finished()) continue;
        ++seqs;
        tokens += s.length() - 1 - static_cast<int64_t>(g->prompt.size());
      }
    }
    c.num_seqs_waiting += seqs;
    // A waiting prompt counts whole here, its cached prefix included, unlike the work below. The
    // kvcascade policy weighs it as the holder's queue: counted without the cached prefix
    // (twentieth session) the A10G Mooncake row gained a point of hits, but holders of long
    // shared prompts then kept them up to the work bound's tolerance (H200 Mooncake row max/mean
    // 1.35-1.51 against 1.15-1.25; bench/results/routing-profiles.md, twentieth session).
    c.num_prefill_tokens_queued += tokens;
    c.num_work_tokens_queued +=
        g->preempted ? tokens + decode_tokens_left(*g, c.planned_open_completion_tokens)
                     : new_group_work(*g);
  }
  for (const auto& g : running_) {
    int64_t prefill = 0;  // the group's prompt or recompute tokens still to compute
    if (g->prompt_seq && g->prompt_leader == 0) {
      prefill += g->prompt_seq->length() - g->prompt_seq->num_computed;
    }
    if (g->seqs.empty()) c.num_seqs_running += g->num_samples;
    for (const Sequence& s : g->seqs) {
      if (s.finished()) continue;
      ++c.num_seqs_running;
      prefill += std::max(0, s.length() - 1 - s.num_computed);
    }
    c.num_prefill_tokens_queued += prefill;
    c.num_work_tokens_queued += prefill + decode_tokens_left(*g, c.planned_open_completion_tokens);
  }
  return c;
}

}  // namespace kvc
