// A backend whose forward fails: Engine::fail_batch ends exactly the groups that had work in the
// failed batch (their KV is undefined now), frees their blocks, says why, and the engine goes on
// serving the groups that were waiting and those that come later. With a host tier, a failure
// that moved blocks to or from it also forgets the cache (Engine::fail_loads); one whose moves
// were only copies does not.
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "replica/core/engine.h"
#include "replica/model/model_config.h"
#include "tests/testing/fake_backend.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/requests.h"

namespace kvc {
namespace {

using testing::bytes_request;

TEST(EngineFailure, FailedBatchEndsItsGroupsAndTheRestRunOn) {
  ModelConfig model = *preset_config("tiny");
  model.vocab_size = 260;
  testing::FakeBackend backend(model, 64, 16);
  ByteTokenizer tokenizer;
  testing::FakeClock clock;
  EngineConfig config;
  config.scheduler.max_num_seqs = 2;  // one n=2 group runs, the other waits
  Engine engine(backend, tokenizer, config, clock);

  auto a = engine.submit(bytes_request(std::string(40, 'a'), 2, 20));
  auto b = engine.submit(bytes_request(std::string(40, 'b'), 2, 5));
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) {  // a's prompt, then decode steps
    StepResult r = engine.step();
    ASSERT_TRUE(r.error.empty()) << r.error;
  }

  backend.fail_next_forward();
  StepResult failed = engine.step();
  EXPECT_NE(failed.error.find("injected device failure"), std::string::npos) << failed.error;
  ASSERT_EQ(failed.finished.size(), 1u);  // a had work in the batch; b was waiting
  EXPECT_EQ(failed.finished[0]->id, *a);
  for (const Sequence& s : failed.finished[0]->seqs)
    EXPECT_EQ(s.finish, FinishReason::kAbort);

  // b runs to its end, and a group submitted after the failure is served.
  auto c = engine.submit(bytes_request(std::string(40, 'c'), 1, 4));
  ASSERT_TRUE(c.ok());
  std::set<uint64_t> done;
  for (int i = 0; i < 100 && engine.has_work(); ++i) {
    StepResult r = engine.step();
    EXPECT_TRUE(r.error.empty()) << r.error;
    for (const auto& g : r.finished) {
      done.insert(g->id);
      for (const Sequence& s : g->seqs)
        EXPECT_EQ(s.finish, FinishReason::kLength) << "group " << g->id;
    }
  }
  EXPECT_EQ(done, (std::set<uint64_t>{*b, *c}));
  // Nothing leaked: every block is free or an evictable cached one.
  EXPECT_EQ(engine.pool().counts().num_blocks_used, 0);
  EXPECT_EQ(engine.pool().num_allocatable(), engine.pool().num_blocks());
}

// Runs the engine until it has no work; returns the prompt tokens its steps found cached.
int64_t run_to_end(Engine& engine) {
  int64_t hits = 0;
  for (int i = 0; i < 200 && engine.has_work(); ++i) {
    StepResult r = engine.step();
    EXPECT_TRUE(r.error.empty()) << r.error;
    hits += r.stats.prefix_cache_hit_tokens;
  }
  EXPECT_FALSE(engine.has_work());
  return hits;
}

// With a host tier, a failed batch whose moves are only copy-on-write copies (the first decode
// step of an n = 2 group whose prompt ends mid-block) ends its group, and the prefix cache keeps
// what it held: the copies went to the group's own private blocks.
TEST(EngineFailure, ACopyOnlyFailureWithATierKeepsTheCache) {
  ModelConfig model = *preset_config("tiny");
  model.vocab_size = 260;
  testing::FakeBackend backend(model, 64, 16, /*num_host_blocks=*/64);
  ByteTokenizer tokenizer;
  testing::FakeClock clock;
  Engine engine(backend, tokenizer, EngineConfig{}, clock);
  const std::string cached(64, 'p');  // 4 full blocks
  ASSERT_TRUE(engine.submit(bytes_request(cached + "x", 1, 2)).ok());
  run_to_end(engine);

  auto a = engine.submit(bytes_request(std::string(40, 'a'), 2, 20));  // 2.5 blocks
  ASSERT_TRUE(a.ok());
  StepResult prompt = engine.step();
  ASSERT_TRUE(prompt.error.empty()) << prompt.error;
  backend.fail_next_forward();
  StepResult failed = engine.step();
  EXPECT_EQ(failed.stats.num_block_copies, 1);  // one sibling copies the shared partial block
  EXPECT_EQ(failed.stats.num_host_loads + failed.stats.num_host_offloads, 0);
  ASSERT_EQ(failed.finished.size(), 1u);
  EXPECT_EQ(failed.finished[0]->id, *a);

  ASSERT_TRUE(engine.submit(bytes_request(cached + "y", 1, 2)).ok());
  EXPECT_EQ(run_to_end(engine), 64);
  EXPECT_EQ(engine.pool().counts().num_blocks_used, 0);
}

// With a host tier, a failed batch that loaded blocks from it forgets what the cache held (a
// loaded block's KV is undefined now): the prompt comes back computed, not found.
TEST(EngineFailure, AFailureWithALoadForgetsTheCache) {
  ModelConfig model = *preset_config("tiny");
  model.vocab_size = 260;
  testing::FakeBackend backend(model, 16, 16, /*num_host_blocks=*/64);  // a pool of 16 blocks
  ByteTokenizer tokenizer;
  testing::FakeClock clock;
  EngineConfig config;
  config.cold_reuse_rate = 0;  // plain LRU: the document's blocks are the first to go
  Engine engine(backend, tokenizer, config, clock);
  const std::string doc(96, 'd');  // 6 blocks
  ASSERT_TRUE(engine.submit(bytes_request(doc + "?", 1, 2)).ok());
  run_to_end(engine);
  for (char other : {'e', 'f', 'g'}) {  // push the document out of the pool into the tier
    ASSERT_TRUE(engine.submit(bytes_request(std::string(96, other) + "?", 1, 2)).ok());
    run_to_end(engine);
  }

  auto again = engine.submit(bytes_request(doc + "!", 1, 2));
  ASSERT_TRUE(again.ok());
  backend.fail_next_forward();
  StepResult failed = engine.step();
  EXPECT_EQ(failed.stats.num_host_loads, 6);
  ASSERT_EQ(failed.finished.size(), 1u);
  EXPECT_EQ(failed.finished[0]->id, *again);

  ASSERT_TRUE(engine.submit(bytes_request(doc + "?", 1, 2)).ok());
  EXPECT_EQ(run_to_end(engine), 0);
  EXPECT_EQ(engine.pool().counts().num_blocks_used, 0);
}

}  // namespace
}  // namespace kvc
