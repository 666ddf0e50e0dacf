// The router + 3 tiny CPU replicas fixture of the router's integration tests
// (router_integration_test.cc: routing and failures; router_access_test.cc: keys, tenants,
// probes), all on 127.0.0.1 with real sockets.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "http/server.h"
#include "replica/server/local_replica.h"
#include "router/fleet/replica_pool.h"
#include "router/proxy.h"
#include "router/router_stack.h"

namespace kvc::testing {

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
      ReplicaStackConfig c;
      c.server.api_keys = replica_keys;
      c.engine.scheduler = replica_scheduler_;
      replicas_.push_back(std::make_unique<LocalReplica>("r" + std::to_string(i), blocks, c));
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
  // The replicas' scheduler settings; a test may change them before start().
  SchedulerConfig replica_scheduler_;
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

inline std::string long_prompt(const std::string& tenant) {
  std::string s = "System prompt of tenant " + tenant + ". ";
  while (s.size() < 600)
    s += "Rules for " + tenant + ": be precise, cite, and be brief. ";
  return s;
}

}  // namespace kvc::testing
