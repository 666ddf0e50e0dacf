// Metric values after known workloads, read back from a replica's /metrics over HTTP.
#include <future>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "metrics/metrics.h"
#include "replica/server/local_replica.h"
#include "replica/server/replica_stack.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

// The value of the first sample line that starts with `series` (name and labels as exposed).
double sample(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const size_t sp = text.find(' ', at + series.size());
      return std::stod(text.substr(sp + 1, text.find('\n', sp) - sp - 1));
    }
    at += series.size();
  }
  return -1;
}

// The sample lines of metric `name` (every series of it).
int series_count(const std::string& text, const std::string& name) {
  int n = 0;
  for (size_t at = 0; (at = text.find(name + "{", at)) != std::string::npos; at += name.size()) {
    if (at == 0 || text[at - 1] == '\n') ++n;
  }
  return n;
}

// kvcascade_weight_version_info keeps one series, the version serving now at 1, however many
// versions were loaded (an RL run loads one per step); loading the serving version again keeps
// it.
TEST(ReplicaMetrics, WeightVersionInfoKeepsOneSeriesWhateverTheNumberOfVersions) {
  prometheus::Registry registry;
  metrics::ReplicaMetrics m(registry);
  m.set_weight_version("v0");
  EXPECT_EQ(sample(metrics::expose(registry), "kvcascade_weight_version_info{version=\"v0\"}"), 1);
  for (int step = 0; step < 100; ++step)
    m.set_weight_version("step-" + std::to_string(step));
  m.set_weight_version("step-99");
  const std::string text = metrics::expose(registry);
  EXPECT_EQ(series_count(text, "kvcascade_weight_version_info"), 1) << text;
  EXPECT_EQ(sample(text, "kvcascade_weight_version_info{version=\"step-99\"}"), 1) << text;
}

TEST(ReplicaMetrics, SiblingsAndSharedPrefixOfOneNEightRequest) {
  LocalReplica replica("m0", 512);
  http::Client client;
  const std::string prompt(512, 'p');
  auto r = client.request(
      "127.0.0.1", replica.port(), "POST", "/v1/completions",
      nlohmann::json{
          {"model", "tiny"}, {"prompt", prompt}, {"n", 8}, {"max_tokens", 6}, {"ignore_eos", true}}
          .dump(),
      {{"content-type", "application/json"}}, 60s);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200);
  auto m = client.request("127.0.0.1", replica.port(), "GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->header("content-type").value_or("").find("text/plain"), std::string::npos);
  const std::string& t = m->body;
  // Every decode step saw one level of 8 siblings sharing >= 496 tokens (the full prompt
  // blocks): the sibling-count histogram has all its samples in the le=8 bucket, none below.
  const double steps = sample(t, "kvcascade_decode_batch_sibling_count_count");
  EXPECT_GE(steps, 5);
  EXPECT_EQ(sample(t, "kvcascade_decode_batch_sibling_count_bucket{le=\"4\"}"), 0);
  EXPECT_EQ(sample(t, "kvcascade_decode_batch_sibling_count_bucket{le=\"8\"}"), steps);
  EXPECT_EQ(sample(t, "kvcascade_decode_batch_shared_prefix_tokens_bucket{le=\"256\"}"), 0);
  EXPECT_GE(sample(t, "kvcascade_decode_batch_shared_prefix_tokens_sum") / steps, 496);
  EXPECT_GE(sample(t, "kvcascade_cascade_decisions_total{decision=\"cascade\",reason=\"pays\"}"),
            steps);
  EXPECT_GT(sample(t, "kvcascade_kv_bytes_saved_total"), 0);
  EXPECT_EQ(sample(t, "kvcascade_prefix_cache_query_tokens_total"), 512);
  EXPECT_EQ(sample(t, "kvcascade_generation_tokens_total"), 48);
  EXPECT_EQ(sample(t, "kvcascade_prompt_tokens_total"), 512);
  EXPECT_EQ(sample(t, "kvcascade_request_ttft_seconds_count"), 1);
  EXPECT_EQ(sample(t, "kvcascade_kv_blocks{state=\"used\"}"), 0);
  EXPECT_GE(sample(t, "kvcascade_kv_blocks{state=\"cached\"}"), 32);
}

// Every response is counted by status class, refusals included (the second audit found no
// per-status count on either server).
TEST(ReplicaMetrics, ResponsesAreCountedByStatusClass) {
  LocalReplica replica("m0", 64);
  http::Client client;
  auto post = [&](const nlohmann::json& body) {
    auto r = client.request("127.0.0.1", replica.port(), "POST", "/v1/completions", body.dump(),
                            {{"content-type", "application/json"}}, 60s);
    return r.ok() ? r->status : 0;
  };
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "ok"}, {"max_tokens", 1}}), 200);
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "x"}, {"n", 0}}), 400);
  EXPECT_EQ(post({{"model", "other"}, {"prompt", "x"}}), 404);
  auto m = client.request("127.0.0.1", replica.port(), "GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_GE(sample(m->body, "kvcascade_responses_total{code=\"2xx\"}"), 1) << m->body;
  EXPECT_EQ(sample(m->body, "kvcascade_responses_total{code=\"4xx\"}"), 2) << m->body;
  EXPECT_EQ(sample(m->body, "kvcascade_responses_total{code=\"5xx\"}"), 0) << m->body;
}

// A client that leaves mid-stream frees its group's KV at once, with no step after it: the KV
// block and group gauges follow /v1/load there (they were set only after steps, so the last
// group's blocks stayed "used" in /metrics; found by an audit, with n = 8: a group of one ended
// through a step anyway).
TEST(ReplicaMetrics, GaugesFollowAnAbortWithNoStepAfterIt) {
  LocalReplica replica("m0", 512);
  http::Client client;
  std::promise<void> done;
  // Long enough that it cannot finish by itself while the test looks.
  client.stream(
      "127.0.0.1", replica.port(), "POST", "/v1/completions",
      nlohmann::json{{"model", "tiny"},
                     {"prompt", "gauges after an abort"},
                     {"n", 8},
                     {"max_tokens", 900},
                     {"ignore_eos", true},
                     {"stream", true}}
          .dump(),
      {{"content-type", "application/json"}}, nullptr,
      [chunks = 0](std::string_view) mutable { return ++chunks < 20; },  // leaves mid-decode
      [&](Status) { done.set_value(); });
  ASSERT_EQ(done.get_future().wait_for(30s), std::future_status::ready);
  // The abort reached the engine (its load says so) ...
  bool ended = false;
  for (int i = 0; i < 200 && !ended; ++i, std::this_thread::sleep_for(25ms)) {
    auto l = client.request("127.0.0.1", replica.port(), "GET", "/v1/load");
    ASSERT_TRUE(l.ok());
    ended = nlohmann::json::parse(l->body)["running_groups"] == 0;
  }
  ASSERT_TRUE(ended);
  // ... and /metrics says the same at once, though no step ran after it.
  auto m = client.request("127.0.0.1", replica.port(), "GET", "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(sample(m->body, "kvcascade_kv_blocks{state=\"used\"}"), 0) << m->body;
  EXPECT_EQ(sample(m->body, "kvcascade_groups{state=\"running\"}"), 0) << m->body;
}

// The shared-prefix and sibling histograms take every candidate cascade level, the ones that ran
// flat included (their help says so): a prompt shorter than a block shares no full block, so each
// decode step's level of 8 siblings runs flat (prefix_too_short), and is still observed.
TEST(ReplicaMetrics, SharedPrefixHistogramCountsLevelsThatRanFlat) {
  LocalReplica replica("m1", 512);
  http::Client client;
  auto r = client.request("127.0.0.1", replica.port(), "POST", "/v1/completions",
                          nlohmann::json{{"model", "tiny"},
                                         {"prompt", "short prompt here"},
                                         {"n", 8},
                                         {"max_tokens", 6},
                                         {"ignore_eos", true}}
                              .dump(),
                          {{"content-type", "application/json"}}, 60s);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200);
  auto m = client.request("127.0.0.1", replica.port(), "GET", "/metrics");
  ASSERT_TRUE(m.ok());
  const std::string& t = m->body;
  const double flat =
      sample(t, "kvcascade_cascade_decisions_total{decision=\"flat\",reason=\"prefix_too_short\"}");
  EXPECT_GE(flat, 5) << t;
  EXPECT_EQ(sample(t, "kvcascade_cascade_decisions_total{decision=\"cascade\",reason=\"pays\"}"),
            0);
  EXPECT_EQ(sample(t, "kvcascade_decode_batch_shared_prefix_tokens_count"), flat);
  EXPECT_EQ(sample(t, "kvcascade_decode_batch_sibling_count_count"), flat);
  EXPECT_NE(t.find("# HELP kvcascade_decode_batch_shared_prefix_tokens Shared-prefix tokens of "
                   "each candidate cascade level per decode step, kept or run flat"),
            std::string::npos)
      << t;
}

}  // namespace
}  // namespace kvc

namespace kvc {
namespace {

// Request latencies read the engine's injected Clock: with a clock that stands still, a whole
// request takes no time at all (TTFT sum 0, one observation), however long it really ran.
TEST(ReplicaMetrics, LatenciesReadTheInjectedClock) {
  static const ModelWeights weights = random_weights(*preset_config("tiny"), 3);
  testing::FakeClock clock;
  ReplicaStackConfig c;
  c.engine.scheduler.max_model_len = 4096;
  c.server.replica_id = "clocked";
  ReplicaStack stack(std::make_unique<CpuBackend>(weights, 256, 16),
                     std::make_shared<ByteTokenizer>(), c, clock);
  auto port = stack.listen("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  http::Client client;
  auto r = client.request(
      "127.0.0.1", *port, "POST", "/v1/completions",
      nlohmann::json{
          {"model", "tiny"}, {"prompt", "hello"}, {"max_tokens", 4}, {"ignore_eos", true}}
          .dump(),
      {{"content-type", "application/json"}}, 60s);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->status, 200);
  auto m = client.request("127.0.0.1", *port, "GET", "/metrics", "", {}, 10s);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(sample(m->body, "kvcascade_request_ttft_seconds_count"), 1);
  EXPECT_EQ(sample(m->body, "kvcascade_request_ttft_seconds_sum"), 0);
  EXPECT_EQ(sample(m->body, "kvcascade_request_tpot_seconds_sum"), 0);
}

}  // namespace
}  // namespace kvc
