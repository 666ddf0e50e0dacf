// The replica's HTTP API over real sockets on 127.0.0.1: the tiny model on the CPU backend behind
// the EngineLoop and ReplicaServer, driven with http::Client.
#include "replica/server.h"

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "http/sse.h"
#include "replica/local_replica.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class ReplicaServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    http::ServerLimits limits;
    limits.max_body_bytes = 64 << 10;
    replica_ = std::make_unique<LocalReplica>("r0", 64, "127.0.0.1", limits);
    port_ = replica_->port();
    ASSERT_NE(port_, 0);
  }

  http::ClientResponse post(const std::string& path, const std::string& body) {
    auto r = client_.request("127.0.0.1", port_, "POST", path, body,
                             {{"content-type", "application/json"}}, 60s);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? *r : http::ClientResponse{};
  }
  http::ClientResponse get(const std::string& path) {
    auto r = client_.request("127.0.0.1", port_, "GET", path, "", {}, 10s);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? *r : http::ClientResponse{};
  }
  json load() { return json::parse(get("/v1/load").body); }

  // Waits (bounded) until the replica holds no running work.
  bool drained() {
    for (int i = 0; i < 200; ++i) {
      const json l = load();
      if (l["running_groups"] == 0 && l["waiting_groups"] == 0 && l["kv_blocks"]["used"] == 0) {
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  std::unique_ptr<LocalReplica> replica_;
  http::Client client_;
  uint16_t port_ = 0;
};

const std::string kPrompt =
    "A shared system prompt that is long enough to fill several KV blocks of sixteen tokens. ";

TEST_F(ReplicaServerTest, InfoEndpoints) {
  EXPECT_EQ(json::parse(get("/health").body)["status"], "ok");
  const json models = json::parse(get("/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  const json info = json::parse(get("/v1/info").body);
  EXPECT_EQ(info["block_size"], 16);
  EXPECT_EQ(info["replica_id"], "r0");
  EXPECT_EQ(load()["kv_blocks"]["total"], 64);
}

TEST_F(ReplicaServerTest, CompletionWithSiblingsAndCachedTokens) {
  const std::string body = json{{"model", "tiny"}, {"prompt", kPrompt}, {"n", 3},
                                {"max_tokens", 5}, {"seed", 1},         {"ignore_eos", true}}
                               .dump();
  const auto first = post("/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const json a = json::parse(first.body);
  ASSERT_EQ(a["choices"].size(), 3u);
  EXPECT_EQ(a["object"], "text_completion");
  EXPECT_EQ(a["choices"][2]["index"], 2);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["usage"]["prompt_tokens"], kPrompt.size());
  EXPECT_EQ(a["usage"]["completion_tokens"], 15);
  EXPECT_EQ(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // The same prompt again: its full blocks come from the prefix cache; same seed, same text.
  const json b = json::parse(post("/v1/completions", body).body);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], kPrompt.size() / 16 * 16);
  EXPECT_EQ(a["choices"], b["choices"]);
}

TEST_F(ReplicaServerTest, ChatAndStreamingMatchNonStreaming) {
  const json req = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", kPrompt}}}},
                    {"max_tokens", 6}, {"seed", 9},
                    {"n", 2},          {"ignore_eos", true}};
  const json whole = json::parse(post("/v1/chat/completions", req.dump()).body);
  ASSERT_EQ(whole["object"], "chat.completion");
  json streamed_req = req;
  streamed_req["stream"] = true;
  streamed_req["stream_options"] = {{"include_usage", true}};
  const auto s = post("/v1/chat/completions", streamed_req.dump());
  ASSERT_EQ(s.status, 200);
  EXPECT_NE(s.header("content-type").value_or("").find("text/event-stream"), std::string::npos);
  http::SseParser parser;
  auto events = parser.feed(s.body);
  ASSERT_TRUE(events.ok());
  std::string text[2];
  bool done = false, usage = false;
  for (const auto& e : *events) {
    if (e.data == "[DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(e.data);
    EXPECT_EQ(chunk["object"], "chat.completion.chunk");
    if (chunk.contains("usage")) usage = true;
    for (const auto& c : chunk["choices"]) {
      text[c["index"].get<int>()] += c["delta"].value("content", "");
    }
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(usage);
  EXPECT_EQ(text[0], whole["choices"][0]["message"]["content"]);
  EXPECT_EQ(text[1], whole["choices"][1]["message"]["content"]);
}

TEST_F(ReplicaServerTest, BadInputGetsJsonErrorsAndTheServerStaysUp) {
  auto expect_error = [&](const http::ClientResponse& r, int status, const char* param) {
    EXPECT_EQ(r.status, status) << r.body;
    const json j = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j.contains("error")) << r.body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    if (param) {
      EXPECT_EQ(j["error"]["param"], param) << r.body;
    }
  };
  expect_error(post("/v1/completions", "{not json"), 400, nullptr);
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","n":0})"), 400, "n");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","n":"3"})"), 400, "n");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":-1})"), 400,
               "max_tokens");
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","temperature":-2})"), 400,
               "temperature");
  expect_error(post("/v1/completions", R"({"model":"gpt-9","prompt":"x"})"), 404, "model");
  expect_error(post("/v1/completions", "{\"model\":\"tiny\",\"prompt\":\"\xff\xfe\"}"), 400,
               nullptr);
  // A group that could never fit this 64-block pool.
  expect_error(post("/v1/completions", R"({"model":"tiny","prompt":"x","n":64,"max_tokens":500})"),
               400, nullptr);
  expect_error(get("/v1/nothing"), 404, nullptr);
  expect_error(get("/v1/completions"), 405, nullptr);
  expect_error(post("/v1/completions", std::string(100 << 10, 'x')), 413, nullptr);
  EXPECT_EQ(get("/health").status, 200);
}

TEST_F(ReplicaServerTest, KvEventsStreamSnapshotThenChanges) {
  std::promise<void> got_snapshot, got_stored;
  std::atomic<bool> snapshot_seen{false}, stored_seen{false};
  http::SseParser parser;
  std::promise<Status> finished;
  client_.stream(
      "127.0.0.1", port_, "GET", "/v1/kv_events", "", {}, [](int, const http::Headers&) {},
      [&](std::string_view bytes) {
        auto events = parser.feed(bytes);
        if (!events.ok()) return false;
        for (const auto& e : *events) {
          auto batch = decode_kv_event_batch(e.data);
          if (!batch.ok()) continue;
          if (batch->snapshot && !snapshot_seen.exchange(true)) got_snapshot.set_value();
          for (const KvEvent& ev : batch->events) {
            if (std::holds_alternative<KvStored>(ev) && !batch->snapshot &&
                !stored_seen.exchange(true)) {
              got_stored.set_value();
            }
          }
        }
        return !stored_seen.load();
      },
      [&](Status s) { finished.set_value(s); });
  ASSERT_EQ(got_snapshot.get_future().wait_for(10s), std::future_status::ready);
  post("/v1/completions", json{{"model", "tiny"}, {"prompt", kPrompt}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(got_stored.get_future().wait_for(10s), std::future_status::ready);
  finished.get_future().wait_for(10s);
}

TEST_F(ReplicaServerTest, ClientThatLeavesMidStreamFreesItsGroup) {
  std::promise<Status> done;
  std::atomic<int> chunks{0};
  client_.stream(
      "127.0.0.1", port_, "POST", "/v1/completions",
      json{{"model", "tiny"},
           {"prompt", kPrompt},
           {"max_tokens", 900},
           {"stream", true},
           {"ignore_eos", true}}
          .dump(),
      {{"content-type", "application/json"}}, [](int, const http::Headers&) {},
      [&](std::string_view) { return ++chunks < 3; },  // hang up after a few chunks
      [&](Status s) { done.set_value(s); });
  ASSERT_EQ(done.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(drained()) << load().dump();
  // Aborted long before its 900 tokens.
  EXPECT_LT(load()["steps"].get<int>(), 300);
}

// Memory pressure through HTTP (issue: five long n=4 groups sent at once to a pool that holds
// one of them thrashed: each preempted group was re-admitted at once, recomputed and preempted
// again, and none finished). Admission now projects growth: the groups run one after another
// (each certain to run to max_tokens), none is preempted, and every sibling gets all its tokens.
TEST(ReplicaMemoryPressure, FiveLongGroupsSentAtOnceAllFinishWithoutPreemption) {
  // A group: 38-byte prompt (3 blocks) + 4 siblings x 120 tokens = 35 blocks; two need 70.
  LocalReplica replica("r0", /*kv_blocks=*/48);
  const uint16_t port = replica.port();
  ASSERT_NE(port, 0);
  std::vector<std::future<http::ClientResponse>> replies;
  for (int g = 0; g < 5; ++g) {
    replies.push_back(std::async(std::launch::async, [port, g] {
      http::Client client;
      const std::string body = json{
          {"model", "tiny"},
          {"prompt", "group " + std::to_string(g) + " " + std::string(30, 'a' + g)},
          {"n", 4},
          {"max_tokens", 120},
          {"ignore_eos", true},
          {"seed", g}}.dump();
      auto r = client.request("127.0.0.1", port, "POST", "/v1/completions", body,
                              {{"content-type", "application/json"}}, 120s);
      return r.ok() ? *r : http::ClientResponse{};
    }));
  }
  for (auto& f : replies) {
    const http::ClientResponse r = f.get();
    ASSERT_EQ(r.status, 200) << r.body;
    const json j = json::parse(r.body);
    ASSERT_EQ(j["choices"].size(), 4u);
    for (const json& c : j["choices"])
      EXPECT_EQ(c["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 480);
  }
  http::Client client;
  auto load = client.request("127.0.0.1", port, "GET", "/v1/load", "", {}, 10s);
  ASSERT_TRUE(load.ok());
  EXPECT_EQ(json::parse(load->body)["preemptions"], 0) << load->body;
}

}  // namespace
}  // namespace kvc
