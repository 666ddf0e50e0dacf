// The replica's HTTP API over real sockets on 127.0.0.1: a fixture with the tiny model on the
// CPU backend behind the EngineLoop and ReplicaServer, driven with http::Client
// (server_test.cc, logprobs_server_test.cc).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "replica/server/local_replica.h"

namespace kvc::testing {

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

inline const std::string kPrompt =
    "A shared system prompt that is long enough to fill several KV blocks of sixteen tokens. ";

}  // namespace kvc::testing
