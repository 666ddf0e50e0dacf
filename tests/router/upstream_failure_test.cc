// The router when clients or replicas misbehave (issue 12): clients that leave. Real sockets on
// 127.0.0.1; every wait is bounded.
#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "replica/local_replica.h"
#include "router/router_stack.h"
#include "tests/http/raw_conn.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

// Polls `done` every 20 ms until it holds or `limit` passed.
template <typename F>
bool eventually(F done, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

json get_json(uint16_t port, const std::string& path) {
  http::Client client;
  auto r = client.request("127.0.0.1", port, "GET", path, "", {}, 10s);
  if (!r.ok() || r->status != 200) return json();
  return json::parse(r->body, nullptr, false);
}

// Waits (bounded) until the router sees `n` healthy replicas.
bool wait_healthy(RouterStack& stack, size_t n) {
  return eventually(
      [&] {
        auto s = stack.pool().snapshot();
        return static_cast<size_t>(
                   std::count_if(s.begin(), s.end(), [](auto& r) { return r.healthy; })) == n;
      },
      10s);
}

std::string raw_post(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\n"
         "content-length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Issue 12 §2: a client that leaves a non-streaming request used to leave the replica generating
// to the end (the router noticed only when upstream bytes arrived, and a non-streaming replica
// sends none until it is done). The router now watches the client while it waits and closes the
// upstream connection, which frees the group on the replica.
TEST(RouterClientGone, AbandonedNonStreamingRequestsStopTheirSequences) {
  LocalReplica replica("r0", /*kv_blocks=*/3072);
  RouterStackConfig c;
  c.replicas = {replica.address()};
  RouterStack stack(c);
  auto port = stack.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  ASSERT_TRUE(wait_healthy(stack, 1));
  constexpr int kRequests = 3, kN = 4;
  std::vector<std::unique_ptr<http::testing::RawConn>> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.push_back(std::make_unique<http::testing::RawConn>(*port));
    ASSERT_TRUE(clients.back()->connected());
    const json body = {{"model", "tiny"},
                       {"prompt", "abandoned request " + std::to_string(i)},
                       {"n", kN},
                       {"max_tokens", 3000},
                       {"ignore_eos", true}};
    ASSERT_TRUE(clients.back()->send(raw_post(body.dump())));
  }
  auto load = [&] { return get_json(replica.port(), "/v1/load"); };
  ASSERT_TRUE(
      eventually([&] { return load().value("running_sequences", 0) == kRequests * kN; }, 30s))
      << load().dump();
  clients.clear();  // every client hangs up
  // 3000 tokens take the CPU replica tens of seconds; aborted, they stop within moments.
  EXPECT_TRUE(eventually(
      [&] {
        const json l = load();
        return l.value("running_sequences", -1) == 0 && l.value("waiting_sequences", -1) == 0;
      },
      5s))
      << load().dump();
  stack.stop();
}

}  // namespace
}  // namespace kvc
