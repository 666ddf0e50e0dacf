// A backend whose forward fails: Engine::fail_batch ends exactly the groups that had work in the
// failed batch (their KV is undefined now), frees their blocks, says why, and the engine goes on
// serving the groups that were waiting and those that come later.
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

}  // namespace
}  // namespace kvc
