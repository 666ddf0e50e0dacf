// The replica engine's step loop: schedule -> build the ForwardBatch (with the cascade plan and
// the tokens to draw) -> backend forward (model and sampling) -> append tokens, stop, finish.
// Single-threaded: the server runs it on its own thread and talks to it through a channel.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "replica/backend/backend.h"
#include "replica/backend/sampler.h"
#include "replica/core/block_pool.h"
#include "replica/core/byte_space.h"
#include "replica/core/cascade_planner.h"
#include "replica/core/kv_cache.h"
#include "replica/core/scheduler.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc {

struct EngineConfig {
  SchedulerConfig scheduler;
  CascadeConfig cascade;
  // Logprobs of the distribution tokens are drawn from (after temperature, top-k, top-p), not
  // of the model's raw logits (--logprobs-mode processed).
  bool processed_logprobs = false;
  // The block pool's insertion by reuse (BlockPool::kColdReuseRate; 0: LRU alone).
  double cold_reuse_rate = BlockPool::kColdReuseRate;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int32_t n = 1;
  SamplingParams params;
  std::string cache_salt;  // requests with different salts never share KV
  // The client's `group` id (an affinity group: requests naming it are scheduled as one unit, each
  // still its own SequenceGroup) and its `group_size` (requests the client will send with it; 0:
  // not declared). Not to be confused with SequenceGroup, the n siblings of one request.
  std::string affinity;
  int32_t affinity_size = 0;
  // params.max_tokens is a default, not the client's: it is lowered to what the model's context
  // and the KV pool leave for n samples of this prompt (at least 1), where a client's own
  // max_tokens would be refused.
  bool max_tokens_is_default = false;
  // ...and it is the context's bound, not a length (a chat request without max_tokens): the work
  // planned for it is Scheduler::planned_open_completion per sample.
  bool open_completion = false;
  // The router's id of the send (the x-kvcascade-route header), given back in the group's work
  // announcement (KvWork::route); empty: none.
  std::string route;
};

// A token a sibling generated (the model's EOS included: it is the last one then).
struct GeneratedToken {
  int32_t id = 0;
  float logprob = 0;  // SampledToken::logprob
  // Its text: the bytes the tokenizer gives it (empty for an EOS, which adds no text).
  std::string text;
  std::vector<TokenLogprob> top;  // the most likely tokens, when the request asked for logprobs
};

// New text of one sibling this step.
struct SequenceOutput {
  uint64_t group_id;  // the SequenceGroup
  int32_t sibling;
  std::string text_delta;
  int32_t num_new_tokens;
  FinishReason finish;  // kNone while it runs
  // The token of this step (num_new_tokens is 1). Its text and text_delta differ when bytes are
  // held back (a stop string may be forming, a character is split) or cut (a stop string was
  // found).
  GeneratedToken token;
  StopReason stop_reason;  // with finish kStop: Sequence::stop_reason
};

struct StepStats {
  Clock::Duration duration{};
  // Where the step's time went: scheduling, building the batch (cascade planning included), the
  // backend's forward (model and sampling); the rest is appending tokens and stop checks.
  Clock::Duration schedule{}, build{}, forward{};
  int32_t num_decode_seqs = 0;
  int32_t num_prefill_tokens = 0;
  int32_t num_block_copies = 0;
  // Host tier transfers: blocks loaded back instead of computed, blocks evicted to host memory.
  int32_t num_host_loads = 0, num_host_offloads = 0;
  CascadeStats cascade;
  std::vector<uint64_t> admitted, preempted;
  int32_t prefix_cache_query_tokens = 0;
  int32_t prefix_cache_hit_tokens = 0;
};

struct StepResult {
  std::vector<SequenceOutput> outputs;
  std::vector<std::unique_ptr<SequenceGroup>> finished;  // groups completed this step
  StepStats stats;
  std::string error;  // non-empty when the backend failed and the step's groups were ended
};

class Engine {
 public:
  Engine(Backend& backend, const Tokenizer& tokenizer, EngineConfig config, const Clock& clock);

  // Validates and queues a group; the error says why it can never run here.
  Result<uint64_t> submit(GenerationRequest request);
  // Validates every request first, then queues all of them, or none: the error of the first
  // request that can never run, prefixed with "prompt[i]: " when there are several. Group ids in
  // request order.
  Result<std::vector<uint64_t>> submit_all(std::vector<GenerationRequest> requests);
  void abort(uint64_t group_id);
  // One forward pass (or nothing, when there is no work).
  StepResult step();
  bool has_work() const { return scheduler_.has_work(); }
  // Work a step can do now (Scheduler::has_runnable_work: not new groups while not admitting).
  bool has_runnable_work() const { return scheduler_.has_runnable_work(); }
  // Admission of new groups (Scheduler::set_admitting): off while a weight update drains or an
  // operator paused the replica.
  void set_admitting(bool on) { scheduler_.set_admitting(on); }
  // A weight update's swap, between steps, with no group started (the caller drained or aborted
  // them): the backend loads the folder (Backend::load_weights), then the prefix cache is
  // flushed (every cached block forgotten, a cleared KV event), on success and also after a
  // failure that touched the weights. *flushed: blocks that held content.
  Status replace_weights(const std::string& folder, int32_t* flushed);
  Backend& backend() { return backend_; }
  const Backend& backend() const { return backend_; }
  // Work is queued but none can start for this long (declared groups waiting for their
  // members): an engine loop sleeps that long unless a command arrives.
  std::optional<Clock::Duration> held_for() const {
    const Clock::TimePoint now = clock_.now();
    const std::optional<Clock::TimePoint> until = scheduler_.held_until(now);
    if (!until) return std::nullopt;
    return std::max(Clock::Duration::zero(), *until - now);
  }

  const Scheduler& scheduler() const { return scheduler_; }
  const BlockPool& pool() const { return pool_; }
  BlockPool& pool() { return pool_; }
  const ModelConfig& model() const { return backend_.config(); }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  // The ids that end a sequence (unless the request sets ignore_eos), sorted: the tokenizer's
  // EOS tokens and the model's end ids applied.
  std::vector<int32_t> eos_token_ids() const;
  // The model's end ids (ModelConfig::eos_token_ids) that do not end a sequence: with the byte
  // tokenizer, whose ids are bytes, those other than its EOS.
  std::vector<int32_t> model_eos_not_applied() const;
  // How this replica keys its prefix cache and reads token-id prompts (api/key_space.h).
  KeySpace key_space() const { return key_space_; }
  const EngineConfig& config() const { return config_; }
  const Clock& clock() const { return clock_; }  // the engine loop reads its time here too
  // The router's chain seed (hash_model + cache_salt): byte blocks, and with the byte tokenizer
  // the prefix cache's keys too.
  BlockHash chain_seed(const std::string& cache_salt) const;

  // KV events since the last call, in router key space (byte blocks): the pool's own with the
  // byte tokenizer, translated from token blocks with any other (byte_space.h), none when the
  // tokenizer does not give its input back byte for byte; then a queued event (KvQueued) for each
  // prompt submitted since, with the blocks it will compute; then the work each group submitted
  // since brings (KvWork, in every key space: it names no blocks).
  std::vector<KvEvent> take_kv_events();
  // The last KvWork's seq (0: none yet): a load snapshot taken with the scheduler's counts holds
  // the work of every announcement up to it.
  uint64_t work_seq() const { return work_seq_; }
  // The queued events are best effort, so bounded: a prompt's first blocks past those held, and
  // so many blocks in all between two takes (a batch stays far below a router's
  // max_kv_event_bytes, and an engine whose events nobody takes stops adding).
  static constexpr size_t kMaxQueuedBlocksPerPrompt = 8192;
  static constexpr size_t kMaxQueuedBlocks = 65536;
  // Every byte block held, parents first: a new subscriber's snapshot. With `queued`, then a
  // queued event for each prompt not computed yet (waiting, or running mid-prefill; as submit
  // announced it, at most kMaxSnapshotQueuedBlocks in all, so that the snapshot batch stays
  // within a router's batch limits): a router that (re)subscribes learns where prompts wait,
  // not only those submitted after.
  std::vector<KvEvent> kv_snapshot(bool queued = false) const;
  static constexpr size_t kMaxSnapshotQueuedBlocks = 8192;
  // Work announcements kept between two takes (the newest; about 100 bytes each, so a batch
  // stays within a router's max_kv_event_bytes beside the queued events' blocks).
  static constexpr size_t kMaxWorkEvents = 4096;

  // Sees every row of logits a token is sampled from (tests, debugging; a host copy of each).
  using LogitsObserver = std::function<void(uint64_t group, int32_t sibling, int32_t position,
                                            std::span<const float> logits)>;
  void set_logits_observer(LogitsObserver observer) { observer_ = std::move(observer); }

 private:
  // The token ends a sequence: the tokenizer's EOS, or one of the model's end ids.
  bool is_eos(int32_t token) const;
  // The group a request describes, or why it can never run here.
  Result<std::unique_ptr<SequenceGroup>> prepare(GenerationRequest request);
  // The prompt as a sequence with its keys in this replica's key space.
  Sequence prompt_sequence(const SequenceGroup& g, const std::string& cache_salt) const;
  // Queues the KvQueued event of a submitted group: its prompt's router chain past the blocks
  // published already (none when all are, or the key space has no router chain); once per
  // distinct chain between two take_kv_events.
  void note_queued(const SequenceGroup& g);
  // Announces the work a group just added to the scheduler brings (KvWork).
  void note_work(const SequenceGroup& g, const std::string& route);
  // That event for g: at most `budget` blocks past those published; nullopt when none.
  std::optional<KvQueued> queued_event(const SequenceGroup& g, size_t budget) const;
  // Queued events, at most one per distinct event, with their blocks counted. A chain's blocks
  // depend on every block before them, so an event's last block and its length name it: the
  // lookup finds an equal one in constant time (siblings sent as separate requests, a GRPO step,
  // queue one prompt many times at once, among as many other prompts).
  struct QueuedEvents {
    std::vector<KvQueued> events;
    size_t blocks = 0;
    std::unordered_map<uint64_t, size_t> index;  // (last block, length) -> position in events
    void clear() { *this = QueuedEvents{}; }
  };
  // Appends g's queued event to `queued` unless an equal one is there, while queued.blocks
  // stays within max_blocks.
  void add_queued(const SequenceGroup& g, QueuedEvents& queued, size_t max_blocks) const;
  // Extends s's keys by one token.
  void hash_token(Sequence& s, int32_t token) const;
  ForwardBatch build_batch(const SchedulerOutput& work, StepStats& stats);
  // The group and the members whose prompt it computes (Scheduler::prompt_followers).
  std::vector<SequenceGroup*> prompt_members(SequenceGroup& group) const;
  // Takes the token's top entries (moved out of `token`).
  void append_token(SequenceGroup& g, Sequence& s, SampledToken& token, StepResult& result);
  // After a failed forward whose batch moved KV to or from the host tier.
  void fail_loads(const std::vector<KvTransfer>& transfers);
  void fail_batch(const SchedulerOutput& work, const Status& status, StepResult& result);
  void emit(SequenceGroup& g, Sequence& s, GeneratedToken token, StepResult& result);

  Backend& backend_;
  const Tokenizer& tokenizer_;
  EngineConfig config_;
  const Clock& clock_;
  BlockPool pool_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  // KV moves of schedules that had no work, done before the next batch's own.
  std::vector<KvTransfer> carried_moves_;
  CascadePlanner planner_;
  ForwardOutput out_;
  KeySpace key_space_;                         // the tokenizer's (api/key_space.h)
  std::vector<int32_t> model_eos_;             // the model's end ids besides the tokenizer's
  std::optional<ByteSpaceEvents> byte_space_;  // kTokenIds: the cached blocks as byte blocks
  QueuedEvents queued_;                        // note_queued's, until take_kv_events
  std::deque<KvWork> work_;                    // note_work's, until take_kv_events
  uint64_t work_seq_ = 0;                      // the last KvWork's seq
  LogitsObserver observer_;
  uint64_t next_group_id_ = 1;
};

}  // namespace kvc
