// Continuous batching of sibling groups under a per-step token budget, with chunked prefill.
//
// Rules (DESIGN.md "Replica engine", docs/architecture.md "Admission"):
//  - a group is admitted only when the whole group fits, growth included: its prompt blocks not
//    already cached, plus each sibling's blocks up to its projected length (its recompute
//    footprint too, after a preemption), plus the growth the running groups are projected to
//    need. A sibling whose end is certain (ignore_eos, no stop strings) is projected to run to
//    max_tokens; any other to generate a fraction (the growth ratio) of what it has left. The
//    ratio decays step by step while nothing is preempted and jumps back after a preemption
//    (SGLang's new_token_ratio habit), so admission learns how long outputs really are;
//  - a group that could never fit the pool, even alone, is refused at submission with a reason;
//  - preemption (by recompute) always takes a whole group, the most recently admitted first, and
//    never the oldest running group for a younger one, so the oldest always runs to its end;
//    committed prompt blocks stay in the prefix cache and generated tokens are kept, so a
//    preempted group loses only the KV it recomputes;
//  - preempted groups are re-admitted before any new group, in their original order, and the
//    waiting queue is strictly first-come-first-served, so no group starves.
// No backend and no CUDA here: the engine turns a SchedulerOutput into a ForwardBatch.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "replica/core/kv_cache.h"
#include "replica/core/sequence.h"

namespace kvc {

struct SchedulerConfig {
  int32_t max_num_seqs = 256;              // sequences running at once (siblings count one each)
  int32_t max_tokens_per_step = 512;       // decode tokens + prefill tokens in one forward pass
  int32_t reserve_blocks_per_sibling = 1;  // at least this many private blocks per sibling
  // Admission projects each group's growth (above). Off: a group is admitted when its prompt
  // and the reserve fit now, the pre-2026-12 rule that thrashes under memory pressure (kept for
  // tests that want preemptions).
  bool project_growth = true;
  double growth_ratio_max = 0.7;      // the ratio at start and after every preemption
  double growth_ratio_min = 0.1;      // the floor it decays to
  double growth_ratio_decay = 0.001;  // per step without a preemption
  int32_t max_model_len = 16384;      // prompt + max_tokens
  // How long the first members of a declared affinity group
  // (SequenceGroup::declared_affinity_size) wait for the rest before starting with those present.
  Clock::Duration affinity_wait = std::chrono::seconds(2);
  // ...and, within that, how long after the latest member arrived while none follows: a client
  // sends a group's members together, so a pause this long says the rest went elsewhere (several
  // routers that placed the group differently) or will not come; the members present start, and
  // any later one joins them. 0: only affinity_wait.
  Clock::Duration affinity_idle = std::chrono::milliseconds(250);
};

// One prefill chunk: tokens [start, start + length) of a group's prompt sequence
// (sibling == -1) or of one sibling (recompute after preemption).
struct ScheduledChunk {
  SequenceGroup* group;
  int32_t sibling;  // -1: the group's prompt sequence
  int32_t start;
  int32_t length;
  bool want_logits;  // the prompt is complete and the group is new: sample first tokens
  Sequence& seq() const { return sibling < 0 ? *group->prompt_seq : group->seqs[sibling]; }
};

struct ScheduledDecode {
  SequenceGroup* group;
  int32_t sibling;
  Sequence& seq() const { return group->seqs[sibling]; }
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> prefill;
  std::vector<ScheduledDecode> decode;
  // This schedule's KV moves in order (BlockPool::take_transfers): copy-on-write copies (those
  // into blocks of groups preempted later in the schedule dropped) and, with a host tier, its
  // offloads and loads. Done before the step's kernels, even when the step has no other work (the
  // engine carries them to the next batch).
  std::vector<KvTransfer> kv_moves;
  std::vector<uint64_t> admitted;         // group ids admitted this step
  std::vector<uint64_t> preempted;        // group ids preempted this step
  int32_t prefix_cache_query_tokens = 0;  // prompt tokens looked up at admission this step
  int32_t prefix_cache_hit_tokens = 0;
  bool empty() const { return prefill.empty() && decode.empty(); }
};

// Groups count sibling groups as the user sees them: the requests of one affinity (`group` id)
// are one group (running when any member runs).
struct SchedulerCounts {
  int32_t num_groups_waiting = 0;
  int32_t num_groups_running = 0;  // kPrompt or kRunning
  int32_t num_seqs_waiting = 0;
  int32_t num_seqs_running = 0;
  // Prompt/recompute tokens not yet computed: a waiting prompt whole, cached prefix included
  // (Scheduler::counts says why), a running group's rest.
  int64_t num_prefill_tokens_queued = 0;
  // The work taken on and not done yet, in tokens: each group's prefill still to compute (a
  // waiting group's as expected at its arrival: its prompt less the prefix cached then, nothing
  // for a member whose prompt another member computes; what a preempted group recomputes) plus
  // the tokens its unfinished sequences may still generate (max_tokens less what they did; a
  // stop may end them sooner; an open group's plan is planned_open_completion_tokens more per
  // unfinished sample, within max_tokens). Routers read it alike (GET /v1/load).
  int64_t num_work_tokens_queued = 0;
  int32_t planned_open_completion_tokens = 0;  // Scheduler::planned_open_completion()
  int64_t num_open_samples_ended = 0;          // ...and the open samples it learned from
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  // The reason a group can never run here (too long, could never fit the pool even alone), or ok.
  Status check_fits(const SequenceGroup& group) const;
  // The largest max_tokens with which `group` passes check_fits' length and KV checks (0: none).
  int32_t max_tokens_fit(const SequenceGroup& group) const;
  // Precondition: check_fits(*group).ok().
  void add(std::unique_ptr<SequenceGroup> group);
  // The work a group waiting since add() brings, as counts() counts it in num_work_tokens_queued:
  // its expected prefill and every sample's planned completion.
  int64_t new_group_work(const SequenceGroup& g) const;
  // Ends a group now (client went away): releases its blocks. Unknown ids are ignored.
  void abort(uint64_t group_id);

  // `now` (the engine's clock) decides which declared groups have waited long enough.
  SchedulerOutput schedule(Clock::TimePoint now = {});
  // When nothing can be scheduled only because declared groups wait for their members: the
  // earliest time one stops waiting (an engine loop sleeps until then or a new command).
  std::optional<Clock::TimePoint> held_until(Clock::TimePoint now) const;
  // Running members that share `leader`'s prompt computation (prompt_leader == leader.id), in
  // admission order: when its prompt completes they fork too (the engine samples their first
  // tokens from the same logits row).
  std::vector<SequenceGroup*> prompt_followers(const SequenceGroup& leader) const;

  // After the forward pass, for each scheduled chunk: the chunk's KV is computed.
  void complete_chunk(const ScheduledChunk& chunk);
  // After the prompt is computed: creates the siblings, each sharing the prompt's blocks.
  // `first_tokens` (one per sibling) is empty when the group is being recomputed.
  void fork_siblings(SequenceGroup& group, const std::vector<int32_t>& first_tokens);
  // After the forward pass, for each decode: the fed token's KV is computed.
  void complete_decode(const ScheduledDecode& decode);
  // A sibling finished: its blocks are released; the group finishes with its last sibling.
  // `completion_tokens`: the tokens it generated, the one that ended it included (a stop token
  // is reported, and counted in usage, but not kept in Sequence::tokens); an open group's
  // plan learns it.
  void finish(SequenceGroup& group, int32_t sibling, FinishReason reason,
              int32_t completion_tokens);
  // Removes and returns the groups that finished since the last call.
  std::vector<std::unique_ptr<SequenceGroup>> take_finished();

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  // New groups are admitted (the default). Off (a weight update draining, an operator's pause):
  // only groups that already started (running, or preempted and waiting to be recomputed) go on,
  // and late members of an affinity set that has a member running, so that a set finishes on
  // the weights it began with; new ones wait.
  void set_admitting(bool on) { admitting_ = on; }
  bool admitting() const { return admitting_; }
  // Groups that have started: running, or preempted and waiting to be recomputed.
  bool has_started_work() const;
  // A waiting group whose affinity set (same id and salt) has a member running.
  bool joins_started_affinity(const SequenceGroup& group) const;
  // Work schedule() can do now: started work, or waiting groups while admitting.
  bool has_runnable_work() const { return has_started_work() || (admitting_ && has_work()); }
  // The ids of every started group (what an aborting weight update ends).
  std::vector<uint64_t> started_groups() const;
  SchedulerCounts counts() const;
  // Completion tokens planned per sample of an open group (SequenceGroup::open_completion): the
  // mean length of the open samples that ended here (an average over about the last 64; aborted
  // ones do not count), api/openai_request.h kPlannedOpenCompletionTokens before any. Each
  // unfinished open sample is planned this many more tokens, however long it already is (as if
  // lengths had no memory), within its max_tokens; admission projects an open sample's growth
  // over at most kOpenGrowthPlans of them (projected_length).
  int32_t planned_open_completion() const;
  static constexpr int32_t kOpenGrowthPlans = 4;
  const std::deque<std::unique_ptr<SequenceGroup>>& waiting() const { return waiting_; }
  const std::vector<std::unique_ptr<SequenceGroup>>& running() const { return running_; }
  KvCacheManager& kv() { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  int64_t num_preemptions() const { return num_preemptions_; }
  double growth_ratio() const { return growth_ratio_; }

 private:
  struct StepState;
  bool schedule_running(SequenceGroup& group, StepState& step);
  struct AdmissionNeeds {
    int32_t seqs = 0;
    int32_t blocks = 0;
  };
  AdmissionNeeds admission_needs(const SequenceGroup& group, bool prompt_shared) const;
  // The group's prompt as a fresh sequence (holding no blocks), its hash chain filled.
  Sequence prompt_sequence(const SequenceGroup& group) const;
  // SequenceGroup::expected_prefill_tokens of a group arriving now.
  int32_t expected_prefill(const SequenceGroup& group) const;
  SequenceGroup* prompt_leader_for(const SequenceGroup& group) const;
  static bool same_prompt(const SequenceGroup& a, const SequenceGroup& b);
  bool waits_for_members(const SequenceGroup& group, Clock::TimePoint now) const;
  std::optional<Clock::TimePoint> members_due(const SequenceGroup& group) const;
  void promote_followers(const SequenceGroup& leader);
  int32_t projected_length(const SequenceGroup& group, int32_t length) const;
  int32_t projected_growth_of_running() const;
  SequenceGroup* preemption_victim() const;
  void admit(SequenceGroup& group, StepState& step);
  bool try_admit_with_partners(SequenceGroup& head, StepState& step);
  std::vector<SequenceGroup*> affinity_set(SequenceGroup& group) const;
  bool schedule_prompt_chunk(SequenceGroup& group, StepState& step);
  bool prepare_or_preempt(SequenceGroup& owner, Sequence& seq, int32_t end, StepState& step);
  void preempt(SequenceGroup& group, StepState& step);
  // `preempted`: its blocks stay warm in the prefix cache (KvCacheManager::release).
  void release_all(SequenceGroup& group, bool preempted = false);
  // The most blocks a group holds at once (its prompt's full blocks shared, each sibling's own
  // from the partial block on, at max_tokens), and the shared part.
  int32_t worst_case_blocks(const SequenceGroup& group) const;
  int32_t shared_prompt_blocks(const SequenceGroup& group) const;
  bool prompt_has_partial_block(const SequenceGroup& group) const;

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::deque<std::unique_ptr<SequenceGroup>> waiting_;   // preempted first, then by arrival
  std::vector<std::unique_ptr<SequenceGroup>> running_;  // by arrival (admission order)
  std::vector<std::unique_ptr<SequenceGroup>> finished_;
  uint64_t next_arrival_ = 1;
  int64_t num_preemptions_ = 0;
  bool admitting_ = true;
  double growth_ratio_ = 0;
  double open_completion_mean_;  // planned_open_completion's average
  int64_t num_open_samples_ended_ = 0;
};

}  // namespace kvc
