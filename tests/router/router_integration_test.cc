// Router + 3 tiny CPU replicas, all on 127.0.0.1 with real sockets.
#include <chrono>
#include <functional>
#include <future>
#include <regex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "http/server.h"
#include "replica/server/local_replica.h"
#include "router/fleet/replica_pool.h"
#include "router/proxy.h"
#include "router/router_stack.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class RouterTest : public ::testing::Test {
 protected:
  using Configure = std::function<void(RouterConfig&, PoolConfig&)>;
  void start_with_blocks(int32_t blocks) { start("kvcascade", {}, blocks); }
  void start(const std::string& policy = "kvcascade", std::optional<std::string> key = {},
             int32_t blocks = 256) {
    start_with(
        [&](RouterConfig& rc, PoolConfig&) {
          rc.policy = policy;
          if (key) rc.api_keys = {*key};
        },
        {}, blocks);
  }
  // configure: adjusts the router's and the pool's config; replica_keys: the replicas' API keys;
  // wait_healthy: wait until every replica is healthy and subscribed.
  void start_with(const Configure& configure, std::vector<std::string> replica_keys = {},
                  int32_t blocks = 256, bool wait_healthy = true) {
    for (int i = 0; i < 3; ++i) {
      replicas_.push_back(std::make_unique<LocalReplica>(
          "r" + std::to_string(i), blocks, "127.0.0.1", http::ServerLimits{}, replica_keys));
    }
    RadixIndexConfig ac;
    ac.ttl = std::chrono::seconds(600);
    indexes_ = std::make_unique<FleetIndexes>(clock_, ac);
    http::ClientLimits cl;
    cl.body_idle_timeout = std::chrono::hours(1);
    cl.response_header_timeout = std::chrono::minutes(10);  // as RouterStack: whole generations
    client_ = std::make_unique<http::Client>(cl);
    PoolConfig pc;
    pc.poll_interval = 100ms;
    RouterConfig rc;
    configure(rc, pc);
    pool_ = std::make_unique<ReplicaPool>(*client_, *indexes_, clock_, pc);
    for (auto& r : replicas_)
      ASSERT_TRUE(pool_->add(r->address()).ok());
    pool_->poll_now();
    pool_->start();
    router_ = std::make_unique<RouterServer>(*pool_, *indexes_, *client_, clock_, rc);
    http_ = std::make_unique<http::Server>(
        http::ServerLimits{}, [this](http::Request r, std::shared_ptr<http::Responder> w) {
          router_->handle(std::move(r), std::move(w));
        });
    auto port = http_->listen("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    port_ = *port;
    if (!wait_healthy) return;
    // Wait (bounded) for every replica to be healthy and subscribed.
    for (int i = 0; i < 100 && !all_exact(); ++i)
      std::this_thread::sleep_for(50ms);
    ASSERT_TRUE(all_exact());
  }
  void TearDown() override {
    if (http_) http_->stop();
    router_.reset();
    pool_.reset();
    replicas_.clear();
  }
  bool all_exact() {
    auto s = pool_->snapshot();
    return s.size() == 3 &&
           std::all_of(s.begin(), s.end(), [](auto& r) { return r.healthy && r.exact; });
  }
  http::ClientResponse post(const json& body, const http::Headers& extra = {}) {
    http::ClientLimits limits;
    limits.response_header_timeout = std::chrono::minutes(5);  // loaded CI machines are slow
    http::Client c(limits);
    http::Headers h{{"content-type", "application/json"}};
    h.insert(h.end(), extra.begin(), extra.end());
    auto r = c.request("127.0.0.1", port_, "POST", "/v1/completions", body.dump(), h, 300s);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? *r : http::ClientResponse{};
  }
  std::string replica_of(const http::ClientResponse& r) {
    return r.header("x-kvcascade-replica").value_or("?");
  }
  // Waits until the router's index holds `blocks` blocks of some replica (bounded).
  void wait_for_index(size_t blocks) {
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard lock(indexes_->mu);
        for (uint32_t r = 0; r < 3; ++r)
          if (indexes_->exact.num_blocks(r) >= blocks) return;
      }
      std::this_thread::sleep_for(20ms);
    }
    FAIL() << "index never reached " << blocks << " blocks";
  }

  SteadyClock& clock_ = SteadyClock::instance();
  std::vector<std::unique_ptr<LocalReplica>> replicas_;
  std::unique_ptr<FleetIndexes> indexes_;
  std::unique_ptr<http::Client> client_;
  std::unique_ptr<ReplicaPool> pool_;
  prometheus::Registry registry_;
  std::unique_ptr<metrics::RouterMetrics> router_metrics_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<http::Server> http_;
  uint16_t port_ = 0;
};

std::string long_prompt(const std::string& tenant) {
  std::string s = "System prompt of tenant " + tenant + ". ";
  while (s.size() < 600)
    s += "Rules for " + tenant + ": be precise, cite, and be brief. ";
  return s;
}

TEST_F(RouterTest, SharedPrefixGoesToTheReplicaThatHoldsIt) {
  start_with([](RouterConfig& rc, PoolConfig&) { rc.debug_headers = true; });
  const std::string base = long_prompt("acme");
  const auto first = post({{"model", "tiny"}, {"prompt", base + "Q1?"}, {"max_tokens", 2}});
  ASSERT_EQ(first.status, 200) << first.body;
  wait_for_index(base.size() / 16);
  const auto second =
      post({{"model", "tiny"}, {"prompt", base + "Q2, longer?"}, {"max_tokens", 2}});
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(replica_of(first), replica_of(second));
  EXPECT_EQ(second.header("x-kvcascade-route-reason"), "prefix_match");
  EXPECT_GE(std::stoul(second.header("x-kvcascade-matched-bytes").value_or("0")), 576u);
  const json body = json::parse(second.body);
  EXPECT_GE(body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 576);
}

TEST_F(RouterTest, SiblingBurstsStayTogetherAndTenantsSpread) {
  start();
  // A GRPO-style burst: 8 identical requests at once.
  std::vector<std::future<http::ClientResponse>> burst;
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("grpo")}, {"max_tokens", 3}};
  for (int i = 0; i < 8; ++i)
    burst.push_back(std::async(std::launch::async, [&] { return post(req); }));
  std::set<std::string> where;
  for (auto& f : burst)
    where.insert(replica_of(f.get()));
  EXPECT_EQ(where.size(), 1u);
  // One n=8 request is one unit on one replica.
  const auto n8 =
      post({{"model", "tiny"}, {"prompt", long_prompt("n8")}, {"n", 8}, {"max_tokens", 2}});
  EXPECT_EQ(json::parse(n8.body)["choices"].size(), 8u);
  // Different tenants (cold prefixes) spread over the replicas.
  std::set<std::string> tenants;
  for (int t = 0; t < 12; ++t) {
    tenants.insert(replica_of(post(
        {{"model", "tiny"}, {"prompt", long_prompt("t" + std::to_string(t))}, {"max_tokens", 1}})));
  }
  EXPECT_GE(tenants.size(), 2u);
}

// Through the router: eight requests sharing a `group` id (group_size 8) land on one
// replica and are one group there (the prompt computed once: seven of eight report it cached).
TEST_F(RouterTest, RequestsSharingAGroupIdAreOneGroupOnOneReplica) {
  start();
  const std::string prompt = long_prompt("rl");
  std::vector<std::future<http::ClientResponse>> replies;
  for (int i = 0; i < 8; ++i) {
    const json req = {{"model", "tiny"}, {"prompt", prompt},  {"max_tokens", 4},
                      {"seed", i},       {"group", "step-3"}, {"group_size", 8}};
    replies.push_back(std::async(std::launch::async, [this, req] { return post(req); }));
  }
  std::set<std::string> where;
  int cached_whole = 0;
  for (auto& f : replies) {
    const http::ClientResponse r = f.get();
    ASSERT_EQ(r.status, 200) << r.body;
    where.insert(replica_of(r));
    cached_whole +=
        json::parse(r.body)["usage"]["prompt_tokens_details"]["cached_tokens"] == prompt.size();
  }
  EXPECT_EQ(where.size(), 1u);
  EXPECT_EQ(cached_whole, 7);
}

// A batch of prompts in one request is one exchange with one replica (its response indexes the
// choices of every prompt), so the router places it by its first prompt; the replica then holds
// every prompt of the batch, and the index learns all of them from its KV events: a later
// request for the batch's second prompt follows it there.
TEST_F(RouterTest, BatchOfPromptsIsPlacedWholeAndEveryPromptIsIndexed) {
  start_with([](RouterConfig& rc, PoolConfig&) { rc.debug_headers = true; });
  const std::string a = long_prompt("batch-a"), b = long_prompt("batch-b");
  const auto batch = post({{"model", "tiny"}, {"prompt", {a, b}}, {"max_tokens", 1}});
  ASSERT_EQ(batch.status, 200) << batch.body;
  EXPECT_EQ(json::parse(batch.body)["choices"].size(), 2u);
  wait_for_index(2 * (a.size() / 16) - 2);  // the two share their first blocks
  const auto second = post({{"model", "tiny"}, {"prompt", b + "follow-up"}, {"max_tokens", 1}});
  ASSERT_EQ(second.status, 200);
  EXPECT_EQ(replica_of(second), replica_of(batch));
  EXPECT_EQ(second.header("x-kvcascade-route-reason"), "prefix_match");
}

// Removes what differs between two generations of the same text: ids and timestamps.
std::string normalise(std::string s) {
  s = std::regex_replace(s, std::regex("\"id\":\"[^\"]*\""), "\"id\":\"\"");
  return std::regex_replace(s, std::regex("\"created\":[0-9]+"), "\"created\":0");
}

TEST_F(RouterTest, StreamingThroughTheRouterIsByteIdentical) {
  start();
  const json req = {{"model", "tiny"},  {"prompt", long_prompt("stream")},
                    {"max_tokens", 12}, {"seed", 5},
                    {"stream", true},   {"ignore_eos", true}};
  const auto routed = post(req);
  ASSERT_EQ(routed.status, 200);
  const std::string id = replica_of(routed);
  const int which = id.back() - '0';
  http::Client direct;
  auto r = direct.request("127.0.0.1", replicas_[which]->port(), "POST", "/v1/completions",
                          req.dump(), {{"content-type", "application/json"}}, 60s);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(normalise(routed.body), normalise(r->body));
  EXPECT_NE(routed.body.find("data: [DONE]"), std::string::npos);
}

TEST_F(RouterTest, DeadReplicaIsRetriedBeforeTheFirstByte) {
  start();
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("dies")}, {"max_tokens", 2}};
  const auto first = post(req);
  const int which = replica_of(first).back() - '0';
  wait_for_index(30);
  replicas_[which]->stop();  // its prefix is still in the index: the router will try it first
  for (int i = 0; i < 5; ++i) {
    const auto again = post(req);
    ASSERT_EQ(again.status, 200) << again.body;
    EXPECT_NE(replica_of(again), "r" + std::to_string(which));
  }
  json state =
      json::parse(http::Client().request("127.0.0.1", port_, "GET", "/router/state")->body);
  EXPECT_GE(state["requests"].get<int>(), 6);
  // Every try's pending prefill was handed back: by its answer, or by its failure.
  for (const json& r : state["replicas"]) {
    EXPECT_EQ(r["load"]["pending_prefill_tokens"], 0) << r.dump();
    EXPECT_EQ(r["load"]["in_flight_prompt_bytes"], 0) << r.dump();
    // A replica marked down shows its last load as stale (the audit read it as current).
    EXPECT_EQ(r["load"].value("stale", false), !r["healthy"].get<bool>()) << r.dump();
  }
}

// The stack runs on the clock it is given: identical prompts are a sibling burst while the
// tracker's window (2 s) lasts on that clock, and are not once it has passed there, however
// little real time went by.
// Every response the router sends is counted by status class: its own refusals (a bad n), the
// replicas' answers it relays (a prompt token the replica refuses) and successes (the second
// audit found the replicas' 400s counted as routed requests and nowhere else).
TEST(RouterStackTest, ResponsesAreCountedByStatusClass) {
  LocalReplica a("a");
  RouterStackConfig c;
  c.replicas = {a.address()};
  c.pool.poll_interval = 50ms;
  RouterStack stack(c);
  auto port = stack.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  for (int i = 0; i < 200; ++i) {
    auto s = stack.pool().snapshot();
    if (!s.empty() && s[0].healthy && s[0].exact) break;
    std::this_thread::sleep_for(25ms);
  }
  http::Client client;
  auto post = [&](const json& body) {
    auto r = client.request("127.0.0.1", *port, "POST", "/v1/completions", body.dump(),
                            {{"content-type", "application/json"}}, 60s);
    return r.ok() ? r->status : 0;
  };
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "counted"}, {"max_tokens", 1}}), 200);
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "x"}, {"n", 0}}), 400);                  // router
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", {104, 300}}, {"max_tokens", 1}}), 400);  // replica
  const std::string m = client.request("127.0.0.1", *port, "GET", "/metrics")->body;
  auto value = [&](const std::string& series) {
    const size_t at = m.find(series + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + series.size() + 1));
  };
  EXPECT_GE(value("kvcascade_router_responses_total{code=\"2xx\"}"), 1) << m;
  EXPECT_EQ(value("kvcascade_router_responses_total{code=\"4xx\"}"), 2) << m;
  EXPECT_EQ(value("kvcascade_router_responses_total{code=\"5xx\"}"), 0) << m;
  stack.stop();
}

TEST(RouterStackTest, SiblingWindowRunsOnTheInjectedClock) {
  testing::FakeClock clock;
  LocalReplica a("a"), b("b");
  RouterStackConfig c;
  c.replicas = {a.address(), b.address()};
  c.pool.poll_interval = 100ms;
  RouterStack stack(c, clock);
  auto port = stack.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.error().message;
  for (int i = 0; i < 100; ++i) {
    auto s = stack.pool().snapshot();
    if (std::count_if(s.begin(), s.end(), [](auto& r) { return r.healthy && r.exact; }) == 2) break;
    std::this_thread::sleep_for(50ms);
  }
  http::Client client;
  auto reason = [&] {
    const json req = {{"model", "tiny"}, {"prompt", "a burst of siblings"}, {"max_tokens", 1}};
    auto r = client.request("127.0.0.1", *port, "POST", "/v1/completions", req.dump(),
                            {{"content-type", "application/json"}}, 120s);
    EXPECT_TRUE(r.ok() && r->status == 200) << (r.ok() ? r->body : r.error().message);
    return r.ok() ? r->header("x-kvcascade-route-reason").value_or("?") : std::string("?");
  };
  EXPECT_NE(reason(), "sibling_pinned");  // the first of the burst
  EXPECT_EQ(reason(), "sibling_pinned");  // within the window: the fake clock has not moved
  clock.advance(10s);
  EXPECT_NE(reason(), "sibling_pinned");  // the window has passed on the stack's clock
  stack.stop();
}

// A replica that sends the headers and part of a non-streaming reply, then drops the connection:
// the router buffers non-streaming replies, so nothing reached the client yet and the request is
// retried on the healthy replica; the client gets one whole 200.
TEST(RouterStackTest, ReplicaFailingMidBodyIsRetried) {
  std::atomic<int> broken_completions{0};
  std::mutex mu;
  std::vector<std::thread> droppers;  // drop a half-sent reply once its bytes are on the wire
  http::Server broken(
      http::ServerLimits{}, [&](http::Request r, std::shared_ptr<http::Responder> w) {
        const std::string path = r.target.substr(0, r.target.find('?'));
        if (path == "/v1/info") {
          w->send(200, "application/json",
                  json{{"replica_id", "broken"}, {"model", "tiny"}, {"block_size", 16}}.dump());
        } else if (path == "/v1/load") {
          w->send(200, "application/json", R"({"running_sequences":0})");
        } else if (path == "/v1/completions") {
          ++broken_completions;
          w->start_stream(200, "application/json");
          w->write(R"({"id":"cmpl-half","choices":[{"te)");
          std::lock_guard lock(mu);
          droppers.emplace_back([w = std::move(w)]() mutable {
            std::this_thread::sleep_for(100ms);
            w.reset();  // mid-body: the connection is closed
          });
        } else {
          w->send(404, "application/json", "{}");
        }
      });
  auto broken_port = broken.listen("127.0.0.1", 0);
  ASSERT_TRUE(broken_port.ok());
  LocalReplica healthy("good");
  RouterStackConfig c;
  c.replicas = {"127.0.0.1:" + std::to_string(*broken_port), healthy.address()};
  c.router.policy = "round_robin";
  RouterStack stack(c);
  auto port = stack.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  for (int i = 0; i < 100; ++i) {
    auto s = stack.pool().snapshot();
    if (std::count_if(s.begin(), s.end(), [](auto& r) { return r.healthy; }) == 2) break;
    std::this_thread::sleep_for(50ms);
  }
  http::Client client;
  for (int i = 0; i < 4; ++i) {
    const json req = {
        {"model", "tiny"}, {"prompt", "mid-body " + std::to_string(i)}, {"max_tokens", 2}};
    auto r = client.request("127.0.0.1", *port, "POST", "/v1/completions", req.dump(),
                            {{"content-type", "application/json"}}, 120s);
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "good");
    const json body = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(body.is_discarded()) << r->body;  // whole, not the broken replica's half
    EXPECT_EQ(body["choices"].size(), 1u);
  }
  EXPECT_GE(broken_completions.load(), 1);  // round robin sent it requests, which were retried
  EXPECT_GE(stack.server().stats().retries(), broken_completions.load());
  stack.stop();
  {
    std::lock_guard lock(mu);
    for (std::thread& t : droppers)
      t.join();
  }
  broken.stop();
}

TEST_F(RouterTest, KillingAReplicaUnderLoadLosesNoNonStreamingRequest) {
  start();
  std::vector<std::future<http::ClientResponse>> load;
  for (int i = 0; i < 8; ++i) {
    load.push_back(std::async(std::launch::async, [&, i] {
      return post({{"model", "tiny"},
                   {"prompt", long_prompt("load" + std::to_string(i))},
                   {"max_tokens", 12},
                   {"ignore_eos", true}});
    }));
  }
  std::this_thread::sleep_for(100ms);
  replicas_[0]->stop();
  for (auto& f : load) {
    const auto r = f.get();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_NE(replica_of(r), "r0");
  }
}

TEST_F(RouterTest, ReplicaDyingMidStreamEndsWithAnErrorEvent) {
  start();
  std::promise<void> first_chunk;
  std::atomic<bool> got{false};
  std::string body;
  std::promise<Status> done;
  std::string replica;
  http::Client c;
  c.stream(
      "127.0.0.1", port_, "POST", "/v1/completions",
      json{{"model", "tiny"},
           {"prompt", long_prompt("midstream")},
           {"max_tokens", 1500},
           {"stream", true},
           {"ignore_eos", true}}
          .dump(),
      {{"content-type", "application/json"}},
      [&](int, const http::Headers& h) {
        for (auto& [k, v] : h)
          if (k == "x-kvcascade-replica") replica = v;
      },
      [&](std::string_view b) {
        body += b;
        if (!got.exchange(true)) first_chunk.set_value();
        return true;
      },
      [&](Status s) { done.set_value(s); });
  ASSERT_EQ(first_chunk.get_future().wait_for(30s), std::future_status::ready);
  replicas_[replica.back() - '0']->stop();
  ASSERT_EQ(done.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_NE(body.find("\"error\""), std::string::npos)
      << body.substr(body.size() > 300 ? body.size() - 300 : 0);
  // The router keeps serving.
  const auto after = post({{"model", "tiny"}, {"prompt", "still there?"}, {"max_tokens", 1}});
  EXPECT_EQ(after.status, 200);
}

TEST_F(RouterTest, ExactIndexFollowsEvictionsOnSmallPools) {
  start_with_blocks(64);  // a prompt is ~38 blocks: every second prompt evicts earlier ones
  for (int t = 0; t < 10; ++t) {
    const auto r = post({{"model", "tiny"},
                         {"prompt", long_prompt("evict" + std::to_string(t))},
                         {"max_tokens", 1}});
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Once the event streams are drained, the router's index holds exactly each replica's
  // prefix-cache content (bounded wait).
  bool agreed = false;
  for (int i = 0; i < 100 && !agreed; ++i) {
    std::this_thread::sleep_for(30ms);
    agreed = true;
    for (uint32_t k = 0; k < 3; ++k) {
      size_t hashed = 0;
      const BlockPool& pool = replicas_[k]->engine().pool();
      for (int32_t b = 0; b < pool.num_blocks(); ++b)
        hashed += pool.hash_of(b).has_value();
      std::lock_guard lock(indexes_->mu);
      agreed = agreed && indexes_->exact.num_blocks(k) == hashed;
    }
  }
  EXPECT_TRUE(agreed);
  std::lock_guard lock(indexes_->mu);
  size_t total = 0;
  for (uint32_t k = 0; k < 3; ++k) {
    EXPECT_LE(indexes_->exact.num_blocks(k), 64u);
    total += indexes_->exact.num_blocks(k);
  }
  EXPECT_LT(total, 10u * 36u);  // evictions happened (and were followed)
}

// A replica that restarts mid-traffic (same address, its cache empty): the router drops what the
// old process held and rebuilds the replica's index from the new one's snapshot and events, so
// once traffic stops the index holds exactly the blocks each replica's cache holds, hash by hash.
TEST_F(RouterTest, IndexConvergesToAReplicaThatRestartsMidTraffic) {
  start();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread traffic([&] {
    http::ClientLimits limits;
    limits.response_header_timeout = std::chrono::minutes(5);
    http::Client c(limits);
    for (int i = 0; !stop.load(); ++i) {
      const json body = {{"model", "tiny"},
                         {"prompt", long_prompt("restart" + std::to_string(i % 12)) + " question " +
                                        std::to_string(i)},
                         {"max_tokens", 2}};
      auto r = c.request("127.0.0.1", port_, "POST", "/v1/completions", body.dump(),
                         {{"content-type", "application/json"}}, 300s);
      (r.ok() && r->status == 200 ? ok : failed)++;
    }
  });
  auto wait_requests = [&](int n) {
    for (int i = 0; i < 3000 && ok.load() < n; ++i)
      std::this_thread::sleep_for(10ms);
  };
  wait_requests(12);
  ASSERT_TRUE(replicas_[0]->restart());
  const int at_restart = ok.load();
  wait_requests(at_restart + 24);
  stop = true;
  traffic.join();
  EXPECT_GE(ok.load(), at_restart + 24);
  EXPECT_LE(failed.load(), 2);  // at most the exchanges the restart cut (retried otherwise)
  // Converged (bounded wait): every replica's cached blocks are exactly its index entries.
  auto agree = [&](std::string* why) {
    for (uint32_t k = 0; k < 3; ++k) {
      const BlockPool& pool = replicas_[k]->engine().pool();
      size_t hashed = 0;
      std::lock_guard lock(indexes_->mu);
      for (int32_t b = 0; b < pool.num_blocks(); ++b) {
        const std::optional<BlockHash> h = pool.hash_of(b);
        if (!h) continue;
        ++hashed;
        if (!indexes_->exact.holds(k, *h)) {
          *why = "replica " + std::to_string(k) + " holds a block its index lacks";
          return false;
        }
      }
      if (indexes_->exact.num_blocks(k) != hashed) {
        *why = "replica " + std::to_string(k) + ": index " +
               std::to_string(indexes_->exact.num_blocks(k)) + " blocks, cache " +
               std::to_string(hashed);
        return false;
      }
    }
    return true;
  };
  std::string why;
  bool agreed = false;
  for (int i = 0; i < 200 && !(agreed = agree(&why)); ++i)
    std::this_thread::sleep_for(30ms);
  EXPECT_TRUE(agreed) << why;
}

TEST_F(RouterTest, BadInputAndAuth) {
  start("kvcascade", std::string("sekret"));
  const http::Headers auth{{"authorization", "Bearer sekret"}};
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "x"}}).status, 401);
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "x"}, {"n", 0}}, auth).status, 400);
  EXPECT_EQ(post({{"model", "nope"}, {"prompt", "x"}}, auth).status, 404);
  EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 1}}, auth).status, 200);
  // The scheme is case-insensitive (RFC 9110 11.1); lowercase "bearer" used to get a 401.
  for (const char* scheme : {"bearer", "BEARER", "bEaReR"}) {
    EXPECT_EQ(post({{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 1}},
                   {{"authorization", std::string(scheme) + " sekret"}})
                  .status,
              200)
        << scheme;
  }
  EXPECT_EQ(
      post({{"model", "tiny"}, {"prompt", "x"}}, {{"authorization", "Bearer sekret2"}}).status,
      401);
  http::Client c;
  EXPECT_EQ(c.request("127.0.0.1", port_, "GET", "/health")->status, 200);
  EXPECT_EQ(c.request("127.0.0.1", port_, "GET", "/nope", "", auth)->status, 404);
  // Probes need no key; HEAD is answered wherever GET is (it was 405).
  for (const char* path : {"/health", "/livez", "/readyz"}) {
    EXPECT_EQ(c.request("127.0.0.1", port_, "GET", path)->status, 200) << path;
    auto head = c.request("127.0.0.1", port_, "HEAD", path);
    ASSERT_TRUE(head.ok()) << path;
    EXPECT_EQ(head->status, 200) << path;
    EXPECT_TRUE(head->body.empty()) << path;
  }
  // OpenAI's GET /v1/models/{model}: the model a healthy replica serves, else a 404.
  auto one = c.request("127.0.0.1", port_, "GET", "/v1/models/tiny", "", auth);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->status, 200) << one->body;
  EXPECT_EQ(json::parse(one->body)["id"], "tiny");
  EXPECT_EQ(c.request("127.0.0.1", port_, "GET", "/v1/models/nope", "", auth)->status, 404);
  for (const char* path : {"/v1/models", "/metrics", "/router/state"}) {
    auto head = c.request("127.0.0.1", port_, "HEAD", path, "", auth);
    ASSERT_TRUE(head.ok()) << path;
    EXPECT_EQ(head->status, path == std::string("/metrics") ? 404 : 200) << path;  // no registry
    EXPECT_TRUE(head->body.empty()) << path;
  }
}

// /health answered 503 without a healthy replica and was the liveness probe, so a
// replica outage restarted every router pod. /livez says the process serves; /readyz (and
// /health, kept) say whether a replica can take traffic.
TEST_F(RouterTest, LivezStaysUpWhileReadyzFollowsTheReplicas) {
  start();
  http::Client c;
  auto status = [&](const char* path) {
    auto r = c.request("127.0.0.1", port_, "GET", path, "", {}, 5s);
    return r.ok() ? r->status : 0;
  };
  EXPECT_EQ(status("/livez"), 200);
  EXPECT_EQ(status("/readyz"), 200);
  EXPECT_EQ(status("/health"), 200);
  for (auto& r : replicas_)
    r->stop();
  for (int i = 0; i < 100 && status("/readyz") != 503; ++i)
    std::this_thread::sleep_for(50ms);
  EXPECT_EQ(status("/readyz"), 503);
  EXPECT_EQ(status("/health"), 503);
  EXPECT_EQ(status("/livez"), 200);
  const json body = json::parse(c.request("127.0.0.1", port_, "GET", "/readyz")->body);
  EXPECT_EQ(body.value("healthy_replicas", -1), 0);
}

// Replicas behind the router can require a key. The router sends it on proxied
// requests, /v1/info and /v1/load polls and KV-event subscriptions; without it they are unusable.
TEST_F(RouterTest, RouterSendsTheReplicaKeyEverywhere) {
  start_with(
      [](RouterConfig& rc, PoolConfig& pc) {
        rc.replica_api_key = "replica-secret";
        pc.replica_api_key = "replica-secret";
      },
      {"replica-secret"});  // waits until every replica is healthy (polls) and exact (events)
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("keyed")}, {"max_tokens", 2}};
  const auto first = post(req);
  ASSERT_EQ(first.status, 200) << first.body;
  wait_for_index(30);  // the replica's KV events reached the router's index
  const auto again = post(req);
  ASSERT_EQ(again.status, 200) << again.body;
  EXPECT_EQ(replica_of(first), replica_of(again));
  EXPECT_GT(json::parse(again.body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            0);
  // The client's own Authorization is never forwarded: only the router's key reaches replicas.
  EXPECT_EQ(post(req, {{"authorization", "Bearer client-key"}}).status, 200);
}

TEST_F(RouterTest, ReplicasWithAKeyTheRouterLacksAreNeverHealthy) {
  start_with([](RouterConfig&, PoolConfig&) {}, {"replica-secret"}, 256, /*wait_healthy=*/false);
  // A few poll rounds (bounded wait).
  const uint64_t from = pool_->num_poll_rounds();
  for (int i = 0; i < 500 && pool_->num_poll_rounds() < from + 3; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(pool_->num_poll_rounds(), from + 3);
  for (const ReplicaView& r : pool_->snapshot())
    EXPECT_FALSE(r.healthy) << r.replica_id;
  // No model known: the replicas may serve it once reached, so a 503 (clients retry it), not a
  // 404 (they do not).
  const auto r = post({{"model", "tiny"}, {"prompt", "x"}});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("not reached yet"), std::string::npos) << r.body;
}

// cached_tokens of a request sent by tenant `key` (Bearer) with an optional cache_salt.
int cached_tokens(const http::ClientResponse& r) {
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("usage")) return -1;
  return j["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>();
}

// The prefix cache was an oracle across tenants (guessing "PIN is 4711" came back
// cached). With isolation by API key, tenant B sees none of tenant A's cache, A still hits its
// own, and a client's own cache_salt splits within its tenant but never escapes it.
TEST_F(RouterTest, TenantsIsolatedByApiKeyNeverSeeEachOthersCache) {
  start_with([](RouterConfig& rc, PoolConfig&) {
    rc.api_keys = {"key-of-a", "key-of-b"};
    rc.tenant_isolation = TenantIsolation::kApiKey;
    rc.debug_headers = true;
  });
  const http::Headers a{{"authorization", "Bearer key-of-a"}};
  const http::Headers b{{"authorization", "bearer key-of-b"}};
  const std::string secret = long_prompt("shared-system") + "The PIN is 4711.";
  const json req = {{"model", "tiny"}, {"prompt", secret}, {"max_tokens", 1}};
  ASSERT_EQ(post(req, a).status, 200);
  wait_for_index(secret.size() / 16);  // every full block of it
  const auto a_again = post(req, a);
  EXPECT_GE(cached_tokens(a_again), 576) << a_again.body;  // a tenant shares with itself
  EXPECT_GE(std::stoul(a_again.header("x-kvcascade-matched-bytes").value_or("0")), 576u)
      << a_again.header("x-kvcascade-route-reason").value_or("?") << " "
      << a_again.header("x-kvcascade-matched-bytes").value_or("none");
  const auto b_guess = post(req, b);
  ASSERT_EQ(b_guess.status, 200) << b_guess.body;
  EXPECT_EQ(cached_tokens(b_guess), 0) << b_guess.body;
  EXPECT_EQ(b_guess.header("x-kvcascade-matched-bytes"), "0");
  EXPECT_NE(b_guess.header("x-kvcascade-route-reason"), "prefix_match");
  // A's own cache_salt gives a separate cache inside A's tenant; B cannot reach A's by naming it.
  json salted = req;
  salted["cache_salt"] = "experiment-1";
  EXPECT_EQ(cached_tokens(post(salted, a)), 0);
  EXPECT_EQ(cached_tokens(post(salted, b)), 0);
  EXPECT_EQ(post(req).status, 401);  // no key: no tenant
}

TEST_F(RouterTest, TenantsIsolatedByHeader) {
  start_with([](RouterConfig& rc, PoolConfig&) {
    rc.tenant_isolation = TenantIsolation::kHeader;
    rc.tenant_header = "x-tenant-id";
  });
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("hdr")}, {"max_tokens", 1}};
  ASSERT_EQ(post(req, {{"x-tenant-id", "acme"}}).status, 200);
  wait_for_index(30);
  EXPECT_GE(cached_tokens(post(req, {{"X-Tenant-Id", "acme"}})), 576);
  EXPECT_EQ(cached_tokens(post(req, {{"x-tenant-id", "globex"}})), 0);
  const auto missing = post(req);
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("x-tenant-id"), std::string::npos) << missing.body;
}

// Without isolation (the default) tenants share prefixes: the best hit rate, and the oracle the
// README's trade-off section describes.
TEST_F(RouterTest, WithoutIsolationTenantsSharePrefixes) {
  start();
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("open")}, {"max_tokens", 1}};
  ASSERT_EQ(post(req, {{"authorization", "Bearer a"}}).status, 200);
  wait_for_index(30);
  EXPECT_GE(cached_tokens(post(req, {{"authorization", "Bearer b"}})), 576);
}

// The matched-bytes header told any client how much of its prompt someone had cached. It is off
// unless asked for.
TEST_F(RouterTest, MatchedBytesHeaderIsHiddenByDefault) {
  start();
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("quiet")}, {"max_tokens", 1}};
  ASSERT_EQ(post(req).status, 200);
  wait_for_index(30);
  const auto again = post(req);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.header("x-kvcascade-matched-bytes"), std::nullopt);
  EXPECT_TRUE(again.header("x-kvcascade-replica").has_value());
}

}  // namespace
}  // namespace kvc
