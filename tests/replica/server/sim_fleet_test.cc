// Sixteen sim replicas (Llama-3-8B on a simulated H200 each) in one process, over real sockets on
// 127.0.0.1: they start quickly and serve concurrent requests in about the simulated time, since
// the sim backend sleeps instead of computing (dozens of them on a 2-core machine).
#include <chrono>
#include <future>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "api/step_model.h"
#include "http/client.h"
#include "replica/backend/sim/sim_backend.h"
#include "replica/server/local_replica.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

std::unique_ptr<LocalReplica> sim_replica(int i, const char* device = "h200-llama3-8b") {
  SimPreset preset = *sim_preset(device);
  const int32_t blocks = sim_kv_blocks(preset, 0.9, 16);
  auto backend =
      std::make_unique<SimBackend>(std::move(preset), blocks, 16, SteadyClock::instance());
  EngineConfig config;
  config.scheduler.max_model_len = 8192;
  return std::make_unique<LocalReplica>("sim" + std::to_string(i), std::move(backend), config);
}

TEST(SimFleet, SixteenReplicasStartAndServeConcurrently) {
  constexpr int kReplicas = 16, kTokens = 32;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::unique_ptr<LocalReplica>> fleet;
  for (int i = 0; i < kReplicas; ++i) {
    fleet.push_back(sim_replica(i));
    ASSERT_NE(fleet.back()->port(), 0);
  }
  const auto started = std::chrono::steady_clock::now();
  EXPECT_LT(started - t0, 10s);

  const std::string body = json{
      {"model", "llama3-8b"},
      {"prompt", std::string(2000, 'p')},
      {"n", 4},
      {"max_tokens", kTokens},
      {"ignore_eos", true}}.dump();
  std::vector<std::future<json>> replies;
  for (auto& r : fleet) {
    replies.push_back(std::async(std::launch::async, [port = r->port(), &body] {
      http::Client client;
      auto reply = client.request("127.0.0.1", port, "POST", "/v1/completions", body,
                                  {{"content-type", "application/json"}}, 60s);
      if (!reply.ok() || reply->status != 200) return json{};
      return json::parse(reply->body);
    }));
  }
  for (auto& f : replies) {
    const json reply = f.get();
    ASSERT_TRUE(reply.contains("usage")) << reply.dump();
    EXPECT_EQ(reply["usage"]["completion_tokens"], 4 * kTokens);
    EXPECT_EQ(reply["choices"].size(), 4u);
  }
  const auto served = std::chrono::steady_clock::now() - started;
  // Simulated: 4 prefill steps of <= 512 tokens (~13 ms each) + 31 decode steps (~6.3 ms): about
  // 0.25 s of device time per replica, all replicas at once. Generous for a loaded machine.
  EXPECT_LT(served, 20s);
  for (auto& r : fleet) {
    const auto& sim = dynamic_cast<const SimBackend&>(r->backend());
    EXPECT_GT(sim.busy(), 200ms);  // the requests took simulated device time
    EXPECT_LT(sim.busy(), 400ms);
  }
}

// A sim replica publishes its step model in GET /v1/load from the start (the steps its backend
// times without running them: Backend::predicted_steps), and routers take its figure: an A10G
// reads about five times as slow as an H200 before either served a request.
TEST(SimFleet, EachReplicaPublishesItsSpeedBeforeItsFirstRequest) {
  auto h200 = sim_replica(0), a10g = sim_replica(1, "a10g-llama3-8b");
  auto figure = [](const LocalReplica& r) -> double {
    http::Client client;
    auto reply = client.request("127.0.0.1", r.port(), "GET", "/v1/load", "", {}, 10s);
    if (!reply.ok() || reply->status != 200) return 0;
    const json load = json::parse(reply->body);
    EXPECT_EQ(load["steps"], 0) << load.dump();
    const auto model = read_step_model(load["step_model"]);
    if (!model) return 0;
    return seconds_per_work_token(*model).value_or(0);
  };
  const double fast = figure(*h200), slow = figure(*a10g);
  ASSERT_GT(fast, 0.0);
  ASSERT_GT(slow, 0.0);
  EXPECT_GT(slow / fast, 4.0);
  EXPECT_LT(slow / fast, 7.0);
}

}  // namespace
}  // namespace kvc
