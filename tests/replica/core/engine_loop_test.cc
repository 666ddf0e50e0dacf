// EngineLoop on its own, without HTTP: the order of the callbacks a session relies on (the
// submission's answer before any output, each sibling's outputs in order, the finish last and
// once), abort, stop with work in flight, refusals after stop, and the KV-event stream (a snapshot
// first, then changes with sequence numbers that increase by one).
#include "replica/core/engine_loop.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "replica/model/model_config.h"
#include "replica/tokenizer/tokenizer.h"
#include "tests/testing/fake_backend.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/requests.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

using testing::bytes_request;

// What one group's callbacks saw, in the order they came (all on the engine thread).
struct Recorder {
  std::mutex mu;
  std::vector<std::string> log;                 // "submitted", "output", "finished"
  std::map<int32_t, int32_t> tokens;            // sibling -> tokens seen
  std::map<int32_t, FinishReason> finish;       // sibling -> finish reason of its last output
  std::map<int32_t, bool> output_after_finish;  // sibling -> an output after its last one
  std::vector<uint64_t> ids;
  std::string submit_error, finish_error;
  std::vector<FinishReason> final_state;
  std::promise<void> finished;
  std::promise<void> submitted;

  GroupSink sink() {
    GroupSink s;
    s.on_output = [this](const SequenceOutput& o) {
      std::lock_guard lock(mu);
      log.push_back("output");
      if (finish.count(o.sibling) && finish[o.sibling] != FinishReason::kNone)
        output_after_finish[o.sibling] = true;
      tokens[o.sibling] += o.num_new_tokens;
      finish[o.sibling] = o.finish;
    };
    s.on_finished = [this](const SequenceGroup& g, const std::string& error) {
      {
        std::lock_guard lock(mu);
        log.push_back("finished");
        finish_error = error;
        for (const Sequence& seq : g.seqs)
          final_state.push_back(seq.finish);
      }
      finished.set_value();
    };
    return s;
  }
  EngineLoop::OnSubmitted on_submitted() {
    return [this](Result<std::vector<uint64_t>> r) {
      {
        std::lock_guard lock(mu);
        log.push_back("submitted");
        if (r.ok()) {
          ids = *r;
        } else {
          submit_error = r.error().message;
        }
      }
      submitted.set_value();
    };
  }
};

class EngineLoopTest : public ::testing::Test {
 protected:
  EngineLoopTest() : backend_(tiny(), 64, 16), engine_(backend_, tokenizer_, config(), clock_) {}
  static ModelConfig tiny() {
    ModelConfig model = *preset_config("tiny");
    model.vocab_size = 260;
    return model;
  }
  static EngineConfig config() {
    EngineConfig c;
    c.scheduler.max_num_seqs = 8;
    return c;
  }
  static void wait(std::promise<void>& p) {
    ASSERT_EQ(p.get_future().wait_for(10s), std::future_status::ready) << "callback never came";
  }

  testing::FakeBackend backend_;
  ByteTokenizer tokenizer_;
  testing::FakeClock clock_;
  Engine engine_;
};

TEST_F(EngineLoopTest, AnswerFirstThenEachSiblingsOutputsThenOneFinish) {
  EngineLoop loop(engine_, "r0");
  Recorder rec;
  std::vector<GroupSink> sinks{rec.sink()};
  loop.submit({bytes_request(std::string(40, 'a'), 3, 7)}, std::move(sinks), rec.on_submitted());
  wait(rec.finished);
  std::lock_guard lock(rec.mu);
  ASSERT_GE(rec.log.size(), 3u);
  EXPECT_EQ(rec.log.front(), "submitted");
  EXPECT_EQ(rec.log.back(), "finished");
  EXPECT_EQ(std::count(rec.log.begin(), rec.log.end(), "finished"), 1);
  EXPECT_EQ(std::count(rec.log.begin(), rec.log.end(), "submitted"), 1);
  EXPECT_TRUE(rec.finish_error.empty()) << rec.finish_error;
  ASSERT_EQ(rec.ids.size(), 1u);
  ASSERT_EQ(rec.tokens.size(), 3u);
  for (int32_t s = 0; s < 3; ++s) {
    EXPECT_EQ(rec.tokens[s], 7) << "sibling " << s;
    EXPECT_EQ(rec.finish[s], FinishReason::kLength) << "sibling " << s;
    EXPECT_FALSE(rec.output_after_finish[s]) << "sibling " << s;
  }
  EXPECT_EQ(rec.final_state, std::vector<FinishReason>(3, FinishReason::kLength));
}

TEST_F(EngineLoopTest, OneBadRequestRefusesTheWholeSubmission) {
  EngineLoop loop(engine_, "r0");
  Recorder good, bad;
  std::vector<GroupSink> sinks{good.sink(), bad.sink()};
  loop.submit({bytes_request("fine", 1, 4), bytes_request("bad", 1, 0)}, std::move(sinks),
              bad.on_submitted());
  wait(bad.submitted);
  std::string error;
  {
    std::lock_guard lock(bad.mu);
    error = bad.submit_error;
  }
  EXPECT_NE(error.find("prompt[1]"), std::string::npos) << error;
  EXPECT_NE(error.find("max_tokens"), std::string::npos) << error;
  // Nothing was queued: the engine is idle and the good request's sink never heard anything.
  loop.run_on_engine_thread([](Engine& e) { EXPECT_FALSE(e.has_work()); });
  std::lock_guard lock(good.mu);
  EXPECT_TRUE(good.log.empty());
}

TEST_F(EngineLoopTest, AbortEndsTheGroupAndOthersRunOn) {
  EngineLoop loop(engine_, "r0");
  Recorder victim, other;
  // The abort is posted from the answer, so it runs before the group's second step: far from its
  // 200 tokens.
  auto answer = victim.on_submitted();
  std::vector<GroupSink> sinks{victim.sink()};
  loop.submit({bytes_request(std::string(40, 'v'), 2, 200)}, std::move(sinks),
              [&](Result<std::vector<uint64_t>> r) {
                if (r.ok()) loop.abort(r->front());
                answer(std::move(r));
              });
  std::vector<GroupSink> other_sinks{other.sink()};
  loop.submit({bytes_request(std::string(40, 'o'), 1, 5)}, std::move(other_sinks),
              other.on_submitted());
  wait(victim.finished);
  wait(other.finished);
  {
    std::lock_guard lock(victim.mu);
    EXPECT_EQ(victim.final_state, std::vector<FinishReason>(2, FinishReason::kAbort));
    for (auto [sibling, n] : victim.tokens)
      EXPECT_LT(n, 200) << "sibling " << sibling;
  }
  std::lock_guard lock(other.mu);
  EXPECT_EQ(other.final_state, std::vector<FinishReason>{FinishReason::kLength});
  EXPECT_EQ(other.tokens[0], 5);
}

TEST_F(EngineLoopTest, StopEndsRunningGroupsWithAnErrorAndRefusesLaterWork) {
  auto loop = std::make_unique<EngineLoop>(engine_, "r0");
  Recorder rec;
  GroupSink sink = rec.sink();
  // The first output holds the engine thread until stop() has been called, so the group is
  // certainly running (and far from its end) when the loop stops.
  std::promise<void> first_output;
  bool first = true;
  auto on_output = sink.on_output;
  sink.on_output = [&, on_output](const SequenceOutput& o) {
    on_output(o);
    if (!first) return;
    first = false;
    first_output.set_value();
    while (!loop->stopped())
      std::this_thread::sleep_for(1ms);
  };
  std::vector<GroupSink> sinks{std::move(sink)};
  loop->submit({bytes_request(std::string(40, 's'), 2, 300)}, std::move(sinks), rec.on_submitted());
  wait(first_output);
  loop->stop();
  wait(rec.finished);
  {
    std::lock_guard lock(rec.mu);
    EXPECT_NE(rec.finish_error.find("shutting down"), std::string::npos) << rec.finish_error;
    EXPECT_EQ(rec.final_state, std::vector<FinishReason>(2, FinishReason::kAbort));
  }

  // After stop: a submission is refused at once, on the calling thread; so is a subscription;
  // run_on_engine_thread returns without running.
  EXPECT_TRUE(loop->stopped());
  std::optional<std::string> refused;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id answered_on;
  loop->submit({bytes_request("late", 1, 3)}, {GroupSink{}}, [&](Result<std::vector<uint64_t>> r) {
    answered_on = std::this_thread::get_id();
    refused = r.ok() ? "" : r.error().message;
  });
  ASSERT_TRUE(refused.has_value());
  EXPECT_NE(refused->find("shutting down"), std::string::npos) << *refused;
  EXPECT_EQ(answered_on, caller);
  EXPECT_FALSE(loop->subscribe_kv_events([](const KvEventBatch&, std::string_view) {}).has_value());
  bool ran = false;
  loop->run_on_engine_thread([&](Engine&) { ran = true; });
  EXPECT_FALSE(ran);
  loop->stop();  // idempotent
  // Every block went back: the aborted groups freed theirs.
  EXPECT_EQ(engine_.pool().counts().num_blocks_used, 0);
}

TEST_F(EngineLoopTest, KvSubscribersGetASnapshotThenNumberedChanges) {
  EngineLoop loop(engine_, "r7");
  std::mutex mu;
  std::vector<KvEventBatch> first, second;
  auto sid = loop.subscribe_kv_events([&](const KvEventBatch& b, std::string_view) {
    std::lock_guard lock(mu);
    first.push_back(b);
  });
  ASSERT_TRUE(sid.has_value());

  Recorder rec;
  std::vector<GroupSink> sinks{rec.sink()};
  loop.submit({bytes_request(std::string(64, 'k'), 2, 3)}, std::move(sinks), rec.on_submitted());
  wait(rec.finished);
  // A later subscriber's snapshot holds what the first one was told of, as one picture.
  auto sid2 = loop.subscribe_kv_events([&](const KvEventBatch& b, std::string_view) {
    std::lock_guard lock(mu);
    second.push_back(b);
  });
  ASSERT_TRUE(sid2.has_value());
  EXPECT_NE(*sid, *sid2);
  loop.run_on_engine_thread([](Engine&) {});  // both subscriptions have been served

  std::lock_guard lock(mu);
  ASSERT_GE(first.size(), 2u);
  EXPECT_TRUE(first[0].snapshot);
  ASSERT_FALSE(first[0].events.empty());
  EXPECT_TRUE(std::holds_alternative<KvCleared>(first[0].events[0]));
  size_t stored = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].replica, "r7");
    EXPECT_EQ(first[i].seq, i) << "batch " << i;
    if (i > 0) {
      EXPECT_FALSE(first[i].snapshot);
    }
    for (const KvEvent& e : first[i].events) {
      if (const auto* s = std::get_if<KvStored>(&e)) stored += s->hashes.size();
    }
  }
  EXPECT_GE(stored, 4u) << "a 64-byte prompt in 16-token blocks is four full blocks";

  ASSERT_EQ(second.size(), 1u);
  EXPECT_TRUE(second[0].snapshot);
  EXPECT_EQ(second[0].seq, 0u);
  size_t snapshot_stored = 0;
  for (const KvEvent& e : second[0].events) {
    if (const auto* s = std::get_if<KvStored>(&e)) snapshot_stored += s->hashes.size();
  }
  EXPECT_EQ(snapshot_stored, static_cast<size_t>(engine_.pool().counts().num_blocks_cached));
  EXPECT_GE(snapshot_stored, 4u);

  // An unsubscribed stream hears nothing more.
  const size_t before = first.size();
  loop.unsubscribe_kv_events(*sid);
  loop.run_on_engine_thread([](Engine&) {});
  EXPECT_EQ(first.size(), before);
}

// Queued events go only to subscribers that asked for them (a router built before them refuses
// a batch holding one), and before the step that admits the prompt: the first batch after the
// submission holds the announcement; the others see the same stored events without it. Work
// events (KvWork) likewise only for those that asked for them too.
TEST_F(EngineLoopTest, QueuedEventsOnlyForSubscribersThatAsk) {
  EngineLoop loop(engine_, "r8");
  std::mutex mu;
  std::vector<KvEventBatch> with, without, queued_only;
  // Every subscriber's text is its batch's (the events' JSON is encoded once for all that
  // receive the same events; only seq is each one's own).
  int texts_checked = 0;
  auto text_is_the_batchs = [&](const KvEventBatch& b, std::string_view json) {
    EXPECT_EQ(encode_kv_event_batch(b.replica, b.seq, b.snapshot, json), encode_kv_event_batch(b));
    ++texts_checked;
  };
  ASSERT_TRUE(loop.subscribe_kv_events(
      [&](const KvEventBatch& b, std::string_view json) {
        std::lock_guard lock(mu);
        text_is_the_batchs(b, json);
        with.push_back(b);
      },
      /*queued=*/true, /*work=*/true));
  // Queued events without the work ones (a router built before KvWork would refuse a batch
  // holding one).
  ASSERT_TRUE(loop.subscribe_kv_events(
      [&](const KvEventBatch& b, std::string_view json) {
        std::lock_guard lock(mu);
        text_is_the_batchs(b, json);
        queued_only.push_back(b);
      },
      /*queued=*/true));
  ASSERT_TRUE(loop.subscribe_kv_events([&](const KvEventBatch& b, std::string_view json) {
    std::lock_guard lock(mu);
    text_is_the_batchs(b, json);
    without.push_back(b);
  }));
  Recorder rec;
  std::vector<GroupSink> sinks{rec.sink()};
  loop.submit({bytes_request(std::string(64, 'q'), 1, 2)}, std::move(sinks), rec.on_submitted());
  wait(rec.finished);
  loop.run_on_engine_thread([](Engine&) {});

  std::lock_guard lock(mu);
  auto count = [](const std::vector<KvEventBatch>& batches, auto kind) {
    size_t n = 0;
    for (const KvEventBatch& b : batches)
      for (const KvEvent& e : b.events)
        n += std::holds_alternative<decltype(kind)>(e) ? 1 : 0;
    return n;
  };
  ASSERT_GE(with.size(), 3u);            // snapshot, the announcement, the stored blocks
  ASSERT_EQ(with[1].events.size(), 2u);  // the queued blocks and the work
  const auto* w = std::get_if<KvWork>(&with[1].events[1]);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->seq, 1u);
  EXPECT_EQ(w->sequences, 1);
  EXPECT_EQ(w->tokens, 64 + 2);  // the prompt (nothing cached) and max_tokens
  const auto* q = std::get_if<KvQueued>(&with[1].events[0]);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->parent, std::nullopt);
  EXPECT_EQ(q->hashes.size(), 4u);  // 64 bytes in 16-token blocks
  EXPECT_EQ(count(with, KvQueued{}), 1u);
  EXPECT_EQ(count(without, KvQueued{}), 0u);
  EXPECT_EQ(count(with, KvWork{}), 1u);
  EXPECT_EQ(count(without, KvWork{}), 0u);
  EXPECT_EQ(count(queued_only, KvWork{}), 0u);
  EXPECT_EQ(count(queued_only, KvQueued{}), 1u);
  EXPECT_EQ(count(queued_only, KvStored{}), count(with, KvStored{}));
  for (size_t i = 0; i < queued_only.size(); ++i)
    EXPECT_EQ(queued_only[i].seq, i);
  EXPECT_EQ(count(with, KvStored{}), count(without, KvStored{}));
  EXPECT_GE(count(without, KvStored{}), 1u);
  for (size_t i = 0; i < without.size(); ++i)
    EXPECT_EQ(without[i].seq, i);  // no gap where a batch held only the announcement
  for (size_t i = 0; i < with.size(); ++i)
    EXPECT_EQ(with[i].seq, i);
  EXPECT_EQ(texts_checked, static_cast<int>(with.size() + without.size() + queued_only.size()));
}

// Subscribers of one kind share each publication's batch and encoding; one that came later
// still numbers its batches from its own snapshot on, and gets the same events.
TEST_F(EngineLoopTest, SubscribersOfOneKindShareEventsAndKeepTheirOwnSeqs) {
  EngineLoop loop(engine_, "r7");
  std::mutex mu;
  std::vector<KvEventBatch> early, late;
  std::vector<std::string> early_texts, late_texts;
  auto subscribe = [&](std::vector<KvEventBatch>& batches, std::vector<std::string>& texts) {
    return loop.subscribe_kv_events(
        [&](const KvEventBatch& b, std::string_view json) {
          std::lock_guard lock(mu);
          batches.push_back(b);
          texts.push_back(encode_kv_event_batch(b.replica, b.seq, b.snapshot, json));
        },
        /*queued=*/true);
  };
  ASSERT_TRUE(subscribe(early, early_texts));
  const std::string second = "a second prompt, also long enough for blocks";
  for (const std::string& prompt :
       {std::string("the first prompt, long enough for blocks"), second}) {
    if (prompt == second) {
      ASSERT_TRUE(subscribe(late, late_texts));
    }
    Recorder rec;
    std::vector<GroupSink> sinks{rec.sink()};
    loop.submit({bytes_request(prompt, 1, 2)}, std::move(sinks), rec.on_submitted());
    wait(rec.finished);
    loop.run_on_engine_thread([](Engine&) {});
  }
  std::lock_guard lock(mu);
  ASSERT_GE(late.size(), 2u);  // its snapshot, then the second prompt's events
  ASSERT_GT(early.size(), late.size());
  for (size_t i = 0; i < early.size(); ++i) {
    EXPECT_EQ(early[i].seq, i);
    EXPECT_EQ(early_texts[i], encode_kv_event_batch(early[i]));
  }
  for (size_t i = 0; i < late.size(); ++i) {
    EXPECT_EQ(late[i].seq, i);
    EXPECT_EQ(late_texts[i], encode_kv_event_batch(late[i]));
  }
  // After the snapshot, the late subscriber's batches are the early one's last, seq apart.
  const size_t offset = early.size() - late.size();
  for (size_t i = 1; i < late.size(); ++i) {
    EXPECT_EQ(late[i].events, early[offset + i].events);
    EXPECT_NE(late[i].seq, early[offset + i].seq);
  }
}

// A router that subscribes (or resubscribes) while a prompt waits learns of it from the
// snapshot: held blocks first, then the waiting prompt's queued event; only if it asks.
TEST_F(EngineLoopTest, ASnapshotAnnouncesThePromptsStillWaitingToQueuedSubscribers) {
  EngineLoop loop(engine_, "r9");
  loop.set_paused(true);  // admits nothing: the prompt stays waiting
  Recorder rec;
  std::vector<GroupSink> sinks{rec.sink()};
  loop.submit({bytes_request(std::string(40, 'w'), 1, 2)}, std::move(sinks), rec.on_submitted());
  wait(rec.submitted);
  std::mutex mu;
  std::vector<KvEventBatch> with, without;
  ASSERT_TRUE(loop.subscribe_kv_events(
      [&](const KvEventBatch& b, std::string_view) {
        std::lock_guard lock(mu);
        with.push_back(b);
      },
      /*queued=*/true));
  ASSERT_TRUE(loop.subscribe_kv_events([&](const KvEventBatch& b, std::string_view) {
    std::lock_guard lock(mu);
    without.push_back(b);
  }));
  loop.run_on_engine_thread([](Engine&) {});
  {
    std::lock_guard lock(mu);
    ASSERT_FALSE(with.empty());
    ASSERT_FALSE(without.empty());
    ASSERT_TRUE(with[0].snapshot);
    ASSERT_EQ(with[0].events.size(), 2u);  // cleared, then the waiting prompt
    EXPECT_TRUE(std::holds_alternative<KvCleared>(with[0].events[0]));
    const auto* q = std::get_if<KvQueued>(&with[0].events[1]);
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->hashes.size(), 2u);  // 40 bytes: two full 16-byte blocks
    EXPECT_EQ(without[0].events, (std::vector<KvEvent>{KvCleared{}}));
  }
  loop.set_paused(false);
  wait(rec.finished);
}

TEST_F(EngineLoopTest, LoadCountsStepsAndIsIdleAfterward) {
  EngineLoop loop(engine_, "r0");
  Recorder rec;
  std::vector<GroupSink> sinks{rec.sink()};
  loop.submit({bytes_request(std::string(20, 'l'), 1, 6)}, std::move(sinks), rec.on_submitted());
  wait(rec.finished);
  loop.run_on_engine_thread([](Engine&) {});  // the snapshot after the last step is published
  const LoadSnapshot load = loop.load();
  EXPECT_GE(load.num_steps, 6);  // a prefill, then one token per step
  EXPECT_EQ(load.scheduler.num_groups_running, 0);
  EXPECT_EQ(load.scheduler.num_groups_waiting, 0);
  EXPECT_EQ(load.blocks.num_blocks_used, 0);
}

}  // namespace
}  // namespace kvc
