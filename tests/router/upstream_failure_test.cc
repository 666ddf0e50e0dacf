// The router when clients or replicas misbehave: clients that
// leave, replicas that stall (before the first byte, mid-stream, under a health check) and
// replicas whose circuit breaker opens. Real sockets on 127.0.0.1; every wait is bounded.
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
#include "replica/server/local_replica.h"
#include "router/router_stack.h"
#include "tests/http/raw_conn.h"
#include "tests/testing/fake_replica.h"

// The tests set FakeReplica::Options by designated initializers, leaving the rest at their
// defaults; GCC 12 warns of every member left out even so.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace kvc {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using testing::FakeReplica;

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

// A client that leaves a non-streaming request used to leave the replica generating
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

// A router (RouterStack, as `kvcascade router` builds it) in front of a FakeReplica and a real
// one, with short timeouts and fast health checks. Bounded waits everywhere.
class RouterWithFake : public ::testing::Test {
 protected:
  void start(FakeReplica::Options fake_options, RouterStackConfig c = {}) {
    fake_ = std::make_unique<FakeReplica>(std::move(fake_options));
    good_ = std::make_unique<LocalReplica>("good");
    ASSERT_NE(fake_->port(), 0);
    c.replicas = {fake_->address(), good_->address()};
    c.pool.poll_interval = 100ms;
    stack_ = std::make_unique<RouterStack>(std::move(c));
    auto port = stack_->start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    port_ = *port;
    ASSERT_TRUE(wait_healthy(*stack_, 2));
  }
  void TearDown() override {
    if (stack_) stack_->stop();
    stack_.reset();
    fake_.reset();
    good_.reset();
  }

  // The whole reply (a stream: every event, then the end of the body), bounded by `limit`.
  Result<http::ClientResponse> post(const json& body, std::chrono::milliseconds limit = 20s) {
    http::Client client;
    return client.request("127.0.0.1", port_, "POST", "/v1/completions", body.dump(),
                          {{"content-type", "application/json"}}, limit);
  }
  json state() { return get_json(port_, "/router/state"); }
  // The fake's entry in /router/state.
  json fake_state() {
    const json s = state();
    for (const json& r : s["replicas"])
      if (r["replica_id"] == "fake") return r;
    ADD_FAILURE() << s.dump();
    return json::object();
  }
  // The value of an unlabelled counter in the router's /metrics (-1 if absent).
  double metric(const std::string& name) {
    http::Client client;
    auto r = client.request("127.0.0.1", port_, "GET", "/metrics", "", {}, 10s);
    if (!r.ok()) return -1;
    const std::string& text = r->body;
    for (size_t p = text.find(name + " "); p != std::string::npos;
         p = text.find(name + " ", p + 1)) {
      if (p == 0 || text[p - 1] == '\n') return std::stod(text.substr(p + name.size() + 1));
    }
    return -1;
  }

  std::unique_ptr<FakeReplica> fake_;
  std::unique_ptr<LocalReplica> good_;
  std::unique_ptr<RouterStack> stack_;
  uint16_t port_ = 0;
};

// A prompt the fake holds (it publishes its blocks), so the kvcascade policy sends it there.
std::string held_prompt() {
  std::string s = "A prompt whose prefix the fake replica holds. ";
  while (s.size() < 600)
    s += "Its blocks are in the router's index under the fake. ";
  return s;
}

bool wait_exact(RouterStack& stack, const std::string& id) {
  return eventually(
      [&] {
        for (const ReplicaView& r : stack.pool().snapshot())
          if (r.replica_id == id && r.exact) return true;
        return false;
      },
      10s);
}

// A KV event the index refuses (its parent unknown: events were lost) used to be dropped and
// the index drifted from the replica for good. Now the feed is dropped and resubscribed: the new
// feed's snapshot makes the index what the replica holds again, and the resync is counted.
TEST_F(RouterWithFake, RefusedKvEventResubscribesAndTheIndexRecovers) {
  const std::vector<BlockHash> blocks = FakeReplica::blocks_of(held_prompt());
  start({.replica_id = "fake", .blocks = blocks, .orphan_event_once = true});
  ASSERT_TRUE(eventually([&] { return fake_->num_subscriptions() >= 2; }, 10s));
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  ASSERT_TRUE(eventually([&] { return fake_state()["index_blocks"] == blocks.size(); }, 10s))
      << fake_state().dump();
  EXPECT_GE(fake_state()["kv_event_resyncs"].get<int64_t>(), 1);
  EXPECT_GE(state()["kv_event_resyncs"].get<int64_t>(), 1);
  http::Client client;
  auto m = client.request("127.0.0.1", port_, "GET", "/metrics", "", {}, 10s);
  ASSERT_TRUE(m.ok());
  EXPECT_NE(
      m->body.find(
          R"(kvcascade_router_kv_event_resyncs_total{reason="refused_event",replica="fake"} 1)"),
      std::string::npos)
      << m->body.substr(0, 4000);
}

// A replica that accepts a streamed request and never answers used to hold it for
// the whole upstream timeout (10 minutes). Nothing reached the client before the first-byte
// timeout, so the request is retried on the other replica.
TEST_F(RouterWithFake, StreamWithoutFirstByteIsRetriedElsewhere) {
  RouterStackConfig c;
  // The CPU replica's first token (the retry) comes sooner, even on a loaded 2-core CI machine
  // (2 s was seen to run out under ctest -j2).
  c.router.first_byte_timeout = 6s;
  start({.replica_id = "fake", .blocks = FakeReplica::blocks_of(held_prompt())}, c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  const auto begin = std::chrono::steady_clock::now();
  auto r = post({{"model", "tiny"},
                 {"prompt", held_prompt()},
                 {"max_tokens", 4},
                 {"stream", true},
                 {"ignore_eos", true}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "good");
  EXPECT_NE(r->body.find("data: [DONE]"), std::string::npos) << r->body;
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 20s);
  EXPECT_EQ(fake_->num_completions(), 1);
  // The router hung up on the fake when it gave up (a real replica frees the group then).
  EXPECT_TRUE(eventually([&] { return fake_->num_completions_abandoned() == 1; }, 5s));
  EXPECT_EQ(stack_->server().stats().retries(), 1);
}

// A stream whose only try gets no first byte within the first-byte timeout: the upstream timed
// out, a 504 (it was a 502, as if the replica had failed).
TEST_F(RouterWithFake, StreamWithoutFirstByteOnItsLastTryIsA504) {
  RouterStackConfig c;
  c.router.first_byte_timeout = 500ms;
  c.router.max_attempts = 1;
  start({.replica_id = "fake", .blocks = FakeReplica::blocks_of(held_prompt())}, c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  auto r =
      post({{"model", "tiny"}, {"prompt", held_prompt()}, {"max_tokens", 4}, {"stream", true}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 504) << r->body;
  const json error = json::parse(r->body, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << r->body;
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("within 500 ms"), std::string::npos)
      << r->body;
  EXPECT_EQ(fake_->num_completions(), 1);
  EXPECT_EQ(stack_->server().stats().retries(), 0);
}

// A non-streamed reply comes whole when the generation is done, so one that misses the upstream
// timeout is a generation longer than it: 504 Gateway Timeout (it was a 502), and not retried
// on another replica (it used to be, which took as long again before the same error: twice the
// work wasted). The replica's connection is reset, so it stops generating.
TEST_F(RouterWithFake, NonStreamedReplyPastTheUpstreamTimeoutIsA504NotRetried) {
  RouterStackConfig c;
  c.router.upstream_timeout = 500ms;
  start({.replica_id = "fake", .blocks = FakeReplica::blocks_of(held_prompt())}, c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  const auto begin = std::chrono::steady_clock::now();
  auto r = post({{"model", "tiny"}, {"prompt", held_prompt()}, {"max_tokens", 2}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 504) << r->body;
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 10s);
  const json error = json::parse(r->body, nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << r->body;
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("within 500 ms"), std::string::npos)
      << r->body;
  EXPECT_FALSE(r->header("x-kvcascade-replica").has_value());  // nobody answered it
  EXPECT_EQ(fake_->num_completions(), 1);
  EXPECT_EQ(stack_->server().stats().retries(), 0);
  EXPECT_TRUE(eventually([&] { return fake_->num_completions_abandoned() == 1; }, 5s));
}

// A stream that stops mid-way (first event sent, then silence) used to hang; after
// the idle timeout the client's stream ends with an OpenAI-style error event (it cannot be
// retried: bytes reached the client).
TEST_F(RouterWithFake, StreamStallingMidwayEndsWithAnErrorEvent) {
  RouterStackConfig c;
  c.router.idle_timeout = 300ms;
  start({.replica_id = "fake",
         .completions = FakeReplica::Completions::kStreamThenStall,
         .blocks = FakeReplica::blocks_of(held_prompt())},
        c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  auto r = post({{"model", "tiny"}, {"prompt", held_prompt()}, {"stream", true}});
  ASSERT_TRUE(r.ok()) << r.error().message;  // the stream ended, within the bound
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "fake");
  // An event stream's headers, as a replica's: not cached, not buffered by a proxy in front.
  EXPECT_EQ(r->header("cache-control").value_or("?"), "no-cache");
  EXPECT_EQ(r->header("x-accel-buffering").value_or("?"), "no");
  const std::string first = "data: {\"choices\":[{\"index\":0,\"text\":\"A\"}]}\n\n";
  ASSERT_EQ(r->body.substr(0, first.size()), first) << r->body;
  const std::string rest = r->body.substr(first.size());
  ASSERT_EQ(rest.substr(0, 6), "data: ") << rest;
  ASSERT_EQ(rest.substr(rest.size() - 2), "\n\n") << rest;
  const json error = json::parse(rest.substr(6, rest.size() - 8), nullptr, false);
  ASSERT_FALSE(error.is_discarded()) << rest;
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("stalled"), std::string::npos)
      << rest;
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
  EXPECT_TRUE(eventually([&] { return fake_->num_completions_abandoned() == 1; }, 5s));
}

// A non-streamed reply that stops mid-body is buffered by the router, so nothing
// reached the client: after the idle timeout it is retried and the client gets one whole 200.
TEST_F(RouterWithFake, NonStreamingReplyStallingMidBodyIsRetried) {
  RouterStackConfig c;
  c.router.idle_timeout = 300ms;
  start({.replica_id = "fake",
         .completions = FakeReplica::Completions::kPartialBodyThenStall,
         .blocks = FakeReplica::blocks_of(held_prompt())},
        c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  auto r = post({{"model", "tiny"}, {"prompt", held_prompt()}, {"max_tokens", 2}});
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "good");
  const json body = json::parse(r->body, nullptr, false);
  ASSERT_FALSE(body.is_discarded()) << r->body;
  EXPECT_EQ(body["choices"].size(), 1u);
  EXPECT_EQ(fake_->num_completions(), 1);
}

// A non-streamed reply too large to buffer (over 8 MiB) is passed through as it comes; when its
// upstream fails part-way the client must not get a complete-looking 200 (it used to: a
// terminated chunked body ending mid-JSON). The connection is cut without the terminal chunk,
// so the client's read fails.
TEST_F(RouterWithFake, LargeReplyFailingPartWayIsTruncatedNotTerminated) {
  start({.replica_id = "fake",
         .completions = FakeReplica::Completions::kLargeBodyThenClose,
         .blocks = FakeReplica::blocks_of(held_prompt())});
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  auto r = post({{"model", "tiny"}, {"prompt", held_prompt()}, {"max_tokens", 2}});
  EXPECT_FALSE(r.ok()) << "status " << r->status << ", " << r->body.size()
                       << " bytes of body looked complete";
  EXPECT_EQ(fake_->num_completions(), 1);
}

// `kill -STOP` on a replica: the health checks find it dead, and the requests it
// holds — which would otherwise wait for their timeouts (here the defaults: a minute for the
// stream's first byte, ten for the non-streamed reply) — end at once. Nothing of either reached
// the client, so both are retried on the other replica.
TEST_F(RouterWithFake, RequestsInFlightOnADeadReplicaAreRetried) {
  RouterStackConfig c;
  c.pool.poll_timeout = 300ms;
  c.pool.failed_polls_to_dead = 2;
  start({.replica_id = "fake", .blocks = FakeReplica::blocks_of(held_prompt())}, c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  const json plain = {{"model", "tiny"}, {"prompt", held_prompt()}, {"max_tokens", 2}};
  json streamed = plain;
  streamed["stream"] = true;
  auto a = std::async(std::launch::async, [&] { return post(plain, 30s); });
  auto b = std::async(std::launch::async, [&] { return post(streamed, 30s); });
  ASSERT_TRUE(eventually([&] { return fake_->num_completions() == 2; }, 10s));
  const auto stalled_at = std::chrono::steady_clock::now();
  fake_->stall();
  for (auto* f : {&a, &b}) {
    auto r = f->get();
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "good");
  }
  // Two failed polls of 300 ms each, 100 ms apart, then a retry on the CPU replica.
  EXPECT_LT(std::chrono::steady_clock::now() - stalled_at, 10s);
  EXPECT_EQ(stack_->server().stats().retries(), 2);
}

// A stream that already sent bytes when its replica is found dead cannot be retried:
// it ends with an error event saying why.
TEST_F(RouterWithFake, StartedStreamOfADeadReplicaEndsWithAnErrorEvent) {
  RouterStackConfig c;
  c.pool.poll_timeout = 300ms;
  c.pool.failed_polls_to_dead = 2;
  start({.replica_id = "fake",
         .completions = FakeReplica::Completions::kStreamThenStall,
         .blocks = FakeReplica::blocks_of(held_prompt())},
        c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  auto f = std::async(std::launch::async, [&] {
    return post({{"model", "tiny"}, {"prompt", held_prompt()}, {"stream", true}}, 30s);
  });
  ASSERT_TRUE(eventually([&] { return fake_->num_completions() == 1; }, 10s));
  fake_->stall();
  auto r = f.get();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "fake");
  EXPECT_NE(r->body.find("data: {\"error\":"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("stopped answering health checks"), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos);
}

// When the circuit breaker opened, the replica's index entries used to stay (400
// blocks for 9 s in the probe), drawing prefix matches to it the moment it closed. They go when
// it opens, and come back with a fresh snapshot once the replica is healthy again.
TEST_F(RouterWithFake, OpenBreakerDropsTheReplicasIndexEntriesUntilItRecovers) {
  RouterStackConfig c;
  c.router.policy = "round_robin";  // fake first, then (a retry) good: the fake fails every time
  c.pool.failures_to_open = 3;
  c.pool.open_for = 6s;  // open for longer than a loaded machine takes to read the state below
  const std::vector<BlockHash> blocks = FakeReplica::blocks_of(held_prompt());
  start({.replica_id = "fake", .completion_status = 500, .blocks = blocks}, c);
  ASSERT_TRUE(wait_exact(*stack_, "fake"));
  ASSERT_TRUE(
      eventually([&] { return fake_state().value("index_blocks", 0u) == blocks.size(); }, 10s));
  // Each request fails on the fake with a 500 and is retried on "good"; the third failure opens
  // the breaker.
  for (int i = 0; i < 3; ++i) {
    auto r =
        post({{"model", "tiny"}, {"prompt", held_prompt() + std::to_string(i)}, {"max_tokens", 1}});
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->header("x-kvcascade-replica").value_or("?"), "good");
  }
  ASSERT_EQ(fake_->num_completions(), 3);
  const json open = fake_state();
  EXPECT_FALSE(open.value("healthy", true));
  EXPECT_EQ(open.value("index_blocks", 999u), 0u) << open.dump();
  // Breaker closed, health checks pass: resubscribed, its snapshot is back.
  EXPECT_TRUE(
      eventually([&] { return fake_state().value("index_blocks", 0u) == blocks.size(); }, 20s))
      << fake_state().dump();
}

// The same for a replica without KV events (approximate mode): the entries the router inserted
// when it sent requests there go when its breaker opens.
TEST_F(RouterWithFake, OpenBreakerDropsApproximateEntriesToo) {
  RouterStackConfig c;
  c.router.policy = "round_robin";
  c.pool.failures_to_open = 3;
  c.pool.open_for = 30s;
  start({.replica_id = "fake", .completion_status = 500, .blocks = {}}, c);
  for (int i = 0; i < 3; ++i) {
    auto r =
        post({{"model", "tiny"}, {"prompt", held_prompt() + std::to_string(i)}, {"max_tokens", 1}});
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->status, 200) << r->body;
  }
  ASSERT_EQ(fake_->num_completions(), 3);
  const json open = fake_state();
  EXPECT_FALSE(open.value("exact", true));
  EXPECT_FALSE(open.value("healthy", true));
  EXPECT_EQ(open.value("approx_blocks", 999u), 0u) << open.dump();
}

// Kvcascade_router_retries_total was registered but never incremented.
TEST_F(RouterWithFake, RetriesAreCountedInMetrics) {
  RouterStackConfig c;
  c.router.policy = "round_robin";  // fake first, then (a retry) good
  start({.replica_id = "fake", .completion_status = 503, .blocks = {}}, c);
  EXPECT_EQ(metric("kvcascade_router_retries_total"), 0);
  for (int i = 0; i < 2; ++i) {
    auto r =
        post({{"model", "tiny"}, {"prompt", held_prompt() + std::to_string(i)}, {"max_tokens", 1}});
    ASSERT_TRUE(r.ok()) << r.error().message;
    ASSERT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(fake_->num_completions(), 2);
  EXPECT_EQ(metric("kvcascade_router_retries_total"), 2);
  EXPECT_EQ(state()["retries"], 2);
}

// Three replicas that publish KV events (exact mode) and hold every completion: a prompt sent
// to one is queued there, its blocks not yet stored, so no KV event says it is held.
class RouterWithHoldingReplicas : public ::testing::Test {
 protected:
  void start(RouterStackConfig c = {}) {
    for (int i = 0; i < 3; ++i) {
      const std::string id = "hold" + std::to_string(i);
      fakes_.push_back(std::make_unique<FakeReplica>(FakeReplica::Options{
          .replica_id = id, .blocks = FakeReplica::blocks_of("what " + id + " held before")}));
      c.replicas.push_back(fakes_.back()->address());
    }
    c.pool.poll_interval = 100ms;
    stack_ = std::make_unique<RouterStack>(std::move(c));
    auto port = stack_->start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok());
    port_ = *port;
    for (int i = 0; i < 3; ++i)
      ASSERT_TRUE(wait_exact(*stack_, "hold" + std::to_string(i)));
  }
  void TearDown() override {
    if (stack_) stack_->stop();
    for (auto& s : sent_)
      s.wait();
    stack_.reset();
    fakes_.clear();
  }
  // Sends `prompt` (held: the client gives up after a while) and returns the fake it reached.
  // `extra`: more fields of the body (a group).
  int send(const std::string& prompt, const json& extra = json::object()) {
    std::vector<int> before;
    for (auto& f : fakes_)
      before.push_back(f->num_completions());
    json body = {{"model", "tiny"}, {"prompt", prompt}, {"max_tokens", 4}};
    for (auto it = extra.begin(); it != extra.end(); ++it)
      body[it.key()] = it.value();
    sent_.push_back(std::async(std::launch::async, [this, text = body.dump()] {
      http::Client client;
      (void)client.request("127.0.0.1", port_, "POST", "/v1/completions", text,
                           {{"content-type", "application/json"}}, 3s);
    }));
    int reached = -1;
    EXPECT_TRUE(eventually(
        [&] {
          for (size_t i = 0; i < fakes_.size(); ++i)
            if (fakes_[i]->num_completions() > before[i]) reached = static_cast<int>(i);
          return reached >= 0;
        },
        10s));
    return reached;
  }
  // Blocks of `prompt` the router counts as sent to fake `i` and not yet reported stored.
  size_t routed_blocks(int i, const std::string& prompt) {
    uint32_t index = 0;
    for (const ReplicaView& r : stack_->pool().snapshot())
      if (r.replica_id == "hold" + std::to_string(i)) index = r.index;
    std::lock_guard lock(stack_->indexes().mu);
    return stack_->indexes().routed.match(FakeReplica::blocks_of(prompt)).blocks_for(index);
  }
  static std::string document(int k) {
    std::string s = "Document " + std::to_string(k) + " that several questions are asked about. ";
    while (s.size() < 600)
      s += "Its paragraph " + std::to_string(s.size()) + " says something of note. ";
    return s;
  }

  std::vector<std::unique_ptr<FakeReplica>> fakes_;
  std::unique_ptr<RouterStack> stack_;
  std::vector<std::future<void>> sent_;
  uint16_t port_ = 0;
};

// A second question about a document whose first question is still queued on a replica (its
// blocks stored nowhere yet, so no KV event names them) goes where the first went: the router
// counts what it sent as held there until the replica's events say so. Before, each question
// was placed as a cold prompt (by its own last block), and the document was prefilled on two
// replicas. Six documents: by chance alone all six pairs meet with probability 1/729.
TEST_F(RouterWithHoldingReplicas, APromptStillQueuedCountsAsHeldWhereItWasSent) {
  start();
  for (int k = 0; k < 6; ++k) {
    const int first = send(document(k) + "What is its title?");
    ASSERT_GE(first, 0);
    EXPECT_GE(routed_blocks(first, document(k)), document(k).size() / 16);
    EXPECT_EQ(send(document(k) + "Who wrote it, and when?"), first) << "document " << k;
  }
}

// A paused replica (POST /v1/admin/pause: it admits nothing until resumed; its /v1/load says
// "paused") used to keep getting new requests, which waited there for a resume or the client's
// timeout. While another replica can take a request it gets none, not even a prompt it holds,
// and /router/state shows the pause; a group already placed there still goes there (its members
// start together). With every replica paused a request is still sent to one, where it waits for
// a resume, as before.
TEST_F(RouterWithHoldingReplicas, APausedReplicaGetsNoRequestWhileAnotherCanTakeIt) {
  RouterStackConfig c;
  // The group's pin must outlast two poll rounds on a loaded machine.
  c.router.siblings.window = std::chrono::seconds(60);
  start(std::move(c));
  auto next_polls = [&] {  // a whole poll round after now
    const uint64_t rounds = stack_->pool().num_poll_rounds();
    return eventually([&] { return stack_->pool().num_poll_rounds() >= rounds + 2; }, 10s);
  };
  const json group = {{"group", "rollouts"}, {"group_size", 2}};
  const int home = send("a group's shared prompt", group);
  ASSERT_GE(home, 0);
  const int also_paused = (home + 1) % 3, unpaused = (home + 2) % 3;
  fakes_[home]->set_paused(true);
  fakes_[also_paused]->set_paused(true);
  ASSERT_TRUE(next_polls());
  EXPECT_EQ(send("a group's shared prompt", group), home);  // the group's second member
  for (int i : {home, also_paused}) {  // prompts a paused replica holds (else it would take them)
    const std::string id = "hold" + std::to_string(i);
    EXPECT_EQ(send("what " + id + " held before, and a question about it"), unpaused) << id;
  }
  for (int k = 0; k < 4; ++k)  // cold prompts (else spread by rendezvous)
    EXPECT_EQ(send(document(k) + "What is its title?"), unpaused) << "document " << k;
  EXPECT_EQ(fakes_[also_paused]->num_completions(), 0);
  const json state = get_json(port_, "/router/state");
  for (const json& r : state["replicas"]) {
    const bool want = r.value("replica_id", std::string()) != "hold" + std::to_string(unpaused);
    EXPECT_EQ(r.value("paused", false), want) << r.dump();
  }
  // Every replica paused: the request is sent all the same, and waits there.
  fakes_[unpaused]->set_paused(true);
  ASSERT_TRUE(next_polls());
  EXPECT_GE(send("asked while every replica is paused"), 0);
}

// The routed entries go when the replica reports the blocks removed, and expire on their own.
TEST_F(RouterWithHoldingReplicas, RoutedEntriesGoWithRemovedEventsAndTheirLifetime) {
  RouterStackConfig c;
  c.routed_ttl = 5s;  // long enough that a loaded machine sees the removal before the expiry
  start(c);
  const std::string doc = document(0);
  const int to = send(doc + "A question.");
  ASSERT_GE(to, 0);
  ASSERT_GE(routed_blocks(to, doc), doc.size() / 16);
  // The replica evicts the document's second half: it holds the first half at most.
  const std::vector<BlockHash> blocks = FakeReplica::blocks_of(doc);
  const size_t half = blocks.size() / 2;
  ASSERT_TRUE(fakes_[to]->publish({KvRemoved{
      std::vector<BlockHash>(blocks.begin() + static_cast<ptrdiff_t>(half), blocks.end())}}));
  EXPECT_TRUE(eventually([&] { return routed_blocks(to, doc) == half; }, 5s))
      << routed_blocks(to, doc);
  // And nothing once the entries' lifetime passed with no event saying the replica holds them.
  EXPECT_TRUE(eventually([&] { return routed_blocks(to, doc) == 0; }, 10s));
}

// A replica announces a prompt it queued (KvQueued: from whichever router it came), and this
// router counts its blocks held there too: the whole chain for a cold prompt, and the path to
// the parent it holds plus the rest for one extending its cache; a later prompt sharing them
// goes there. An announcement whose parent the router does not know is dropped.
TEST_F(RouterWithHoldingReplicas, AReplicasQueuedEventCountsAsHeldThereForEveryRouter) {
  start();
  const std::string doc = document(4);
  const std::vector<BlockHash> cold = FakeReplica::blocks_of(doc);
  ASSERT_TRUE(fakes_[1]->publish({KvQueued{std::nullopt, cold}}));
  EXPECT_TRUE(eventually([&] { return routed_blocks(1, doc) == cold.size(); }, 5s));
  EXPECT_EQ(send(doc + "What is its title?"), 1);

  // hold2 holds the first block of "what hold2 held before": a prompt starting with those 16
  // bytes is announced past it.
  const std::string warm = std::string("what hold2 held before").substr(0, 16) + document(5);
  const std::vector<BlockHash> chain = FakeReplica::blocks_of(warm);
  // An announcement after a parent the router does not know places nothing (its blocks used
  // nowhere else); the one after it, on the same feed, shows both were applied.
  const std::string stray = document(6);
  const std::vector<BlockHash> stray_blocks = FakeReplica::blocks_of(stray);
  ASSERT_TRUE(fakes_[2]->publish(
      {KvQueued{BlockHash{0x5eed},
                std::vector<BlockHash>(stray_blocks.begin() + 1, stray_blocks.end())},
       KvQueued{chain[0], std::vector<BlockHash>(chain.begin() + 1, chain.end())}}));
  EXPECT_TRUE(eventually([&] { return routed_blocks(2, warm) == chain.size(); }, 5s));
  EXPECT_EQ(send(warm + "Who wrote it?"), 2);
  EXPECT_EQ(routed_blocks(2, stray), 0u);
  std::lock_guard lock(stack_->indexes().mu);
  EXPECT_TRUE(stack_->indexes().routed.chain_to(stray_blocks.back()).empty());
}

}  // namespace
}  // namespace kvc
