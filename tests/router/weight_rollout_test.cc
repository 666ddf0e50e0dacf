// Weight versions through the router (router/weight_rollout.h, RouterConfig::
// weight_version_policy): POST /router/admin/weights updates replicas all at once or rolling,
// /router/state shows every replica's version, "latest" sends new requests only to replicas at
// the newest version, a pinned version (x-kvcascade-weight-version) goes where it is served or
// gets a 409, a bad rollout changes nothing, and the admin endpoint takes only the router's admin
// key (no client key, no tenant). Two tiny CPU replicas on 127.0.0.1, serving checkpoints written
// here.
#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/model/weights.h"
#include "replica/server/local_replica.h"
#include "router/router_stack.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class WeightRolloutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [name, seed] : {std::pair{"a", 3}, std::pair{"b", 4}}) {
      const std::string dir = root_.file(name);
      std::filesystem::create_directories(dir);
      ASSERT_TRUE(write_hf_checkpoint(random_weights(*preset_config("tiny"), seed), dir).ok());
    }
    RouterStackConfig rc;
    rc.router.debug_headers = true;
    rc.pool.poll_interval = 50ms;
    for (int i = 0; i < 2; ++i) {
      auto w = load_hf_weights(root_.file("a"));
      ASSERT_TRUE(w.ok());
      ReplicaStackConfig c;
      c.engine.scheduler.max_model_len = 4096;
      c.server.served_model_name = "tiny";
      c.server.weight_version = "v0";
      replicas_.push_back(std::make_unique<LocalReplica>(
          "r" + std::to_string(i), std::make_unique<CpuBackend>(std::move(*w), 256, 16),
          std::move(c)));
      rc.replicas.push_back(replicas_.back()->address());
    }
    router_ = std::make_unique<RouterStack>(rc);
    auto port = router_->start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.error().message;
    port_ = *port;
    const std::vector<std::string> initial = {"v0", "v0"};
    ASSERT_TRUE(wait_for([&] { return versions() == initial; }))
        << call("GET", "/router/state", nullptr).body;
  }
  void TearDown() override {
    for (auto& other : others_)
      other->stop();
    if (router_) router_->stop();
  }
  // Another router in front of the same replicas, with `config`; its port.
  uint16_t start_router(RouterConfig config) {
    RouterStackConfig rc;
    rc.router = std::move(config);
    rc.pool.poll_interval = 50ms;
    for (const auto& r : replicas_)
      rc.replicas.push_back(r->address());
    others_.push_back(std::make_unique<RouterStack>(rc));
    auto port = others_.back()->start("127.0.0.1", 0);
    EXPECT_TRUE(port.ok()) << (port.ok() ? "" : port.error().message);
    return port.ok() ? *port : 0;
  }
  template <class F>
  static bool wait_for(F f) {
    for (int i = 0; i < 200; ++i, std::this_thread::sleep_for(20ms))
      if (f()) return true;
    return false;
  }
  http::ClientResponse call(const std::string& method, const std::string& path, const json& body,
                            http::Headers headers = {}) {
    return call_at(port_, method, path, body, std::move(headers));
  }
  http::ClientResponse call_at(uint16_t port, const std::string& method, const std::string& path,
                               const json& body, http::Headers headers = {}) {
    headers.emplace_back("content-type", "application/json");
    auto r = client_.request("127.0.0.1", port, method, path, body.is_null() ? "" : body.dump(),
                             headers, 60s);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    return r.ok() ? *r : http::ClientResponse{};
  }
  std::vector<std::string> versions() {
    std::vector<std::string> v;
    const json state = json::parse(call("GET", "/router/state", nullptr).body);
    for (const json& r : state["replicas"])
      v.push_back(r["weight_version"].get<std::string>());
    return v;
  }
  http::ClientResponse complete(const std::string& prompt, http::Headers headers = {}) {
    return call("POST", "/v1/completions",
                {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 2}}, std::move(headers));
  }

  testing::TempDir root_;
  std::vector<std::unique_ptr<LocalReplica>> replicas_;
  std::unique_ptr<RouterStack> router_;
  std::vector<std::unique_ptr<RouterStack>> others_;  // start_router
  http::Client client_;
  uint16_t port_ = 0;
};

TEST_F(WeightRolloutTest, OneReplicaUpdatedTakesTheNewRequestsAndPinsFindTheirVersion) {
  const auto r = call("POST", "/router/admin/weights",
                      {{"path", root_.file("b")}, {"version", "step-1"}, {"replicas", {"r0"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json report = json::parse(r.body);
  EXPECT_TRUE(report["ok"].get<bool>());
  ASSERT_EQ(report["replicas"].size(), 1u);
  EXPECT_EQ(report["replicas"][0]["replica"], "r0");
  EXPECT_EQ(report["replicas"][0]["weight_version"], "step-1");
  EXPECT_EQ(versions(), (std::vector<std::string>{"step-1", "v0"}));  // polled before answering
  // "latest": every new request goes to r0, whatever its prefix.
  for (int i = 0; i < 6; ++i) {
    const auto c = complete("prompt number " + std::to_string(i) + " for the fleet");
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(c.header("x-kvcascade-replica"), "r0");
    EXPECT_EQ(c.header("x-kvcascade-weight-version"), "step-1");
    EXPECT_EQ(json::parse(c.body)["weight_version"], "step-1");
  }
  // A pinned version goes where it is served; one nobody serves is a 409.
  const auto old = complete("pinned", {{"x-kvcascade-weight-version", "v0"}});
  ASSERT_EQ(old.status, 200) << old.body;
  EXPECT_EQ(old.header("x-kvcascade-replica"), "r1");
  EXPECT_EQ(json::parse(old.body)["weight_version"], "v0");
  const auto none = complete("pinned", {{"x-kvcascade-weight-version", "step-9"}});
  EXPECT_EQ(none.status, 409) << none.body;
  EXPECT_NE(none.body.find("step-9"), std::string::npos);
}

// A group placed before an update stays on its replica: its late member goes there although
// the other replica now serves a newer version (a group is never split across versions).
TEST_F(WeightRolloutTest, AGroupStaysOnItsReplicaAcrossAnUpdateElsewhere) {
  const json member = {{"model", "tiny"},
                       {"prompt", "a group's shared prompt"},
                       {"max_tokens", 2},
                       {"group", "g1"},
                       {"group_size", 2}};
  auto first =
      std::async(std::launch::async, [&] { return call("POST", "/v1/completions", member); });
  std::string home;
  ASSERT_TRUE(wait_for([&] {
    for (const auto& r : replicas_) {
      if (r->loop().load().scheduler.num_groups_waiting +
              r->loop().load().scheduler.num_groups_running >
          0)
        home = r->id();
    }
    return !home.empty();
  }));
  const std::string other = home == "r0" ? "r1" : "r0";
  const auto u = call("POST", "/router/admin/weights",
                      {{"path", root_.file("b")}, {"version", "step-1"}, {"replicas", {other}}});
  ASSERT_EQ(u.status, 200) << u.body;
  const auto second = call("POST", "/v1/completions", member);
  ASSERT_EQ(second.status, 200) << second.body;
  EXPECT_EQ(second.header("x-kvcascade-replica"), home);
  EXPECT_EQ(json::parse(second.body)["weight_version"], "v0");
  const auto one = first.get();
  EXPECT_EQ(one.header("x-kvcascade-replica"), home);
  // A new request (no group) goes to the newest version.
  EXPECT_EQ(complete("no group").header("x-kvcascade-replica"), other);
}

TEST_F(WeightRolloutTest, RollingAndAllAtOnceUpdateEveryReplica) {
  auto roll = call("POST", "/router/admin/weights",
                   {{"path", root_.file("b")},
                    {"version", "step-1"},
                    {"strategy", "rolling"},
                    {"max_parallel", 1}});
  ASSERT_EQ(roll.status, 200) << roll.body;
  EXPECT_EQ(json::parse(roll.body)["replicas"].size(), 2u);
  EXPECT_EQ(versions(), (std::vector<std::string>{"step-1", "step-1"}));
  auto all = call("POST", "/router/admin/weights",
                  {{"path", root_.file("a")},
                   {"version", "step-2"},
                   {"strategy", "all-at-once"},
                   {"mode", "abort"}});
  ASSERT_EQ(all.status, 200) << all.body;
  EXPECT_EQ(versions(), (std::vector<std::string>{"step-2", "step-2"}));
  // Both serve new requests again.
  std::set<std::string> seen;
  for (int i = 0; i < 12; ++i)
    seen.insert(complete("spread " + std::to_string(i)).header("x-kvcascade-replica").value_or(""));
  EXPECT_EQ(seen.size(), 2u);
}

TEST_F(WeightRolloutTest, BadRolloutsAreRefusedAndAFailedOneStopsTheRoll) {
  auto post = [&](const json& body) { return call("POST", "/router/admin/weights", body); };
  EXPECT_EQ(post({{"version", "x"}}).status, 400);
  EXPECT_EQ(post({{"path", root_.file("b")}, {"version", "a b"}}).status, 400);
  EXPECT_EQ(post({{"path", root_.file("b")}, {"version", "x"}, {"strategy", "sideways"}}).status,
            400);
  EXPECT_EQ(post({{"path", root_.file("b")}, {"version", "x"}, {"replicas", {"r7"}}}).status, 400);
  EXPECT_EQ(post({{"path", root_.file("b")}, {"version", "x"}, {"Mode", "abort"}}).status, 400);
  EXPECT_EQ(post({{"path", "b"}, {"version", "x"}}).status, 400);  // relative
  EXPECT_EQ(call("GET", "/router/admin/weights", nullptr).status, 405);
  // A folder the replicas refuse: the first one says why, the second is never touched. The
  // request is at fault (400, as the replica said), not the fleet (502).
  const auto failed = post({{"path", root_.file("missing")}, {"version", "step-1"}});
  EXPECT_EQ(failed.status, 400) << failed.body;
  const json report = json::parse(failed.body);
  EXPECT_FALSE(report["ok"].get<bool>());
  EXPECT_EQ(report["replicas"][0]["status"], 400);
  EXPECT_TRUE(report["replicas"][1]["skipped"].get<bool>());
  // All at once: every replica refuses it, still the client's 400.
  const auto all =
      post({{"path", root_.file("missing")}, {"version", "step-1"}, {"strategy", "all-at-once"}});
  EXPECT_EQ(all.status, 400) << all.body;
  const json all_report = json::parse(all.body);
  ASSERT_EQ(all_report["replicas"].size(), 2u);
  EXPECT_EQ(all_report["replicas"][0]["status"], 400);
  EXPECT_EQ(all_report["replicas"][1]["status"], 400);
  EXPECT_EQ(versions(), (std::vector<std::string>{"v0", "v0"}));
}

// POST /router/admin/weights swaps or aborts the whole fleet's weights, so no client may do it
// unless the router trusts every client (no keys, no tenants: the fixture's router). With
// --admin-api-key it takes that key and nothing else, a client key included; without one, a
// router that tells clients apart (--api-key, --tenant-isolation) refuses it to everyone (403,
// saying to configure --admin-api-key). It used to take any client key, and, with tenant
// isolation by key but no --api-key, requests without any key.
TEST_F(WeightRolloutTest, TheAdminEndpointTakesOnlyTheAdminKey) {
  const json update = {{"path", root_.file("b")}, {"version", "step-1"}, {"replicas", {"r0"}}};
  auto post = [&](uint16_t port, std::optional<std::string> key) {
    http::Headers headers;
    if (key) headers.emplace_back("authorization", "Bearer " + *key);
    return call_at(port, "POST", "/router/admin/weights", update, std::move(headers));
  };
  auto error_type = [](const http::ClientResponse& r) {
    const json body = json::parse(r.body, nullptr, false);
    return body.is_object() && body.contains("error") ? body["error"].value("type", "") : "";
  };

  RouterConfig client_keys;
  client_keys.api_keys = {"client-key-a", "client-key-b"};
  const uint16_t refusing = start_router(client_keys);
  RouterConfig tenants;  // tenants by key, no --api-key: every Bearer token is a tenant
  tenants.tenant_isolation = TenantIsolation::kApiKey;
  const uint16_t tenant_router = start_router(tenants);
  RouterConfig header_tenants;
  header_tenants.tenant_isolation = TenantIsolation::kHeader;
  header_tenants.tenant_header = "x-tenant";
  const uint16_t header_router = start_router(header_tenants);
  for (uint16_t port : {refusing, tenant_router, header_router}) {
    for (const std::optional<std::string>& key :
         {std::optional<std::string>(), std::optional<std::string>("client-key-a"),
          std::optional<std::string>("client-key-b"), std::optional<std::string>("admin-key")}) {
      const auto r = post(port, key);
      EXPECT_EQ(r.status, 403) << port << " " << key.value_or("(none)") << ": " << r.body;
      EXPECT_EQ(error_type(r), "permission_error") << r.body;
      EXPECT_NE(r.body.find("--admin-api-key"), std::string::npos) << r.body;
    }
  }
  // Anonymous completions there are still a 401, as before.
  EXPECT_EQ(call_at(tenant_router, "POST", "/v1/completions",
                    {{"model", "tiny"}, {"prompt", "x"}, {"max_tokens", 2}})
                .status,
            401);

  RouterConfig admin;
  admin.api_keys = {"client-key-a", "client-key-b"};
  admin.admin_api_keys = {"admin-key"};
  admin.tenant_isolation = TenantIsolation::kApiKey;
  const uint16_t administered = start_router(admin);
  for (const std::optional<std::string>& key :
       {std::optional<std::string>(), std::optional<std::string>("client-key-a"),
        std::optional<std::string>("client-key-b"), std::optional<std::string>("wrong")}) {
    const auto r = post(administered, key);
    EXPECT_EQ(r.status, 401) << key.value_or("(none)") << ": " << r.body;
    EXPECT_EQ(error_type(r), "authentication_error") << r.body;
  }
  // Nothing refused reached a replica.
  EXPECT_EQ(replicas_[0]->loop().weight_version(), "v0");
  EXPECT_EQ(replicas_[1]->loop().weight_version(), "v0");
  // Wrong methods are told only to the admin.
  EXPECT_EQ(call_at(administered, "GET", "/router/admin/weights", nullptr).status, 401);
  EXPECT_EQ(call_at(administered, "GET", "/router/admin/weights", nullptr,
                    {{"authorization", "Bearer admin-key"}})
                .status,
            405);
  // The admin key updates the fleet (once this router knows r0 by its id).
  ASSERT_TRUE(wait_for([&] {
    const auto st = call_at(administered, "GET", "/router/state", nullptr,
                            {{"authorization", "Bearer client-key-a"}});
    return st.status == 200 && st.body.find("\"r0\"") != std::string::npos;
  }));
  const auto r = post(administered, "admin-key");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(json::parse(r.body)["ok"].get<bool>());
  EXPECT_EQ(replicas_[0]->loop().weight_version(), "step-1");
  EXPECT_EQ(replicas_[1]->loop().weight_version(), "v0");
  // Client endpoints still take only client keys.
  EXPECT_EQ(call_at(administered, "GET", "/router/state", nullptr,
                    {{"authorization", "Bearer admin-key"}})
                .status,
            401);
}

// A replica that fails otherwise (here: gone, no answer) makes the rollout a 502, also beside a
// replica that refused the request with a 400.
TEST_F(WeightRolloutTest, AReplicaThatFailsMakesTheRolloutA502) {
  replicas_[1]->stop();
  const auto r = call("POST", "/router/admin/weights",
                      {{"path", root_.file("missing")},
                       {"version", "step-1"},
                       {"strategy", "all-at-once"},
                       {"replicas", {"r0", "r1"}}});
  EXPECT_EQ(r.status, 502) << r.body;
  const json report = json::parse(r.body);
  EXPECT_FALSE(report["ok"].get<bool>());
  ASSERT_EQ(report["replicas"].size(), 2u);
  EXPECT_EQ(report["replicas"][0]["status"], 400);
  EXPECT_EQ(report["replicas"][1]["status"], 0);
  // Stopped: refused on connect ("not_sent"), or, where the router reused a kept-alive connection
  // the replica closed as it stopped, written and then cut ("unknown": the router cannot tell).
  const std::string outcome = report["replicas"][1].value("outcome", "");
  EXPECT_TRUE(outcome == "not_sent" || outcome == "unknown") << report.dump();
  EXPECT_FALSE(report["replicas"][0].contains("outcome"));  // it answered
  // Only the replica that is gone: a 502 too.
  const auto gone = call("POST", "/router/admin/weights",
                         {{"path", root_.file("b")}, {"version", "step-1"}, {"replicas", {"r1"}}});
  EXPECT_EQ(gone.status, 502) << gone.body;
}

}  // namespace
}  // namespace kvc
