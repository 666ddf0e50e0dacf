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
#include "tests/router/router_test_fixture.h"
#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::long_prompt;
using testing::RouterTest;

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
  // The policy's view of each replica for that decision (RouteDecision::detail): the chosen one
  // with its match in blocks, under the bounds.
  ASSERT_TRUE(second.header("x-kvcascade-replica").has_value());
  const std::string detail = second.header("x-kvcascade-route-detail").value_or("");
  const std::regex chosen(replica_of(second) +
                          " m=([0-9]+) w=-?[0-9]+ b=[0-9a-z]+ s=[0-9.]+ ok=1 kept=0");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(detail, m, chosen)) << detail;
  EXPECT_GE(std::stoul(m[1]) * 16, 576u) << detail;
  for (const char* r : {"r0 m=", "r1 m=", "r2 m="})
    EXPECT_NE(detail.find(r), std::string::npos) << r << " in " << detail;
  const json body = json::parse(second.body);
  EXPECT_GE(body["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 576);
}

// Two routers' pools on the same replicas: a request sent through one counts in the other's view
// of the replica it went to (the replica's KvWork announcement, on the other's KV-event feed)
// without the other polling again; a request that reaches a replica with a route header that is
// no router's id (not hex, not UTF-8) is served, the header ignored.
TEST_F(RouterTest, ASendThroughOneRouterCountsInAnotherRoutersViewWithoutAPoll) {
  start();
  FleetIndexes other_indexes(clock_);
  PoolConfig pc;
  pc.poll_interval = std::chrono::hours(1);
  // Its own client, ended first (its feeds' last callbacks run while the pool is there).
  auto other_client = std::make_unique<http::Client>();
  auto other_pool = std::make_unique<ReplicaPool>(*other_client, other_indexes, clock_, pc);
  ReplicaPool& other = *other_pool;
  for (auto& r : replicas_)
    ASSERT_TRUE(other.add(r->address()).ok());
  other.poll_now();  // its one report and its subscriptions: it is never started, so no more
  auto announced = [&] {
    double sum = 0;
    for (const ReplicaView& v : other.snapshot())
      sum += v.announced_work;
    return sum;
  };
  auto subscribed = [&] {
    auto s = other.snapshot();
    return std::all_of(s.begin(), s.end(), [](const ReplicaView& v) { return v.exact; });
  };
  for (int i = 0; i < 200 && !subscribed(); ++i)
    std::this_thread::sleep_for(20ms);
  ASSERT_TRUE(subscribed());
  EXPECT_EQ(announced(), 0);
  const std::string prompt = long_prompt("announced");
  const auto r = post({{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 3}});
  ASSERT_EQ(r.status, 200) << r.body;
  for (int i = 0; i < 200 && announced() == 0; ++i)
    std::this_thread::sleep_for(20ms);
  // The prompt's tokens (nothing was cached) and its three completion tokens.
  EXPECT_GE(announced(), static_cast<double>(prompt.size()));
  const std::string to = replica_of(r);
  for (const ReplicaView& v : other.snapshot()) {
    EXPECT_EQ(v.announced_work > 0, v.replica_id == to) << v.replica_id;
  }

  http::Client c;
  const json body = {{"model", "tiny"}, {"prompt", "route?"}, {"max_tokens", 2}};
  for (const std::string& bad :
       std::vector<std::string>{"not a route", "\xff\xfe", std::string(300, 'a')}) {
    auto direct =
        c.request("127.0.0.1", replicas_[0]->port(), "POST", "/v1/completions", body.dump(),
                  {{"content-type", "application/json"}, {"x-kvcascade-route", bad}}, 60s);
    ASSERT_TRUE(direct.ok());
    EXPECT_EQ(direct->status, 200) << direct->body;
  }
  const double before = announced();
  const auto after =
      post({{"model", "tiny"}, {"prompt", "and through the router"}, {"max_tokens", 2}});
  EXPECT_EQ(after.status, 200);
  for (int i = 0; i < 200 && announced() == before; ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_GT(announced(), before);  // the replica's feed still runs
  other_client.reset();
  other_pool.reset();
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
    tenants.insert(
        replica_of(post({{"model", "tiny"},
                         {"prompt", long_prompt(std::string("t").append(std::to_string(t)))},
                         {"max_tokens", 1}})));
  }
  EXPECT_GE(tenants.size(), 2u);
}

// Through the router: eight requests sharing a `group` id (group_size 8) land on one
// replica and are one group there (the prompt computed once: seven of eight report it cached).
TEST_F(RouterTest, RequestsSharingAGroupIdAreOneGroupOnOneReplica) {
  // The replicas wait for the whole group: on a loaded machine the eight client threads can
  // start further apart than the 250 ms pause after which the members present would start.
  replica_scheduler_.affinity_idle = 30s;
  replica_scheduler_.affinity_wait = 30s;
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

}  // namespace
}  // namespace kvc
