// The load generator against a real in-process replica (tiny random model on the CPU backend):
// every request answered, usage tokens counted, SSE events counted when streaming, errors and
// statuses reported for a dead endpoint.
#include "bench/loadgen.h"

#include <gtest/gtest.h>

#include "replica/server/local_replica.h"

namespace kvc::bench {
namespace {

TEST(LoadgenTest, RequestsCarrySharedPrefixesAndTheWorkload) {
  Workload w;
  w.host = "h:1";
  w.tenants = 3;
  w.prompt_bytes = 100;
  w.n = 4;
  w.questions = 2;
  const auto reqs = prepare_requests(w);
  ASSERT_EQ(reqs.size(), 6u);
  for (const std::string& r : reqs) {
    EXPECT_EQ(r.rfind("POST /v1/completions HTTP/1.1\r\nHost: h:1\r\n", 0), 0u);
    const std::string body = r.substr(r.find("\r\n\r\n") + 4);
    EXPECT_NE(r.find("Content-Length: " + std::to_string(body.size()) + "\r\n"), std::string::npos);
    const auto j = nlohmann::json::parse(body);
    EXPECT_EQ(j["n"], 4);
    EXPECT_EQ(j["model"], "tiny");
  }
  // Request 0 and 3 are tenant 0 with two questions: the first 100 bytes are equal.
  auto prompt = [&](size_t i) {
    return nlohmann::json::parse(reqs[i].substr(reqs[i].find("\r\n\r\n") + 4))["prompt"]
        .get<std::string>();
  };
  EXPECT_EQ(prompt(0).substr(0, 100), prompt(3).substr(0, 100));
  EXPECT_NE(prompt(0), prompt(3));
  EXPECT_NE(prompt(0).substr(0, 100), prompt(1).substr(0, 100));
  w.path = "/v1/chat/completions";
  w.api_key = "k";
  const std::string chat = prepare_requests(w).front();
  EXPECT_NE(chat.find("Authorization: Bearer k\r\n"), std::string::npos);
  EXPECT_NE(chat.find("\"messages\""), std::string::npos);
}

TEST(LoadgenTest, AgainstAReplica) {
  LocalReplica replica("r0");
  ASSERT_NE(replica.port(), 0);
  Workload w;
  w.tenants = 2;
  w.prompt_bytes = 64;
  w.max_tokens = 4;
  w.n = 2;
  const Endpoint e{"127.0.0.1", replica.port()};
  const LoadStats s = run_closed_loop("replica", {e}, 2, 3.0, prepare_requests(w), true);
  EXPECT_GT(s.ok, 0);
  EXPECT_EQ(s.errors, 0);
  EXPECT_EQ(s.statuses.at(200), s.ok);
  // From each response's usage: n samples of 1 to max_tokens tokens (the random model may stop).
  EXPECT_GE(s.completion_tokens, s.ok * 2);
  EXPECT_LE(s.completion_tokens, s.ok * 2 * 4);
  EXPECT_EQ(s.latency_ms.size(), static_cast<size_t>(s.ok));
  EXPECT_GT(LoadStats::percentile(s.latency_ms, 0.5), 0.0);

  w.stream = true;
  const LoadStats st = run_closed_loop("replica", {e}, 2, 3.0, prepare_requests(w), true);
  EXPECT_GT(st.ok, 0);
  EXPECT_EQ(st.errors, 0);
  // Events carry one or more tokens of one sample: at least one per sample, at most one per token.
  EXPECT_GE(st.stream_events, st.ok * 2);
  EXPECT_LE(st.stream_events, st.ok * 2 * 4 + st.ok);
  EXPECT_LE(LoadStats::percentile(st.first_byte_ms, 0.5),
            LoadStats::percentile(st.latency_ms, 0.5));

  w.model = "no-such-model";
  w.stream = false;
  const LoadStats bad = run_closed_loop("replica", {e}, 1, 0.3, prepare_requests(w), true);
  EXPECT_EQ(bad.ok, 0);
  EXPECT_GT(bad.errors, 0);
  EXPECT_GT(bad.statuses.count(404) + bad.statuses.count(400), 0u);
}

TEST(LoadgenTest, DeadEndpointCountsErrors) {
  LocalReplica replica("r0");
  const Endpoint e{"127.0.0.1", replica.port()};
  replica.stop();
  EXPECT_FALSE(can_connect(e));
  const LoadStats s = run_closed_loop("dead", {e}, 2, 0.3, prepare_requests(Workload{}), false);
  EXPECT_EQ(s.ok, 0);
  EXPECT_GT(s.errors, 0);
  EXPECT_GT(s.statuses.at(0), 0);
}

}  // namespace
}  // namespace kvc::bench
