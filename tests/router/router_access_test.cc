// The router's access rules against its fixture (router_test_fixture.h): bad input and client
// keys, liveness and readiness probes, the replica key it sends, tenant isolation by key or
// header, the debug header of matched bytes.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "tests/router/router_test_fixture.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::long_prompt;
using testing::RouterTest;

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
  // With the context the replicas state (vLLM's field: clients size prompts by it), as a
  // replica's own /v1/models has it.
  auto own = c.request("127.0.0.1", replicas_[0]->port(), "GET", "/v1/models/tiny", "", auth);
  ASSERT_TRUE(own.ok());
  ASSERT_TRUE(json::parse(own->body).contains("max_model_len")) << own->body;
  EXPECT_EQ(json::parse(one->body)["max_model_len"], json::parse(own->body)["max_model_len"]);
  auto list = c.request("127.0.0.1", port_, "GET", "/v1/models", "", auth);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(json::parse(list->body)["data"][0]["max_model_len"],
            json::parse(own->body)["max_model_len"]);
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
// unless asked for, and so is the route detail (every replica's load).
TEST_F(RouterTest, MatchedBytesHeaderIsHiddenByDefault) {
  start();
  const json req = {{"model", "tiny"}, {"prompt", long_prompt("quiet")}, {"max_tokens", 1}};
  ASSERT_EQ(post(req).status, 200);
  wait_for_index(30);
  const auto again = post(req);
  ASSERT_EQ(again.status, 200);
  EXPECT_EQ(again.header("x-kvcascade-matched-bytes"), std::nullopt);
  EXPECT_EQ(again.header("x-kvcascade-route-detail"), std::nullopt);
  EXPECT_TRUE(again.header("x-kvcascade-replica").has_value());
}

}  // namespace
}  // namespace kvc
