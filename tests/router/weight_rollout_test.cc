// Weight versions through the router (router/weight_rollout.h, RouterConfig::
// weight_version_policy): POST /router/admin/weights updates replicas all at once or rolling,
// /router/state shows every replica's version, "latest" sends new requests only to replicas at
// the newest version, a pinned version (x-kvcascade-weight-version) goes where it is served or
// gets a 409, and a bad rollout changes nothing. Two tiny CPU replicas on 127.0.0.1, serving
// checkpoints written here.
#include <chrono>
#include <filesystem>
#include <future>
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
    if (router_) router_->stop();
  }
  template <class F>
  static bool wait_for(F f) {
    for (int i = 0; i < 200; ++i, std::this_thread::sleep_for(20ms))
      if (f()) return true;
    return false;
  }
  http::ClientResponse call(const std::string& method, const std::string& path, const json& body,
                            http::Headers headers = {}) {
    headers.emplace_back("content-type", "application/json");
    auto r = client_.request("127.0.0.1", port_, method, path, body.is_null() ? "" : body.dump(),
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
  EXPECT_EQ(call("GET", "/router/admin/weights", nullptr).status, 405);
  // A folder the replicas refuse: the first one says why, the second is never touched.
  const auto failed = post({{"path", root_.file("missing")}, {"version", "step-1"}});
  EXPECT_EQ(failed.status, 502) << failed.body;
  const json report = json::parse(failed.body);
  EXPECT_FALSE(report["ok"].get<bool>());
  EXPECT_EQ(report["replicas"][0]["status"], 400);
  EXPECT_TRUE(report["replicas"][1]["skipped"].get<bool>());
  EXPECT_EQ(versions(), (std::vector<std::string>{"v0", "v0"}));
}

}  // namespace
}  // namespace kvc
