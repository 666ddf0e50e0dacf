// The completion work a router plans for what it sends (RouteRequest::max_tokens, counted in the
// replica's routed work until its next load report): the client's max_tokens, or for a chat
// request without one, which only the context bounds, what the replicas report planning for such
// requests (planned_open_completion_tokens in /v1/load).
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "http/client.h"
#include "router/router_stack.h"
#include "tests/testing/fake_replica.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::FakeReplica;

TEST(RouterPlannedWork, AChatWithoutMaxTokensIsPlannedWhatTheReplicasReport) {
  FakeReplica::Options o;
  o.report_work = true;  // holds every completion: the sends stay unanswered
  FakeReplica fake(o);
  ASSERT_NE(fake.port(), 0);
  fake.set_work(0, 0);
  fake.set_planned_open_completion(1000);
  RouterStackConfig c;
  c.replicas = {fake.address()};
  // The polls at start (start()'s own, then the pool thread's first round), none after during
  // the test: what was sent stays this router's own unacknowledged work (a later report would
  // take it over: the pool thread's first round, run after the first send on a loaded machine,
  // made it 0).
  c.pool.poll_interval = 1h;
  c.pool.poll_phase = -1ms;
  RouterStack stack(std::move(c));
  auto port = stack.start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok());
  for (int i = 0; i < 500 && stack.pool().num_poll_rounds() < 2; ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_GE(stack.pool().num_poll_rounds(), 2u);
  ASSERT_TRUE(stack.pool().get(0) && stack.pool().get(0)->healthy);
  ASSERT_EQ(stack.pool().get(0)->planned_open_completion_tokens, 1000);

  // Two chats of the same length and different first blocks (nothing cached for either): one
  // without max_tokens, one with 7; n = 2 each. Each client gives up at once; the router has
  // sent its request by then and counts it.
  double before = 0;
  auto send = [&](char fill, const json& extra) {
    json body = {{"model", "tiny"},
                 {"n", 2},
                 {"messages", {{{"role", "user"}, {"content", std::string(64, fill)}}}}};
    body.update(extra);
    const int sent = fake.num_completions();
    (void)http::Client().request("127.0.0.1", *port, "POST", "/v1/chat/completions", body.dump(),
                                 {{"content-type", "application/json"}}, 300ms);
    EXPECT_EQ(fake.num_completions(), sent + 1);
    const double after = stack.pool().get(0)->unacked_work;
    const double added = after - before;
    before = after;
    return added;
  };
  const double open = send('a', json::object());
  const double bounded = send('b', {{"max_tokens", 7}});
  EXPECT_DOUBLE_EQ(open - bounded, 2 * (1000 - 7)) << open << " " << bounded;
  stack.stop();
}

}  // namespace
}  // namespace kvc
