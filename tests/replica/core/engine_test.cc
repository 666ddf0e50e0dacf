// Engine tests on the tiny model (random weights) with the CPU backend.
#include "replica/core/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "api/openai_request.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/model/weights.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

// The events that name blocks (stored, removed, cleared, queued): take_kv_events less the work
// announcements (KvWork), which EngineTest.SubmittedGroupsAnnounceTheirWork checks.
std::vector<KvEvent> block_events(std::vector<KvEvent> events) {
  std::erase_if(events, [](const KvEvent& e) { return std::holds_alternative<KvWork>(e); });
  return events;
}

struct RunOutput {
  std::map<std::pair<uint64_t, int32_t>, std::string> texts;
  std::map<std::pair<uint64_t, int32_t>, std::vector<int32_t>> tokens;
  // Gap between the best and second-best logit at each (group, sibling, position).
  std::map<std::tuple<uint64_t, int32_t, int32_t>, float> gaps;
  std::vector<StepStats> steps;
};

class EngineTest : public ::testing::Test {
 protected:
  static ModelWeights& weights() {
    static ModelWeights w = random_weights(*preset_config("tiny"), 42);
    return w;
  }

  RunOutput run(const std::vector<GenerationRequest>& requests, bool cascade, int32_t blocks = 512,
                int32_t block_size = 16) {
    CpuBackend backend(weights(), blocks, block_size);
    EngineConfig config;
    config.cascade.enabled = cascade;
    config.cascade.min_shared_tokens = 16;
    config.cascade.pass_overhead_bytes = 0;
    Engine engine(backend, tokenizer_, config, clock_);
    RunOutput out;
    engine.set_logits_observer([&](uint64_t g, int32_t s, int32_t pos, std::span<const float> l) {
      std::vector<float> sorted(l.begin(), l.end());
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      out.gaps[{g, s, pos}] = sorted[0] - sorted[1];
    });
    for (const auto& r : requests)
      EXPECT_TRUE(engine.submit(r).ok());
    while (engine.has_work()) {
      StepResult step = engine.step();
      for (const auto& o : step.outputs)
        out.texts[{o.group_id, o.sibling}] += o.text_delta;
      for (const auto& g : step.finished) {
        for (const Sequence& s : g->seqs) {
          out.tokens[{g->id, s.sibling}].assign(s.tokens.begin() + g->prompt.size(),
                                                s.tokens.end());
        }
      }
      out.steps.push_back(step.stats);
    }
    EXPECT_EQ(engine.pool().counts().num_blocks_used, 0);
    return out;
  }

  GenerationRequest request(const std::string& prompt, int32_t n, float temperature,
                            int32_t max_tokens, uint64_t seed = 7) {
    GenerationRequest r;
    r.prompt = tokenizer_.encode(prompt);
    r.n = n;
    r.params.temperature = temperature;
    r.params.max_tokens = max_tokens;
    r.params.seed = seed;
    r.params.ignore_eos = true;
    return r;
  }

  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
};

const std::string kSystem =
    "You are a helpful assistant. Answer briefly and cite the document when you can. ";

TEST_F(EngineTest, GreedyCascadeEqualsFlat) {
  std::vector<GenerationRequest> reqs;
  reqs.push_back(request(kSystem + "Document A: the cat sat on the mat. Q: where?", 4, 0, 24));
  reqs.push_back(request(kSystem + "Document B: rain in Spain. Q: what falls?", 3, 0, 24));
  reqs.push_back(request("Short prompt with no shared prefix", 1, 0, 24));
  const RunOutput flat = run(reqs, false);
  const RunOutput cascade = run(reqs, true);
  // The cascade run really used cascade levels.
  int kept = 0;
  for (const auto& s : cascade.steps)
    kept += s.cascade.num_levels_kept();
  EXPECT_GT(kept, 0);
  ASSERT_EQ(flat.tokens.size(), cascade.tokens.size());
  for (const auto& [key, ft] : flat.tokens) {
    const auto& ct = cascade.tokens.at(key);
    ASSERT_EQ(ft.size(), ct.size());
    const auto diff = std::mismatch(ft.begin(), ft.end(), ct.begin());
    if (diff.first == ft.end()) continue;
    // A flip is only acceptable at a near-tie of the two routes' logits.
    const int32_t pos =
        static_cast<int32_t>(reqs[key.first - 1].prompt.size() + (diff.first - ft.begin()));
    const float gap = flat.gaps.at({key.first, key.second, pos});
    EXPECT_LT(gap, 1e-4f) << "group " << key.first << " sample " << key.second
                          << " diverged at position " << pos << " with a logit gap of " << gap;
  }
}

TEST_F(EngineTest, SameSeedSameOutputDifferentSeedDifferent) {
  const std::string p = kSystem + "Tell a story.";
  const RunOutput a = run({request(p, 3, 1.0f, 20, 11)}, true);
  const RunOutput b = run({request(p, 3, 1.0f, 20, 11)}, true);
  const RunOutput c = run({request(p, 3, 1.0f, 20, 12)}, true);
  EXPECT_EQ(a.texts, b.texts);
  EXPECT_NE(a.texts, c.texts);
  // Siblings of one group draw different samples.
  EXPECT_NE(a.texts.at({1, 0}), a.texts.at({1, 1}));
}

TEST_F(EngineTest, SecondRequestWithSamePromptComputesOnlyTheSuffix) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  const GenerationRequest r = request(kSystem + "Q1", 1, 0, 4);  // 82 tokens: 5 full blocks
  ASSERT_EQ(r.prompt.size(), 82u);
  ASSERT_TRUE(engine.submit(r).ok());
  while (engine.has_work())
    engine.step();
  ASSERT_TRUE(engine.submit(r).ok());
  const StepResult first = engine.step();
  EXPECT_EQ(first.stats.prefix_cache_query_tokens, 82);
  EXPECT_EQ(first.stats.prefix_cache_hit_tokens, 80);
  EXPECT_EQ(first.stats.num_prefill_tokens, 2);  // only the suffix is computed
}

// A full pool evicts what is seldom asked for again before what is: one-shot questions after a
// shared system prompt (their tails never reused) stop pushing out a conversation once their
// branch has shown it (block_pool.h, "Insertion by reuse"); under LRU alone the conversation's
// blocks, released first, would be evicted first.
TEST_F(EngineTest, OneShotTailsDoNotPushOutAConversationOnceTheirBranchShowsIt) {
  CpuBackend backend(weights(), 24, 16);  // 24 blocks of 16 tokens
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  auto run = [&](const std::string& prompt) {
    EXPECT_TRUE(engine.submit(request(prompt, 1, 0, 1)).ok());
    int32_t hit = 0;
    while (engine.has_work())
      hit += engine.step().stats.prefix_cache_hit_tokens;
    return hit;
  };
  const std::string conversation(48, 'c');  // 3 full blocks
  EXPECT_EQ(run(conversation), 0);
  const std::string system(64, 's');  // 4 full blocks, then each question's 2 of its own
  for (int i = 0; i < 30; ++i) {
    const int32_t hit = run(system + std::to_string(1000 + i) + std::string(36, 'q'));
    EXPECT_EQ(hit, i == 0 ? 0 : 64) << "question " << i;
  }
  EXPECT_EQ(run(conversation + " and then?"), 48);
  EXPECT_GT(engine.pool().counts().num_blocks_cached, 0);
}

// Each submitted prompt is announced at once (KvQueued: the blocks it will compute, past those
// held), once per distinct chain between two takes; a prompt held whole announces nothing.
TEST_F(EngineTest, SubmittedPromptsAreQueuedEventsPastTheHeldBlocks) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  const BlockHash seed = engine.chain_seed("");
  const GenerationRequest r = request(kSystem + "Q1", 1, 0, 1);  // 82 tokens: 5 full blocks
  const std::vector<BlockHash> five = hash_blocks(seed, kSystem + "Q1", 16);
  ASSERT_EQ(five.size(), 5u);
  ASSERT_TRUE(engine.submit_all({r, r, r}).ok());  // three requests, one prompt
  EXPECT_EQ(block_events(engine.take_kv_events()),
            (std::vector<KvEvent>{KvQueued{std::nullopt, five}}));
  while (engine.has_work())
    engine.step();
  (void)engine.take_kv_events();  // the stored blocks

  const std::string longer = kSystem + "Question two, a longer one";  // 106 tokens: 6 blocks
  const std::vector<BlockHash> six = hash_blocks(seed, longer, 16);
  ASSERT_TRUE(engine.submit(request(longer, 1, 0, 1)).ok());
  ASSERT_TRUE(engine.submit(r).ok());  // all 5 blocks held: nothing to announce
  EXPECT_EQ(block_events(engine.take_kv_events()),
            (std::vector<KvEvent>{KvQueued{six[4], {six[5]}}}));

  // Copies of prompts interleaved: each distinct one once, in the order first submitted; the
  // next take window announces a prompt still waiting again.
  const std::string third = kSystem + "Question three, longer than the second one";
  const std::vector<BlockHash> seven = hash_blocks(seed, third, 16);
  ASSERT_EQ(seven.size(), 7u);
  const GenerationRequest a = request(third, 1, 0, 1), b = request(longer + "?", 1, 0, 1);
  ASSERT_TRUE(engine.submit_all({a, b, a, b, a}).ok());
  const std::vector<KvEvent> both = block_events(engine.take_kv_events());
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0], KvEvent(KvQueued{seven[4], {seven[5], seven[6]}}));
  ASSERT_TRUE(engine.submit(a).ok());
  EXPECT_EQ(block_events(engine.take_kv_events()),
            (std::vector<KvEvent>{KvQueued{seven[4], {seven[5], seven[6]}}}));
}

// Every submitted group announces the work it brings (KvWork), in order and numbered from 1,
// with its samples and the router's route id: its prefill past the cached prefix plus its
// samples' max_tokens, as the load counts it (SchedulerCounts::num_work_tokens_queued).
TEST_F(EngineTest, SubmittedGroupsAnnounceTheirWork) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  auto work = [](const std::vector<KvEvent>& events) {
    std::vector<KvWork> w;
    for (const KvEvent& e : events)
      if (const auto* k = std::get_if<KvWork>(&e)) w.push_back(*k);
    return w;
  };
  EXPECT_EQ(engine.work_seq(), 0u);
  GenerationRequest r = request(kSystem + "Q1", 3, 0, 5);  // 82 tokens, n = 3, max_tokens 5
  r.route = "0123456789abcdef-7";
  const int64_t prompt = static_cast<int64_t>(r.prompt.size());
  ASSERT_TRUE(engine.submit_all({r, r}).ok());  // two groups, one prompt
  EXPECT_EQ(work(engine.take_kv_events()),
            (std::vector<KvWork>{KvWork{1, prompt + 15, 3, "0123456789abcdef-7"},
                                 KvWork{2, prompt + 15, 3, "0123456789abcdef-7"}}));
  EXPECT_EQ(engine.work_seq(), 2u);
  EXPECT_EQ(engine.scheduler().counts().num_work_tokens_queued, 2 * (prompt + 15));
  while (engine.has_work())
    engine.step();
  (void)engine.take_kv_events();
  // Cached now: only the last, partial block's tokens are computed again; no route given.
  GenerationRequest again = request(kSystem + "Q1", 1, 0, 2);
  ASSERT_TRUE(engine.submit(again).ok());
  const std::vector<KvWork> third = work(engine.take_kv_events());
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].seq, 3u);
  EXPECT_EQ(third[0].route, "");
  EXPECT_EQ(third[0].sequences, 1);
  EXPECT_EQ(third[0].tokens, engine.scheduler().counts().num_work_tokens_queued);
  EXPECT_LT(third[0].tokens, prompt);
}

// A subscriber that asks for queued events gets, after the held blocks of its snapshot, the
// prompts still waiting (a router that resubscribes would otherwise learn only of later ones);
// a prompt computed since is held, no longer queued.
TEST_F(EngineTest, SnapshotsForQueuedSubscribersHoldThePromptsStillWaiting) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  const BlockHash seed = engine.chain_seed("");
  const GenerationRequest r = request(kSystem + "Q1", 1, 0, 1);  // 82 tokens: 5 full blocks
  const std::vector<BlockHash> five = hash_blocks(seed, kSystem + "Q1", 16);
  ASSERT_TRUE(engine.submit_all({r, r}).ok());  // two requests, one prompt
  (void)engine.take_kv_events();                // announced to the subscribers of then
  auto queued = [](const std::vector<KvEvent>& events) {
    std::vector<KvQueued> q;
    for (const KvEvent& e : events)
      if (const auto* k = std::get_if<KvQueued>(&e)) q.push_back(*k);
    return q;
  };
  EXPECT_EQ(queued(engine.kv_snapshot(/*queued=*/true)),
            (std::vector<KvQueued>{KvQueued{std::nullopt, five}}));
  EXPECT_TRUE(queued(engine.kv_snapshot()).empty());
  while (engine.has_work())
    engine.step();
  const std::vector<KvEvent> after = engine.kv_snapshot(/*queued=*/true);
  EXPECT_TRUE(queued(after).empty());
  EXPECT_EQ(after, engine.kv_snapshot());
  EXPECT_FALSE(after.empty());  // the five blocks, held now

  // A prompt prefilled in chunks: after its first chunk (two blocks) it runs, and the snapshot
  // announces the three blocks still to compute, after the two held.
  EngineConfig chunked;
  chunked.scheduler.max_num_seqs = 8;  // the step's token budget is at least this
  chunked.scheduler.max_tokens_per_step = 32;
  Engine engine2(backend, tokenizer_, chunked, clock_);
  const std::string other = kSystem + "Q2";
  const std::vector<BlockHash> chain = hash_blocks(engine2.chain_seed(""), other, 16);
  ASSERT_EQ(chain.size(), 5u);
  ASSERT_TRUE(engine2.submit(request(other, 1, 0, 1)).ok());
  const StepResult first = engine2.step();
  ASSERT_EQ(engine2.scheduler().running().size(), 1u)
      << first.stats.num_prefill_tokens << " prefill tokens, "
      << engine2.scheduler().waiting().size() << " waiting";
  EXPECT_EQ(queued(engine2.kv_snapshot(/*queued=*/true)),
            (std::vector<KvQueued>{KvQueued{chain[1], {chain[2], chain[3], chain[4]}}}));
}

// Announcements are best effort and bounded between two takes (Engine::kMaxQueuedBlocks), so an
// engine whose events nobody takes does not grow them without end; the next take starts afresh.
TEST_F(EngineTest, QueuedEventsAreBoundedBetweenTakes) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  const size_t prompts = Engine::kMaxQueuedBlocks / 5 + 10;  // 5 full blocks each
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < prompts; ++i) {
    std::string p = std::to_string(i) + ":" + kSystem;
    reqs.push_back(request(p.substr(0, 82), 1, 0, 1));
  }
  ASSERT_TRUE(engine.submit_all(reqs).ok());
  size_t blocks = 0, events = 0;
  for (const KvEvent& e : block_events(engine.take_kv_events())) {
    blocks += std::get<KvQueued>(e).hashes.size();
    ++events;
  }
  EXPECT_EQ(blocks, Engine::kMaxQueuedBlocks);
  EXPECT_LT(events, prompts);
  ASSERT_TRUE(
      engine.submit(request("Another prompt, after the take: it is announced.", 1, 0, 1)).ok());
  EXPECT_EQ(block_events(engine.take_kv_events()).size(), 1u);
}

// The work a replica has taken on (SchedulerCounts::num_work_tokens_queued, what routers read
// alike): a waiting group counts its prompt less the prefix cached when it arrived, plus
// max_tokens per sample; it shrinks as the engine computes, and is 0 when all is done. The
// queued prefill (num_prefill_tokens_queued, the queued_prefill_tokens the kvcascade policy
// weighs as a replica's queue) counts a waiting prompt whole (Scheduler::counts says why).
TEST_F(EngineTest, QueuedWorkIsTheUncachedPromptPlusTheTokensLeftToGenerate) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  const GenerationRequest r = request(kSystem + "Q1", 2, 0, 4);  // 82 tokens: 5 full blocks
  ASSERT_TRUE(engine.submit(r).ok());
  EXPECT_EQ(engine.scheduler().counts().num_work_tokens_queued, 82 + 2 * 4);
  int64_t computed = 0;
  while (engine.has_work()) {
    const StepResult step = engine.step();
    computed += step.stats.num_prefill_tokens + step.stats.num_decode_seqs;
    const int64_t left = engine.scheduler().counts().num_work_tokens_queued;
    EXPECT_LE(left, 82 + 2 * 4 - step.stats.num_prefill_tokens);
  }
  EXPECT_EQ(engine.scheduler().counts().num_work_tokens_queued, 0);
  EXPECT_GE(computed, 82);
  // The same prompt again: 80 of its tokens are cached now.
  ASSERT_TRUE(engine.submit(r).ok());
  EXPECT_EQ(engine.scheduler().counts().num_work_tokens_queued, 2 + 2 * 4);
  EXPECT_EQ(engine.scheduler().counts().num_prefill_tokens_queued, 82);
  // A second member of one affinity set with the same prompt computes nothing of it.
  GenerationRequest a = request(std::string(100, 'q'), 1, 0, 3), b = a;
  a.affinity = b.affinity = "grpo-1";
  ASSERT_TRUE(engine.submit(a).ok());
  ASSERT_TRUE(engine.submit(b).ok());
  EXPECT_EQ(engine.scheduler().counts().num_work_tokens_queued, (2 + 2 * 4) + (100 + 3) + 3);
  EXPECT_EQ(engine.scheduler().counts().num_prefill_tokens_queued, 82 + 100 + 100);
}

// A chat request without max_tokens (open: only the context bounds it) is planned
// Scheduler::planned_open_completion tokens per sample in the queued work routers read, not its
// bound, however many it generated. The plan follows the lengths of the open samples that end
// (about the last 64: each moves it 1/64 of the way); other requests' lengths, aborted samples
// and open samples whose length is certain (nothing but the bound ends them) leave it.
TEST_F(EngineTest, AnOpenRequestIsPlannedTheMeanOpenCompletionNotItsBound) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  // Greedy samples that reach their bound (a stop string that never matches keeps the end
  // uncertain, as EOS would).
  auto open = [&](int32_t bound, std::string stop = "\x01never") {
    GenerationRequest r = request(kSystem + "Q1", 2, 0, bound);  // 82 tokens: 5 full blocks
    r.max_tokens_is_default = true;
    r.open_completion = true;
    if (!stop.empty()) r.params.stop = {stop};
    return r;
  };
  auto run_all = [&] {
    while (engine.has_work())
      engine.step();
  };
  auto queued = [&] { return engine.scheduler().counts().num_work_tokens_queued; };
  const int32_t prior = kPlannedOpenCompletionTokens;
  ASSERT_EQ(engine.scheduler().planned_open_completion(), prior);
  const auto first = engine.submit(open(100000));  // lowered to what the pool leaves: > 256
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(queued(), 82 + 2 * prior);
  EXPECT_EQ(engine.scheduler().counts().planned_open_completion_tokens, prior);
  EXPECT_EQ(engine.scheduler().counts().num_open_samples_ended, 0);
  engine.step();  // the prompt and each sample's first token
  engine.step();
  EXPECT_EQ(queued(), 2 * prior);  // running: the plan again, not less what they generated
  engine.abort(*first);            // aborted after 2 tokens: not a length
  run_all();
  ASSERT_TRUE(engine.submit(request(kSystem + "Q2", 2, 0, 4)).ok());  // not open
  ASSERT_TRUE(engine.submit(open(10, "")).ok());  // open, but only its bound ends it: certain
  run_all();
  EXPECT_EQ(engine.scheduler().planned_open_completion(), prior);
  EXPECT_EQ(engine.scheduler().counts().num_open_samples_ended, 0);
  // Two open samples that end after 10 tokens (their bound): 256 -> 252.2 -> 248.4.
  ASSERT_TRUE(engine.submit(open(10)).ok());
  EXPECT_EQ(queued(), 2 + 2 * 10);  // within the bound
  run_all();
  EXPECT_EQ(engine.scheduler().planned_open_completion(), 248);
  EXPECT_EQ(engine.scheduler().counts().num_open_samples_ended, 2);
  ASSERT_TRUE(engine.submit(open(100000)).ok());
  EXPECT_EQ(queued(), 2 + 2 * 248);
}

// An open sample that a stop token (or EOS) ends generated that token too: usage counts it, and
// the plan learns the same length, although the sequence does not keep the token. 64 greedy
// samples that end alike move the plan about 0.63 of a token per token of their length.
TEST_F(EngineTest, AnOpenSampleEndedByAStopTokenTeachesItsLengthWithThatToken) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  GenerationRequest r = request(kSystem + "Q1", 1, 0, 8);  // greedy, ignore_eos
  std::vector<int32_t> free_run;
  ASSERT_TRUE(engine.submit(r).ok());
  while (engine.has_work()) {
    for (const SequenceOutput& o : engine.step().outputs)
      free_run.push_back(o.token.id);
  }
  ASSERT_EQ(free_run.size(), 8u);
  const int32_t kSamples = 64;
  r.n = kSamples;
  r.params.max_tokens = 1000;
  r.params.stop_token_ids = {free_run[4]};
  r.max_tokens_is_default = true;
  r.open_completion = true;
  ASSERT_TRUE(engine.submit(r).ok());
  std::map<int32_t, int32_t> usage;  // sibling -> tokens reported
  while (engine.has_work()) {
    for (const SequenceOutput& o : engine.step().outputs) {
      usage[o.sibling] += o.num_new_tokens;
      if (o.finish != FinishReason::kNone) {
        EXPECT_EQ(o.finish, FinishReason::kStop);
      }
    }
  }
  const auto stop_at = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  double plan = kPlannedOpenCompletionTokens;
  ASSERT_EQ(usage.size(), static_cast<size_t>(kSamples));
  for (const auto& [sibling, tokens] : usage) {
    EXPECT_EQ(tokens, stop_at + 1) << "sibling " << sibling;  // the stop token included
    plan += (tokens - plan) / 64;
  }
  EXPECT_EQ(engine.scheduler().counts().num_open_samples_ended, kSamples);
  EXPECT_EQ(engine.scheduler().planned_open_completion(), std::lround(plan));
}

// Admission projects an open sample's growth over a few planned lengths
// (Scheduler::kOpenGrowthPlans), not over its bound: two open chats whose bounds (what the pool
// leaves, ~2,000 tokens a sample) would each be projected to hold most of the pool run together.
TEST_F(EngineTest, OpenRequestsAreAdmittedOnTheirPlanNotTheirBound) {
  CpuBackend backend(weights(), 256, 16);  // 4,096 tokens of KV
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  for (const char* q : {"Q1", "Q2"}) {
    GenerationRequest r = request(kSystem + q, 2, 0, 100000);
    r.max_tokens_is_default = true;
    r.open_completion = true;
    r.params.stop = {"\x01never"};
    ASSERT_TRUE(engine.submit(r).ok());
  }
  engine.step();
  EXPECT_EQ(engine.scheduler().waiting().size(), 0u);
  EXPECT_EQ(engine.scheduler().running().size(), 2u);
}

TEST_F(EngineTest, SiblingsSharePromptBlocksAndFormOneCascadeLevel) {
  CpuBackend backend(weights(), 256, 16);
  EngineConfig config;
  config.cascade.min_shared_tokens = 16;
  Engine engine(backend, tokenizer_, config, clock_);
  GenerationRequest r = request(std::string(512, 'x'), 8, 1.0f, 6);
  ASSERT_TRUE(engine.submit(r).ok());
  engine.step();  // prefill + first tokens
  const StepResult decode = engine.step();
  ASSERT_EQ(decode.stats.num_decode_seqs, 8);
  ASSERT_EQ(decode.stats.cascade.num_levels_kept(), 1);
  const LevelDecision& level = decode.stats.cascade.decisions[0];
  EXPECT_EQ(level.members, 8);
  EXPECT_EQ(level.shared_tokens, 512);
  // 32 shared prompt blocks + one private block per sibling.
  EXPECT_EQ(engine.pool().counts().num_blocks_used, 32 + 8);
}

// vLLM's text options: a matched stop string kept at the end of the text
// (include_stop_str_in_output), special tokens' text put in it (skip_special_tokens false).
TEST_F(EngineTest, TextOptionsKeepTheStopStringAndSpecialTokensText) {
  // Every token here is "special": no text by default, "[id]" as its text otherwise.
  struct AllSpecial : Tokenizer {
    ByteTokenizer bytes;
    std::vector<int32_t> encode(std::string_view text) const override { return bytes.encode(text); }
    std::string decode(int32_t) const override { return ""; }
    std::string token_bytes(int32_t t) const override { return "[" + std::to_string(t) + "]"; }
    int32_t eos_token() const override { return bytes.eos_token(); }
    int32_t vocab_size() const override { return bytes.vocab_size(); }
    std::string name() const override { return "all-special"; }
  };
  const GenerationRequest base = request("Stop strings and special tokens", 1, 0, 12);
  auto text_of = [&](const Tokenizer& tokenizer, const GenerationRequest& r) {
    CpuBackend backend(weights(), 64, 16);
    Engine engine(backend, tokenizer, EngineConfig{}, clock_);
    EXPECT_TRUE(engine.submit(r).ok());
    std::string text;
    while (engine.has_work())
      for (const auto& o : engine.step().outputs)
        text += o.text_delta;
    return text;
  };
  const std::string full = text_of(tokenizer_, base);
  ASSERT_GE(full.size(), 8u);
  const std::string stop = full.substr(4, 3);
  const size_t at = full.find(stop);
  GenerationRequest stopped = base;
  stopped.params.stop = {stop};
  EXPECT_EQ(text_of(tokenizer_, stopped), full.substr(0, at));
  stopped.params.include_stop_str = true;
  EXPECT_EQ(text_of(tokenizer_, stopped), full.substr(0, at + stop.size()));
  // A stop token id: its text is kept with the option, as a stop string's is.
  GenerationRequest by_id = base;
  by_id.params.stop_token_ids = {static_cast<unsigned char>(full[at])};
  const size_t first = full.find(full[at]);
  EXPECT_EQ(text_of(tokenizer_, by_id), full.substr(0, first));
  by_id.params.include_stop_str = true;
  EXPECT_EQ(text_of(tokenizer_, by_id), full.substr(0, first + 1));

  const AllSpecial special;
  EXPECT_EQ(text_of(special, base), "");
  GenerationRequest shown = base;
  shown.params.skip_special_tokens = false;
  std::string want;
  for (unsigned char c : full)  // the byte tokenizer's ids are the bytes: the same tokens
    want += "[" + std::to_string(c) + "]";
  EXPECT_EQ(text_of(special, shown), want);
}

TEST_F(EngineTest, RejectsAGroupThatCouldNeverFit) {
  CpuBackend backend(weights(), 16, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  const auto id = engine.submit(request(std::string(100, 'y'), 8, 1.0f, 64));
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("KV blocks"), std::string::npos) << id.error().message;
  EXPECT_NE(id.error().message.find("lower n or max_tokens"), std::string::npos)
      << id.error().message;
  // A prompt that alone outgrows the pool says so: fewer samples or tokens would not help.
  const auto long_prompt = engine.submit(request(std::string(300, 'y'), 1, 1.0f, 1));
  ASSERT_FALSE(long_prompt.ok());
  EXPECT_EQ(long_prompt.error().message.find("prompt (300 tokens) needs 19 KV blocks"), 0u)
      << long_prompt.error().message;
}

// What fits exactly is admitted and runs: the prompt's partial block is one sibling's own block
// (the others copy it when they write), not a block besides theirs. Found by the audit: 14
// tokens were refused on a one-block pool as needing two.
TEST_F(EngineTest, AdmitsWhatFitsTheBlocksExactly) {
  CpuBackend one_block(weights(), 1, 16);
  Engine engine(one_block, tokenizer_, EngineConfig{}, clock_);
  ASSERT_TRUE(engine.submit(request("Hello there", 1, 0, 3)).ok());  // 11 + 3 tokens
  for (int i = 0; i < 50 && engine.has_work(); ++i)
    ASSERT_TRUE(engine.step().error.empty());
  ASSERT_FALSE(engine.has_work()) << "admitted to the queue but never run";
  EXPECT_FALSE(engine.submit(request("Hello there", 1, 0, 6)).ok());  // 17 tokens: 2 blocks

  // 3 siblings of a 20-token prompt to 48 tokens: 1 shared full block + 3 x 2 of their own.
  CpuBackend seven(weights(), 7, 16);
  Engine e7(seven, tokenizer_, EngineConfig{}, clock_);
  const std::string twenty = "twenty tokens long..";
  ASSERT_EQ(twenty.size(), 20u);
  ASSERT_TRUE(e7.submit(request(twenty, 3, 1.0f, 28)).ok());
  for (int i = 0; i < 200 && e7.has_work(); ++i)
    ASSERT_TRUE(e7.step().error.empty());
  ASSERT_FALSE(e7.has_work()) << "admitted to the queue but never run";
  EXPECT_FALSE(e7.submit(request(twenty, 3, 1.0f, 29)).ok());  // 49 tokens: 3 of their own each
}

// A request's stop token ids end a sequence where the token is drawn, as EOS does (the token
// reported, no text), whatever ignore_eos says.
TEST_F(EngineTest, StopTokenIdsEndASequenceAsEosDoes) {
  CpuBackend backend(weights(), 64, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  auto run = [&](const GenerationRequest& r) {
    EXPECT_TRUE(engine.submit(r).ok());
    std::vector<int32_t> ids;
    FinishReason finish = FinishReason::kNone;
    while (engine.has_work()) {
      StepResult step = engine.step();
      for (const SequenceOutput& o : step.outputs) {
        ids.push_back(o.token.id);
        finish = o.finish;
      }
    }
    return std::make_pair(ids, finish);
  };
  GenerationRequest r = request(kSystem + "Q1", 1, 0, 12);  // greedy, ignore_eos
  const auto [free_run, length] = run(r);
  ASSERT_EQ(free_run.size(), 12u);
  EXPECT_EQ(length, FinishReason::kLength);
  r.params.stop_token_ids = {free_run[4]};
  const auto [stopped, stop] = run(r);
  const auto first = std::find(free_run.begin(), free_run.end(), free_run[4]) - free_run.begin();
  EXPECT_EQ(stopped, std::vector<int32_t>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(stop, FinishReason::kStop);
}

// A batch of prompts is queued whole or not at all: a request whose second prompt can never run
// must not have started its first (a stream answered 200, then an error event).
TEST_F(EngineTest, SubmitAllQueuesEveryRequestOrNone) {
  CpuBackend backend(weights(), 16, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  auto refused =
      engine.submit_all({request("fits", 1, 1.0f, 4), request(std::string(100, 'y'), 8, 1.0f, 64)});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().message.find("prompt[1]: "), 0u) << refused.error().message;
  EXPECT_FALSE(engine.has_work());
  auto queued = engine.submit_all({request("one", 1, 1.0f, 4), request("two", 2, 1.0f, 4)});
  ASSERT_TRUE(queued.ok()) << queued.error().message;
  ASSERT_EQ(queued->size(), 2u);
  EXPECT_LT((*queued)[0], (*queued)[1]);
  EXPECT_EQ(engine.scheduler().counts().num_groups_waiting, 2);
}

TEST_F(EngineTest, StopStringsAndLengthEndSequences) {
  CpuBackend backend(weights(), 256, 16);
  Engine engine(backend, tokenizer_, EngineConfig{}, clock_);
  GenerationRequest r = request(kSystem, 1, 0, 40);
  const RunOutput free_run = run({r}, true);
  const std::string text = free_run.texts.at({1, 0});
  ASSERT_GE(text.size(), 10u);
  r.params.stop = {text.substr(5, 3)};
  ASSERT_TRUE(engine.submit(r).ok());
  std::string got;
  FinishReason reason = FinishReason::kNone;
  while (engine.has_work()) {
    for (const auto& o : engine.step().outputs) {
      got += o.text_delta;
      if (o.finish != FinishReason::kNone) reason = o.finish;
    }
  }
  EXPECT_EQ(reason, FinishReason::kStop);
  EXPECT_EQ(got, text.substr(0, text.find(r.params.stop[0])));
  EXPECT_EQ(free_run.tokens.at({1, 0}).size(), 40u);  // length-limited run made exactly 40
}

}  // namespace
}  // namespace kvc
