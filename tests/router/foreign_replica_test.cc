// The router in front of engines that are not kvcascade: stand-ins that answer like
// vLLM, SGLang and plain OpenAI servers (bench/fake_engine.h says which versions), and a mixed
// fleet with a real kvcascade replica. Real sockets on 127.0.0.1, port 0; every wait is a poll
// with a deadline.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/fake_engine.h"
#include "http/client.h"
#include "replica/server/local_replica.h"
#include "router/router_stack.h"

namespace kvc {
namespace {

using bench::FakeEngine;
using bench::FakeEngineOptions;
using bench::FakeLoad;
using json = nlohmann::json;
using namespace std::chrono_literals;

// Polls `done` every 10 ms until it holds or `limit` passed.
bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit = 20s) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

std::string shared_prefix(const std::string& tag, size_t bytes = 2048) {
  std::string s = tag + ": you are a careful assistant. ";
  while (s.size() < bytes)
    s += "Answer " + tag + "'s questions with sources, briefly and precisely. ";
  return s.substr(0, bytes);
}

class ForeignFleet : public ::testing::Test {
 protected:
  FakeEngine& add_engine(FakeEngineOptions o) {
    o.record_bodies = true;
    engines_.push_back(std::make_unique<FakeEngine>(std::move(o)));
    EXPECT_TRUE(engines_.back()->start().ok());
    return *engines_.back();
  }
  FakeEngine& add_engine(ReplicaKind kind, std::vector<std::string> models = {"llama"}) {
    FakeEngineOptions o;
    o.kind = kind;
    o.id = "e" + std::to_string(engines_.size());
    o.models = std::move(models);
    return add_engine(std::move(o));
  }
  // Starts the router in front of the engines (and `extra` addresses); waits until every
  // replica is healthy.
  void start(std::function<void(RouterStackConfig&)> configure = {},
             std::vector<std::string> extra = {}) {
    RouterStackConfig c;
    for (auto& e : engines_)
      c.replicas.push_back("http://" + e->address());
    for (auto& a : extra)
      c.replicas.push_back(a);
    c.pool.poll_interval = 50ms;
    c.router.debug_headers = true;
    if (configure) configure(c);
    const size_t n = c.replicas.size();
    stack_ = std::make_unique<RouterStack>(std::move(c));
    auto port = stack_->start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.error().message;
    port_ = *port;
    ASSERT_TRUE(eventually([&] { return healthy() == n; })) << state().dump(1);
  }
  void TearDown() override {
    if (stack_) stack_->stop();
    stack_.reset();
    engines_.clear();
  }
  size_t healthy() {
    const auto s = stack_->pool().snapshot();
    return std::count_if(s.begin(), s.end(), [](auto& r) { return r.healthy; });
  }
  ReplicaView view_of(const FakeEngine& e) {
    for (const ReplicaView& r : stack_->pool().snapshot())
      if (r.port == e.port()) return r;
    ADD_FAILURE() << "no replica on port " << e.port();
    return {};
  }
  json state() {
    auto r = http::Client().request("127.0.0.1", port_, "GET", "/router/state", "", {}, 10s);
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }
  http::ClientResponse post(const json& body, const http::Headers& extra = {},
                            const std::string& path = "/v1/completions") {
    http::Headers h{{"content-type", "application/json"}};
    h.insert(h.end(), extra.begin(), extra.end());
    auto r = client_.request("127.0.0.1", port_, "POST", path, body.dump(), h, 60s);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? *r : http::ClientResponse{};
  }
  // The engine that served a response (the router names a foreign replica by its address).
  FakeEngine* served(const http::ClientResponse& r) {
    const std::string id = r.header("x-kvcascade-replica").value_or("?");
    for (auto& e : engines_)
      if (id == e->address()) return e.get();
    return nullptr;
  }

  std::vector<std::unique_ptr<FakeEngine>> engines_;
  std::unique_ptr<RouterStack> stack_;
  http::Client client_;
  uint16_t port_ = 0;
};

// Each kind is detected, routed by prefix through the router's approximate index (the second
// request with a shared 2 KB prefix lands where the first went), and its answers pass through
// unchanged.
class EveryKind : public ForeignFleet, public ::testing::WithParamInterface<FakeEngineOptions> {};

TEST_P(EveryKind, SharedPrefixLandsOnTheSameReplica) {
  for (int i = 0; i < 3; ++i) {
    FakeEngineOptions o = GetParam();
    o.id = "e" + std::to_string(i);
    add_engine(o);
  }
  start();
  for (const ReplicaView& r : stack_->pool().snapshot()) {
    EXPECT_EQ(r.kind, GetParam().kind);
    EXPECT_FALSE(r.exact);
    EXPECT_EQ(r.models, std::vector<std::string>{"llama"});
    // vLLM and SGLang report a load; a plain OpenAI server has none.
    EXPECT_EQ(r.load_reported, GetParam().kind != ReplicaKind::kOpenai) << r.load_error;
  }
  for (const std::string tenant : {"acme", "globex", "initech"}) {
    const std::string prefix = shared_prefix(tenant);
    const auto first = post({{"model", "llama"}, {"prompt", prefix + " Q1?"}, {"max_tokens", 4}});
    ASSERT_EQ(first.status, 200) << first.body;
    const auto second =
        post({{"model", "llama"}, {"prompt", prefix + " Q2, longer?"}, {"max_tokens", 4}});
    ASSERT_EQ(second.status, 200) << second.body;
    ASSERT_NE(served(first), nullptr);
    EXPECT_EQ(served(first), served(second)) << tenant;
    EXPECT_EQ(second.header("x-kvcascade-route-reason"), "prefix_match");
    EXPECT_GE(std::stoul(second.header("x-kvcascade-matched-bytes").value_or("0")), 2032u);
    // The engine's answer, foreign usage fields included, reaches the client unchanged.
    const json body = json::parse(second.body);
    EXPECT_TRUE(body["usage"]["prompt_tokens_details"].is_null()) << second.body;
    EXPECT_GT(body["usage"]["prompt_tokens"].get<int>(), 500);
    // And the request reached the engine unchanged.
    EXPECT_EQ(json::parse(served(second)->request_bodies().back())["prompt"],
              prefix + " Q2, longer?");
  }
  const json s = state();
  for (const json& r : s["replicas"])
    EXPECT_EQ(r["kind"], replica_kind_name(GetParam().kind)) << s.dump(1);
}

FakeEngineOptions kind(ReplicaKind k, bool legacy = false, bool sglang_metrics = false) {
  FakeEngineOptions o;
  o.kind = k;
  o.models = {"llama"};
  o.legacy_metric_names = legacy;
  o.sglang_metrics = sglang_metrics;
  return o;
}

INSTANTIATE_TEST_SUITE_P(
    Kinds, EveryKind,
    ::testing::Values(kind(ReplicaKind::kVllm), kind(ReplicaKind::kVllm, /*legacy=*/true),
                      kind(ReplicaKind::kSglang),
                      kind(ReplicaKind::kSglang, false, /*sglang_metrics=*/true),
                      kind(ReplicaKind::kOpenai)),
    [](const auto& info) {
      return std::string(replica_kind_name(info.param.kind)) +
             (info.param.legacy_metric_names ? "LegacyMetrics" : "") +
             (info.param.sglang_metrics ? "Metrics" : "");
    });

TEST_F(ForeignFleet, LongQueueInTheMetricsSendsWorkElsewhere) {
  FakeEngine& a = add_engine(ReplicaKind::kVllm);
  FakeEngine& b = add_engine(ReplicaKind::kVllm);
  start();
  // A prefix lands somewhere; that engine then reports a long queue.
  const std::string prefix = shared_prefix("busy");
  const auto first = post({{"model", "llama"}, {"prompt", prefix + " first"}, {"max_tokens", 1}});
  ASSERT_EQ(first.status, 200);
  FakeEngine* busy = served(first);
  ASSERT_NE(busy, nullptr);
  FakeEngine* idle = busy == &a ? &b : &a;
  busy->set_load({/*running=*/64, /*waiting=*/200, /*kv_usage=*/0.97});
  ASSERT_TRUE(eventually([&] { return view_of(*busy).waiting_sequences == 200; }));
  EXPECT_EQ(view_of(*busy).kv_usage, 0.97);
  // New prompts, and even the busy engine's own prefix, go to the idle one.
  const auto again = post({{"model", "llama"}, {"prompt", prefix + " again"}, {"max_tokens", 1}});
  EXPECT_EQ(served(again), idle) << again.header("x-kvcascade-route-reason").value_or("?");
  for (int i = 0; i < 10; ++i) {
    const auto r =
        post({{"model", "llama"},
              {"prompt", std::to_string(i) + " " + shared_prefix("cold" + std::to_string(i))},
              {"max_tokens", 1}});
    EXPECT_EQ(served(r), idle) << i;
  }
  // The queue drains: cold prompts spread over both again.
  busy->set_load({});
  ASSERT_TRUE(eventually([&] { return view_of(*busy).waiting_sequences == 0; }));
  std::set<FakeEngine*> used;
  for (int i = 0; i < 20; ++i) {
    used.insert(served(post({{"model", "llama"},
                             {"prompt", std::to_string(i) + " " + shared_prefix("warm")},
                             {"max_tokens", 1}})));
  }
  EXPECT_EQ(used.size(), 2u);
}

// An engine whose KV cache is nearly full (vllm:kv_cache_usage_perc), with no queue yet, loses
// even its own prefix to one with room: new work there would wait for memory.
TEST_F(ForeignFleet, KvCacheNearlyFullSendsWorkElsewhere) {
  FakeEngine& a = add_engine(ReplicaKind::kVllm);
  FakeEngine& b = add_engine(ReplicaKind::kVllm);
  start();
  const std::string prefix = shared_prefix("full");
  const auto first = post({{"model", "llama"}, {"prompt", prefix + " first"}, {"max_tokens", 1}});
  ASSERT_EQ(first.status, 200);
  FakeEngine* full = served(first);
  ASSERT_NE(full, nullptr);
  FakeEngine* roomy = full == &a ? &b : &a;
  // Ordinary usage: the holder keeps its prefix.
  full->set_load({/*running=*/1, /*waiting=*/0, /*kv_usage=*/0.5});
  ASSERT_TRUE(eventually([&] { return view_of(*full).kv_usage == 0.5; }));
  EXPECT_EQ(served(post({{"model", "llama"}, {"prompt", prefix + " second"}, {"max_tokens", 1}})),
            full);
  full->set_load({/*running=*/1, /*waiting=*/0, /*kv_usage=*/0.99});
  ASSERT_TRUE(eventually([&] { return view_of(*full).kv_usage == 0.99; }));
  EXPECT_EQ(served(post({{"model", "llama"}, {"prompt", prefix + " third"}, {"max_tokens", 1}})),
            roomy);
}

TEST_F(ForeignFleet, GarbageOrHugeMetricsNeverBreakTheRouter) {
  FakeEngine& garbage = add_engine(ReplicaKind::kVllm);
  FakeEngine& huge = add_engine(ReplicaKind::kVllm);
  start([](RouterStackConfig& c) { c.pool.max_probe_body_bytes = 1 << 20; });
  ASSERT_TRUE(eventually([&] { return view_of(garbage).load_reported; }));
  garbage.set_metrics_body(
      "<html>\x01\xff vllm:num_requests_running{a=\"\\\"} NaN\n"
      "vllm:num_requests_running{model_name=\"m} 3\n# only a comment\nvllm:num_requests_waiting "
      "4\n");
  std::string big = "# TYPE vllm:num_requests_running gauge\n";
  while (big.size() < (size_t{10} << 20))
    big +=
        "vllm:num_requests_waiting{model_name=\"padding\",x=\"" + std::string(200, 'x') + "\"} 1\n";
  huge.set_metrics_body(big);
  ASSERT_TRUE(
      eventually([&] { return !view_of(garbage).load_reported && !view_of(huge).load_reported; }));
  // Still healthy (their /health answers), routed on the router's own counts, errors explained.
  EXPECT_EQ(healthy(), 2u);
  EXPECT_NE(view_of(garbage).load_error.find("vllm:num_requests_running"), std::string::npos)
      << view_of(garbage).load_error;
  EXPECT_NE(view_of(huge).load_error.find("larger than"), std::string::npos)
      << view_of(huge).load_error;
  for (int i = 0; i < 6; ++i) {
    const auto r = post({{"model", "llama"}, {"prompt", "question " + std::to_string(i)}});
    EXPECT_EQ(r.status, 200) << r.body;
  }
  const json s = state();
  ASSERT_TRUE(s.contains("replicas")) << s.dump();
  for (const json& r : s["replicas"])
    EXPECT_TRUE(r["load"].contains("error")) << r.dump();
  // Polls keep their pace: the load comes back as soon as the metrics do.
  garbage.set_metrics_body(std::nullopt);
  huge.set_metrics_body(std::nullopt);
  EXPECT_TRUE(
      eventually([&] { return view_of(garbage).load_reported && view_of(huge).load_reported; }));
}

TEST_F(ForeignFleet, ReplicaThatDiesAndReturnsIsDetectedAgain) {
  FakeEngine& a = add_engine(ReplicaKind::kSglang);
  FakeEngine& b = add_engine(ReplicaKind::kSglang);
  start();
  const std::string prefix = shared_prefix("phoenix");
  const auto first = post({{"model", "llama"}, {"prompt", prefix + " 1"}, {"max_tokens", 1}});
  FakeEngine* holder = served(first);
  ASSERT_NE(holder, nullptr);
  FakeEngine* other = holder == &a ? &b : &a;
  holder->stop();
  // Served by the other one at once (retried before the first byte, or routed there).
  for (int i = 0; i < 4; ++i) {
    const auto r = post({{"model", "llama"}, {"prompt", prefix + " " + std::to_string(i)}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(served(r), other);
  }
  ASSERT_TRUE(eventually([&] { return !view_of(*holder).healthy; }));
  // It left the approximate index (a restarted engine has an empty cache).
  EXPECT_EQ(state()["replicas"][holder == &a ? 0 : 1]["approx_blocks"], 0) << state().dump(1);
  // It comes back on the same port (restarted, its cache empty): healthy and detected again.
  ASSERT_TRUE(holder->start().ok());
  ASSERT_TRUE(eventually([&] { return view_of(*holder).healthy; }));
  EXPECT_EQ(view_of(*holder).kind, ReplicaKind::kSglang);
  // It takes traffic again: a routing key that maps to it.
  bool reached = false;
  for (int k = 0; k < 64 && !reached; ++k) {
    const auto r = post({{"model", "llama"}, {"prompt", "hi"}},
                        {{"x-kvcascade-routing-key", "k" + std::to_string(k)}});
    ASSERT_EQ(r.status, 200);
    reached = served(r) == holder;
  }
  EXPECT_TRUE(reached);
}

TEST_F(ForeignFleet, MixedFleetWithAKvcascadeReplica) {
  LocalReplica local("kvc0");
  FakeEngine& vllm = add_engine(ReplicaKind::kVllm, {"tiny", "other"});
  start({}, {local.address()});
  ASSERT_TRUE(eventually([&] {
    const auto s = stack_->pool().snapshot();
    return std::any_of(s.begin(), s.end(), [](auto& r) { return r.exact; });
  }));
  for (const ReplicaView& r : stack_->pool().snapshot()) {
    if (r.port == vllm.port()) {
      EXPECT_EQ(r.kind, ReplicaKind::kVllm);
      EXPECT_FALSE(r.exact);
      EXPECT_EQ(r.models, (std::vector<std::string>{"tiny", "other"}));
    } else {
      EXPECT_EQ(r.kind, ReplicaKind::kKvcascade);
      EXPECT_EQ(r.replica_id, "kvc0");
      EXPECT_TRUE(r.exact);
    }
  }
  // A model only the vLLM engine serves goes there, with what only vLLM accepts (token ids of a
  // real tokenizer, logprobs).
  const auto other = post({{"model", "other"}, {"prompt", {128000, 9906, 1917}}, {"logprobs", 1}});
  ASSERT_EQ(other.status, 200) << other.body;
  EXPECT_EQ(served(other), &vllm);
  // The shared model: prefix affinity holds whichever replica a prefix lands on, with the exact
  // index for the kvcascade replica and the approximate one for vLLM.
  ReplicaView kvc0;
  for (const ReplicaView& r : stack_->pool().snapshot())
    if (r.replica_id == "kvc0") kvc0 = r;
  std::set<std::string> where;
  for (int t = 0; t < 12; ++t) {
    const std::string prefix =
        std::to_string(t) + " " + shared_prefix("mixed" + std::to_string(t), 512);
    const auto a = post({{"model", "tiny"}, {"prompt", prefix + " a"}, {"max_tokens", 1}});
    ASSERT_EQ(a.status, 200) << a.body;
    const std::string replica = a.header("x-kvcascade-replica").value_or("?");
    where.insert(replica);
    if (replica == "kvc0") {  // its KV events, not the router's guess, bring the prefix
      const auto hashes = hash_blocks(chain_seed(kvc0.hash_model), prefix, kvc0.block_size);
      ASSERT_TRUE(eventually([&] {
        std::lock_guard lock(stack_->indexes().mu);
        return stack_->indexes().exact.match(hashes).blocks_for(kvc0.index) == hashes.size();
      }));
    }
    const auto b = post({{"model", "tiny"}, {"prompt", prefix + " b"}, {"max_tokens", 1}});
    ASSERT_EQ(b.status, 200) << b.body;
    EXPECT_EQ(b.header("x-kvcascade-replica"), replica) << t;
    EXPECT_EQ(b.header("x-kvcascade-route-reason"), "prefix_match") << t;
  }
  EXPECT_EQ(where.size(), 2u);  // cold prefixes spread over both kinds
  // /v1/models lists the union.
  const json models = json::parse(
      http::Client().request("127.0.0.1", port_, "GET", "/v1/models", "", {}, 10s)->body);
  EXPECT_EQ(models["data"].size(), 2u);
}

TEST_F(ForeignFleet, AffinityHeaderPinsSessionsByRendezvous) {
  for (int i = 0; i < 3; ++i)
    add_engine(ReplicaKind::kOpenai);
  start();
  std::map<std::string, FakeEngine*> pinned;
  std::set<FakeEngine*> used;
  for (int k = 0; k < 12; ++k) {
    const std::string key = "rollout-" + std::to_string(k);
    for (int turn = 0; turn < 3; ++turn) {
      // Different prompts each turn: only the key keeps them together. SGLang gateway's header
      // name is accepted too and hashes alike.
      const char* header = turn == 1 ? "X-SMG-Routing-Key" : "x-kvcascade-routing-key";
      const auto r =
          post({{"model", "llama"}, {"prompt", "turn " + std::to_string(turn) + " of " + key}},
               {{header, key}});
      ASSERT_EQ(r.status, 200);
      EXPECT_EQ(r.header("x-kvcascade-route-reason"), "routing_key");
      if (turn == 0) pinned[key] = served(r);
      EXPECT_EQ(served(r), pinned[key]) << key << " turn " << turn;
    }
    used.insert(pinned[key]);
  }
  EXPECT_GE(used.size(), 2u);
  // Streaming through the pinned replica passes the SSE stream through unchanged.
  const json req = {
      {"model", "llama"}, {"prompt", "stream me"}, {"stream", true}, {"max_tokens", 3}};
  const auto streamed = post(req, {{"x-kvcascade-routing-key", "rollout-0"}});
  ASSERT_EQ(streamed.status, 200);
  auto direct =
      http::Client().request("127.0.0.1", pinned["rollout-0"]->port(), "POST", "/v1/completions",
                             req.dump(), {{"content-type", "application/json"}}, 10s);
  ASSERT_TRUE(direct.ok());
  const std::regex id("\"id\":\"[^\"]*\"");
  EXPECT_EQ(std::regex_replace(streamed.body, id, ""), std::regex_replace(direct->body, id, ""));
  EXPECT_NE(streamed.body.find("data: [DONE]"), std::string::npos);
}

// Retries, the circuit breaker and the router's metrics treat foreign replicas like its own.
TEST_F(ForeignFleet, RetriesBreakerAndMetricsWorkTheSameForForeignReplicas) {
  FakeEngine& a = add_engine(ReplicaKind::kVllm);
  FakeEngine& b = add_engine(ReplicaKind::kVllm);
  start([](RouterStackConfig& c) { c.router.policy = "round_robin"; });
  a.set_completion_status(503);  // healthy to the polls, failing every completion
  for (int i = 0; i < 6; ++i) {
    const auto r = post({{"model", "llama"}, {"prompt", "x" + std::to_string(i)}});
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(served(r), &b);
  }
  EXPECT_GE(stack_->server().stats().retries(), 1);
  // Three failures in a row opened a's breaker: it left routing until a poll brings it back.
  EXPECT_GE(a.completions(), 1);
  EXPECT_LE(a.completions(), 3);
  auto metrics = http::Client().request("127.0.0.1", port_, "GET", "/metrics", "", {}, 10s);
  ASSERT_TRUE(metrics.ok());
  EXPECT_NE(metrics->body.find("kvcascade_router_requests_total{"), std::string::npos);
  // Counted (the series exists at 0 from the start for every replica and kind).
  const std::string series =
      "kvcascade_router_upstream_errors_total{kind=\"status\",replica=\"" + a.address() + "\"} ";
  const size_t at = metrics->body.find(series);
  ASSERT_NE(at, std::string::npos) << metrics->body.substr(0, 3000);
  EXPECT_GE(std::stod(metrics->body.substr(at + series.size())), 1.0) << series;
}

}  // namespace
}  // namespace kvc
