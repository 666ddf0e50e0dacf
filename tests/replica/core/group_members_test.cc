// Sibling groups across requests: requests sharing a `group` id are one sibling group
// in the engine. Their prompt is computed once (the others share its blocks and draw their first
// tokens from its logits), a declared group_size is admitted whole (or after affinity_wait with
// those present), late members join at once, and preemption and counts treat the set as one.
// The tiny model on the CPU backend, a FakeClock.
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/core/engine.h"
#include "replica/model/weights.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

class GroupMembersTest : public ::testing::Test {
 protected:
  static ModelWeights& weights() {
    static ModelWeights w = random_weights(*preset_config("tiny"), 42);
    return w;
  }

  // affinity_idle is off unless a test turns it on (`idle`): the tests below time affinity_wait.
  void make_engine(int32_t blocks = 512, int32_t tokens_per_step = 512,
                   std::chrono::milliseconds idle = 0ms) {
    backend_ = std::make_unique<CpuBackend>(weights(), blocks, 16);
    EngineConfig config;
    config.cascade.min_shared_tokens = 16;
    config.cascade.pass_overhead_bytes = 0;
    config.scheduler.max_tokens_per_step = tokens_per_step;
    config.scheduler.max_num_seqs = std::min(256, tokens_per_step);
    config.scheduler.affinity_wait = 2s;
    config.scheduler.affinity_idle = idle;
    engine_ = std::make_unique<Engine>(*backend_, tokenizer_, config, clock_);
  }

  GenerationRequest member(const std::string& group, int32_t group_size, int32_t max_tokens = 12,
                           float temperature = 0.0f, uint64_t seed = 7) {
    GenerationRequest r;
    r.prompt = tokenizer_.encode(kPrompt);
    r.n = 1;
    r.params.temperature = temperature;
    r.params.max_tokens = max_tokens;
    r.params.seed = seed;
    r.params.ignore_eos = true;
    r.affinity = group;
    r.affinity_size = group_size;
    return r;
  }

  uint64_t submit(GenerationRequest r) {
    auto id = engine_->submit(std::move(r));
    EXPECT_TRUE(id.ok()) << (id.ok() ? "" : id.error().message);
    return id.ok() ? *id : 0;
  }

  // Steps until no work is left: prefill tokens computed, and each finished group's tokens and
  // cached prompt tokens.
  struct Run {
    int64_t prefill_tokens = 0;
    std::map<uint64_t, std::vector<int32_t>> tokens;  // group id -> sibling 0's generated tokens
    std::map<uint64_t, int32_t> cached;
    int32_t max_groups_running = 0;
    int32_t max_seqs_running = 0;
  };
  void step_once(Run& run) {
    StepResult step = engine_->step();
    EXPECT_EQ(step.error, "");
    run.prefill_tokens += step.stats.num_prefill_tokens;
    const SchedulerCounts c = engine_->scheduler().counts();
    run.max_groups_running = std::max(run.max_groups_running, c.num_groups_running);
    run.max_seqs_running = std::max(run.max_seqs_running, c.num_seqs_running);
    for (const auto& g : step.finished) {
      if (g->seqs.empty()) continue;  // aborted before its prompt completed
      run.tokens[g->id].assign(g->seqs[0].tokens.begin() + g->prompt.size(),
                               g->seqs[0].tokens.end());
      run.cached[g->id] = g->num_cached_prompt_tokens;
    }
  }
  Run drain() {
    Run run;
    for (int i = 0; i < 10000 && engine_->has_work(); ++i)
      step_once(run);
    EXPECT_FALSE(engine_->has_work());
    EXPECT_EQ(engine_->pool().counts().num_blocks_used, 0);
    return run;
  }

  static constexpr const char* kPrompt =
      "You are a careful grader. Score the following answer from 1 to 10 and explain: the sky "
      "is blue because of Rayleigh scattering of sunlight by the air.";

  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Engine> engine_;
};

// Eight requests with one group id are one group of eight: one prefill of the prompt, one
// group in the counts, and (greedy) the tokens of one request with n = 8.
TEST_F(GroupMembersTest, EightRequestsAreOneGroupWithOnePrefill) {
  make_engine();
  std::vector<uint64_t> ids;
  for (int i = 0; i < 8; ++i)
    ids.push_back(submit(member("rollout-1", 8)));
  const Run run = drain();
  const int32_t prompt_len = static_cast<int32_t>(tokenizer_.encode(kPrompt).size());
  EXPECT_EQ(run.prefill_tokens, prompt_len) << "the prompt is computed once";
  EXPECT_EQ(run.max_groups_running, 1);
  EXPECT_EQ(run.max_seqs_running, 8);
  ASSERT_EQ(run.tokens.size(), 8u);
  int shared = 0;
  for (uint64_t id : ids) {
    EXPECT_EQ(run.tokens.at(id), run.tokens.at(ids[0]));
    shared += run.cached.at(id) == prompt_len;
  }
  EXPECT_EQ(shared, 7) << "every member but the one that computed it reports the whole prompt";

  // The same prompt as one request with n = 8, on a fresh engine: the same greedy tokens.
  make_engine();
  GenerationRequest one = member("", 0);
  one.affinity.clear();
  one.n = 8;
  submit(one);
  const Run ref = drain();
  EXPECT_EQ(ref.prefill_tokens, prompt_len);
  EXPECT_EQ(ref.tokens.begin()->second, run.tokens.at(ids[0]));
}

// Sampled members draw with their own seeds from the shared logits: each reproduces the request
// run alone (ungrouped) with the same seed.
TEST_F(GroupMembersTest, SampledMembersKeepTheirOwnSeeds) {
  make_engine();
  std::vector<uint64_t> ids;
  for (uint64_t seed = 1; seed <= 4; ++seed)
    ids.push_back(submit(member("g", 4, 16, 1.0f, seed)));
  const Run grouped = drain();
  EXPECT_EQ(grouped.prefill_tokens, static_cast<int64_t>(tokenizer_.encode(kPrompt).size()));
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    make_engine();
    GenerationRequest r = member("", 0, 16, 1.0f, seed);
    r.affinity.clear();
    const uint64_t id = submit(r);
    const Run alone = drain();
    EXPECT_EQ(alone.tokens.at(id), grouped.tokens.at(ids[seed - 1])) << "seed " << seed;
  }
}

// A declared group waits for its members; missing members are waited for affinity_wait, then the
// group starts with those present. The engine reports how long it is held (a loop sleeps).
TEST_F(GroupMembersTest, DeclaredGroupWaitsForItsMembersThenForTheTimeout) {
  make_engine();
  submit(member("a", 4));
  submit(member("a", 4));
  Run run;
  step_once(run);
  EXPECT_EQ(run.prefill_tokens, 0) << "two of four: held";
  ASSERT_TRUE(engine_->held_for().has_value());
  EXPECT_EQ(*engine_->held_for(), 2s);
  submit(member("a", 4));
  submit(member("a", 4));
  step_once(run);
  EXPECT_GT(run.prefill_tokens, 0) << "four of four: admitted at once";
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 4);
  drain();

  // Three of five arrive: held until 2 s after the first, then they run without the others.
  submit(member("b", 5));
  clock_.advance(500ms);
  submit(member("b", 5));
  submit(member("b", 5));
  Run held;
  step_once(held);
  EXPECT_EQ(held.prefill_tokens, 0);
  EXPECT_EQ(*engine_->held_for(), 1500ms);
  clock_.advance(1499ms);
  step_once(held);
  EXPECT_EQ(held.prefill_tokens, 0);
  clock_.advance(1ms);
  EXPECT_FALSE(engine_->held_for().has_value());
  step_once(held);
  EXPECT_GT(held.prefill_tokens, 0);
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 3);
  EXPECT_EQ(engine_->scheduler().counts().num_groups_running, 1);
}

// With affinity_idle, a group's present members stop waiting once no member has arrived for
// that long (the rest went to another replica, e.g. routers that placed the group differently):
// each arrival restarts it, affinity_wait still bounds the whole, and a member that comes later
// joins the running group.
TEST_F(GroupMembersTest, PresentMembersStartAfterAPauseInArrivals) {
  make_engine(512, 512, 250ms);
  submit(member("c", 4));
  Run run;
  step_once(run);
  EXPECT_EQ(run.prefill_tokens, 0);
  EXPECT_EQ(*engine_->held_for(), 250ms);
  clock_.advance(200ms);
  submit(member("c", 4));  // restarts the pause
  step_once(run);
  EXPECT_EQ(run.prefill_tokens, 0);
  EXPECT_EQ(*engine_->held_for(), 250ms);
  clock_.advance(249ms);
  step_once(run);
  EXPECT_EQ(run.prefill_tokens, 0) << "249 ms since the last member";
  clock_.advance(1ms);
  EXPECT_FALSE(engine_->held_for().has_value());
  step_once(run);
  EXPECT_GT(run.prefill_tokens, 0) << "two of four start after the pause, not after 2 s";
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 2);
  submit(member("c", 4));  // late: joins the running group at once
  step_once(run);
  EXPECT_EQ(engine_->scheduler().counts().num_groups_running, 1);
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 3);
  drain();

  // Members arriving every 200 ms never pause 250 ms: affinity_wait (2 s) ends the wait.
  submit(member("d", 20));
  Run held;
  for (int i = 0; i < 9; ++i) {
    clock_.advance(200ms);
    submit(member("d", 20));
    step_once(held);
    EXPECT_EQ(held.prefill_tokens, 0) << "member " << i + 2;
  }
  EXPECT_EQ(*engine_->held_for(), 200ms) << "2 s after the first member, not 250 ms after the last";
  clock_.advance(200ms);
  step_once(held);
  EXPECT_GT(held.prefill_tokens, 0);
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 10);
}

// A waiting declared group does not hold back other requests.
TEST_F(GroupMembersTest, AWaitingGroupLetsOthersPass) {
  make_engine();
  submit(member("late", 3));
  GenerationRequest other = member("", 0);
  other.affinity.clear();
  const uint64_t other_id = submit(other);
  Run run;
  step_once(run);
  EXPECT_EQ(engine_->scheduler().counts().num_groups_running, 1);
  EXPECT_EQ(engine_->scheduler().counts().num_groups_waiting, 1);
  EXPECT_EQ(engine_->scheduler().running().front()->id, other_id);
}

// A member arriving after its group started decoding joins at once (not held by group_size) and
// reuses the prompt's full blocks from the prefix cache.
TEST_F(GroupMembersTest, LateMemberJoinsAtOnceAndReusesThePrompt) {
  make_engine();
  for (int i = 0; i < 2; ++i)
    submit(member("r", 3, 40));
  clock_.advance(3s);  // the third never came: the two start
  Run run;
  for (int i = 0; i < 3; ++i)
    step_once(run);
  ASSERT_EQ(engine_->scheduler().counts().num_seqs_running, 2);
  const uint64_t late = submit(member("r", 3, 40));
  step_once(run);
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 3);
  EXPECT_EQ(engine_->scheduler().counts().num_groups_running, 1);
  Run rest = drain();
  const int32_t prompt_len = static_cast<int32_t>(tokenizer_.encode(kPrompt).size());
  EXPECT_EQ(rest.cached.at(late), prompt_len / 16 * 16) << "every full prompt block reused";
}

// While admission is off (a weight update draining), a late member of a running set still
// joins it, so the set finishes on the weights it began with; an unrelated group waits.
TEST_F(GroupMembersTest, LateMembersJoinWhileAdmissionIsOff) {
  make_engine();
  for (int i = 0; i < 2; ++i)
    submit(member("r", 3, 40));
  clock_.advance(3s);
  Run run;
  for (int i = 0; i < 3; ++i)
    step_once(run);
  engine_->set_admitting(false);
  GenerationRequest other = member("", 0, 4);
  other.affinity.clear();
  submit(other);
  submit(member("r", 3, 40));
  step_once(run);
  EXPECT_EQ(engine_->scheduler().counts().num_seqs_running, 3);
  EXPECT_EQ(engine_->scheduler().counts().num_groups_waiting, 1);  // the unrelated one
  while (engine_->has_runnable_work())
    step_once(run);
  EXPECT_FALSE(engine_->scheduler().has_started_work());
  EXPECT_EQ(engine_->scheduler().counts().num_groups_waiting, 1);
  engine_->set_admitting(true);
  EXPECT_TRUE(engine_->has_runnable_work());
}

// A pool that holds the declared group only when nothing else runs: the members all wait, then
// all run; never a part of them.
TEST_F(GroupMembersTest, SmallPoolRunsTheWholeGroupOrNone) {
  // Each member: 9 prompt blocks shared + up to 8 own blocks (prompt 139 + 120 tokens).
  make_engine(/*blocks=*/48);
  GenerationRequest big = member("", 0, 400);
  big.affinity.clear();
  big.prompt = tokenizer_.encode(std::string(300, 'x'));
  submit(big);
  Run run;
  step_once(run);
  for (int i = 0; i < 4; ++i)
    submit(member("whole", 4, 120));
  int32_t saw_members = 0;
  for (int i = 0; i < 10000 && engine_->has_work(); ++i) {
    step_once(run);
    int32_t members = 0;
    for (const auto& g : engine_->scheduler().running())
      members += g->affinity == "whole";
    EXPECT_TRUE(members == 0 || members == 4) << members << " of 4 members running";
    saw_members = std::max(saw_members, members);
  }
  EXPECT_EQ(saw_members, 4);
  EXPECT_EQ(engine_->pool().counts().num_blocks_used, 0);
}

// A declared group that could never be admitted whole is refused at submission.
TEST_F(GroupMembersTest, GroupTooLargeForThePoolIsRefused) {
  make_engine(/*blocks=*/48);
  auto r = engine_->submit(member("huge", 16, 120));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("group_size 16"), std::string::npos) << r.error().message;
}

// The member computing the prompt goes away mid-prefill: the next member finishes the prompt
// from where it got, and the others' outputs are unchanged.
TEST_F(GroupMembersTest, LeaderAbortedMidPrefillHandsThePromptOn) {
  make_engine(512, /*tokens_per_step=*/32);  // the prompt takes several steps
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i)
    ids.push_back(submit(member("h", 3)));
  Run run;
  step_once(run);
  ASSERT_GT(run.prefill_tokens, 0);
  const int32_t prompt_len = static_cast<int32_t>(tokenizer_.encode(kPrompt).size());
  ASSERT_LT(run.prefill_tokens, prompt_len);
  engine_->abort(ids[0]);
  Run rest = drain();
  EXPECT_EQ(run.prefill_tokens + rest.prefill_tokens, prompt_len) << "nothing computed twice";
  ASSERT_EQ(rest.tokens.size(), 2u);
  EXPECT_EQ(rest.tokens.at(ids[1]), rest.tokens.at(ids[2]));

  make_engine();
  GenerationRequest one = member("", 0);
  one.affinity.clear();
  const uint64_t ref = submit(one);
  EXPECT_EQ(drain().tokens.at(ref), rest.tokens.at(ids[1]));
}

}  // namespace
}  // namespace kvc
