// The HTTP server: connections over time (header, body, idle and write timeouts, clients that
// disconnect or half-close, handlers that throw or drop the responder, connection limits and the
// probes' slots, concurrency, stop, a busy port).
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <thread>

#include "http/client.h"
#include "http/errors.h"
#include "tests/http/raw_conn.h"
#include "tests/http/server_test_util.h"

namespace kvc::http {
namespace {

using namespace std::chrono_literals;
using testing::echo;
using testing::expect_error_body;
using testing::listen_or_die;
using testing::RawConn;
using testing::short_limits;

TEST(ServerTest, SlowHeadersAreCutByHeaderTimeout) {
  Server server(short_limits(), echo);
  RawConn c(listen_or_die(server));
  auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\n"));  // never finishes the headers
  auto r = c.read_response(2s);
  auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_GE(elapsed, 150ms);
  EXPECT_LT(elapsed, 1500ms);
  EXPECT_TRUE(c.wait_closed(2s));
}

TEST(ServerTest, SlowBodyIsCutByReadTimeout) {
  Server server(short_limits(), echo);
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"));
  auto r = c.read_response(2s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
}

TEST(ServerTest, IdleKeepAliveConnectionIsClosed) {
  Server server(short_limits(), echo);
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(c.read_response());
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.wait_closed(2s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
}

// A handler that streams from its own thread until the client is gone (the engine's shape).
struct Streamer {
  std::atomic<bool> gone_fired{false};
  std::atomic<bool> saw_gone{false};
  std::atomic<int> chunks_written{0};
  std::promise<void> finished;
  std::thread worker;
  size_t chunk_bytes = 64 << 10;
  int max_chunks = 400;

  ~Streamer() {
    if (worker.joinable()) worker.join();
  }

  // The stream ended `within` the time because the client went (seen by the worker and by the
  // client-gone callback), before all of it was written.
  void expect_cut_short(std::chrono::seconds within) {
    ASSERT_EQ(finished.get_future().wait_for(within), std::future_status::ready);
    EXPECT_TRUE(saw_gone);
    EXPECT_TRUE(gone_fired);
    EXPECT_LT(chunks_written.load(), max_chunks);
  }

  Handler handler() {
    return [this](Request, std::shared_ptr<Responder> r) {
      r->on_client_gone([this] { gone_fired = true; });
      r->start_stream(200, "text/event-stream");
      worker = std::thread([this, r] {
        for (int i = 0; i < max_chunks && !r->client_gone(); ++i) {
          r->write("data: " + std::string(chunk_bytes, 'x') + "\n\n");
          ++chunks_written;
          std::this_thread::sleep_for(1ms);
        }
        saw_gone = r->client_gone();
        r->end();
        finished.set_value();
      });
    };
  }
};

TEST(ServerTest, ClientThatStopsReadingIsCutByWriteTimeout) {
  Streamer streamer;
  Server server(short_limits(), streamer.handler());
  RawConn c(listen_or_die(server), /*rcvbuf=*/4096);
  ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  // never read: the server's writes stall and write_timeout cuts the connection
  streamer.expect_cut_short(5s);
}

TEST(ServerTest, ClientDisconnectMidStreamMarksGone) {
  Streamer streamer;
  streamer.chunk_bytes = 16;
  streamer.max_chunks = 5000;
  Server server(short_limits(), streamer.handler());
  {
    RawConn c(listen_or_die(server));
    ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
    EXPECT_NE(c.read_some(1s).find("200"), std::string::npos);
  }  // closes mid-stream
  streamer.expect_cut_short(3s);
}

TEST(ServerTest, DisconnectWhileHandlerHoldsResponderIsNoticed) {
  // no writes by the handler: the FIN is probed (interim 100s) and the reset it draws is seen
  std::promise<void> fired;
  std::shared_ptr<Responder> held;
  std::mutex mu;
  Server server(short_limits(), [&](Request, std::shared_ptr<Responder> r) {
    r->on_client_gone([&] { fired.set_value(); });
    std::lock_guard lock(mu);
    held = r;
  });
  {
    RawConn c(listen_or_die(server));
    ASSERT_TRUE(c.send("POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(fired.get_future().wait_for(2s), std::future_status::ready);
  std::lock_guard lock(mu);
  ASSERT_TRUE(held);
  EXPECT_TRUE(held->client_gone());
  held->send(200, "text/plain", "too late");  // harmless
}

// A client that half-closes once its request is out (nc -N, some HTTP/1.0 clients and load
// balancers) is answered, streamed or not: end of stream is not "gone". A reply that takes longer
// than the probe interval is preceded by interim 100s on HTTP/1.1 (none on HTTP/1.0), and the
// connection closes after the response.
TEST(ServerTest, HalfClosedClientIsAnswered) {
  std::mutex mu;
  std::vector<std::thread> workers;
  std::atomic<int> gone{0};
  Server server(short_limits(), [&](Request req, std::shared_ptr<Responder> r) {
    r->on_client_gone([&] { ++gone; });
    const bool stream = req.target == "/stream";
    const bool slow = req.target != "/quick";
    std::lock_guard lock(mu);
    workers.emplace_back([r, stream, slow] {
      if (slow) std::this_thread::sleep_for(350ms);
      if (stream) {
        r->start_stream(200, "text/event-stream");
        for (int i = 0; i < 3; ++i) {
          r->write("data: " + std::to_string(i) + "\n\n");
          std::this_thread::sleep_for(20ms);
        }
        r->end();
      } else {
        r->send(200, "text/plain", "answered");
      }
    });
  });
  const uint16_t port = listen_or_die(server);
  struct Case {
    std::string target, version, want_body;
    bool want_interim;
  };
  for (const Case& k :
       {Case{"/slow", "1.1", "answered", true},
        Case{"/stream", "1.1", "data: 0\n\ndata: 1\n\ndata: 2\n\n", true},
        Case{"/quick", "1.1", "answered", false}, Case{"/slow", "1.0", "answered", false}}) {
    SCOPED_TRACE(k.target + " HTTP/" + k.version);
    RawConn c(port);
    ASSERT_TRUE(c.send("POST " + k.target + " HTTP/" + k.version +
                       "\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"));
    c.shutdown_send();
    int interim = 0;
    auto resp = c.read_final_response(&interim);
    ASSERT_TRUE(resp);
    EXPECT_EQ(resp->status, 200);
    EXPECT_EQ(resp->body, k.want_body);
    if (k.want_interim) {
      EXPECT_GE(interim, 1);
    } else {
      EXPECT_EQ(interim, 0);
    }
    EXPECT_TRUE(c.wait_closed(2s));
  }
  {
    std::lock_guard lock(mu);
    for (auto& w : workers)
      w.join();
  }
  EXPECT_EQ(gone.load(), 0);
}

// No request can follow a client's FIN: once every request it sent before the FIN is answered
// (pipelined ones included, in order), the connection closes at once, neither idling until
// idle_timeout nor lingering (the timeouts here are far longer than the waits). A read issued
// after the one that saw the FIN never completed (Asio's epoll reactor waits for a readiness edge
// that already came), so the connection stayed open until idle_timeout.
TEST(ServerTest, HalfClosedClientIsClosedOnceAnswered) {
  ServerLimits limits = short_limits();
  limits.header_timeout = 30s;
  limits.read_timeout = 30s;
  limits.idle_timeout = 30s;
  limits.linger_timeout = 30s;
  std::mutex mu;
  std::vector<std::thread> workers;
  Server server(limits, [&](Request req, std::shared_ptr<Responder> r) {
    if (req.target != "/slow") {
      echo(std::move(req), std::move(r));
      return;
    }
    std::lock_guard lock(mu);
    workers.emplace_back([r] {
      std::this_thread::sleep_for(150ms);
      r->send(200, "text/plain", "slow");
    });
  });
  struct JoinAll {  // before the server goes, however the test ends (a failed ASSERT returns early)
    std::mutex& mu;
    std::vector<std::thread>& workers;
    ~JoinAll() {
      std::lock_guard lock(mu);
      for (auto& w : workers)
        if (w.joinable()) w.join();
    }
  } join_all{mu, workers};
  const uint16_t port = listen_or_die(server);
  struct Case {
    std::string name, requests;
    std::vector<std::string> want_bodies;
  };
  const std::vector<Case> cases = {
      {"quick", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", {"GET /a "}},
      {"slow", "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", {"slow"}},
      {"pipelined",
       "GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: "
       "2\r\n\r\nbbGET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n",
       {"GET /a ", "POST /b bb", "slow", "GET /c "}},
      {"connection close", "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", {"GET /a "}},
      {"HTTP/1.0", "GET /a HTTP/1.0\r\n\r\n", {"GET /a "}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    RawConn c(port);
    ASSERT_TRUE(c.send(k.requests));
    c.shutdown_send();
    for (const std::string& want : k.want_bodies) {
      auto resp = c.read_final_response();
      ASSERT_TRUE(resp);
      EXPECT_EQ(resp->status, 200);
      EXPECT_EQ(resp->body, want);
    }
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(c.wait_closed(2s));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  }
}

TEST(ServerTest, ThrowingHandlerGets500AndServerKeepsServing) {
  Server server(short_limits(), echo);
  uint16_t port = listen_or_die(server);
  RawConn c(port);
  ASSERT_TRUE(c.send("GET /throw HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  expect_error_body(r->body);
  ASSERT_TRUE(c.send("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n"));  // same connection still works
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  RawConn other(port);
  ASSERT_TRUE(other.send("GET /other HTTP/1.1\r\nHost: x\r\n\r\n"));
  r = other.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "GET /other ");
}

TEST(ServerTest, DroppedResponderGets500) {
  Server server(short_limits(), [](Request, std::shared_ptr<Responder>) {});
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
}

TEST(ServerTest, MaxConnectionsExceededIs503) {
  ServerLimits limits = short_limits();
  limits.max_connections = 2;
  limits.idle_timeout = 5s;
  Server server(limits, echo);
  uint16_t port = listen_or_die(server);
  RawConn a(port), b(port);
  for (RawConn* c : {&a, &b}) {
    ASSERT_TRUE(c->send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c->read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  EXPECT_EQ(server.num_connections(), 2u);
  RawConn third(port);
  ASSERT_TRUE(third.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = third.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  expect_error_body(r->body);
  EXPECT_TRUE(third.wait_closed(2s));
  // a slot frees when a connection closes
  a.close();
  for (int i = 0; i < 100 && server.num_connections() > 1; ++i)
    std::this_thread::sleep_for(5ms);
  RawConn fourth(port);
  ASSERT_TRUE(fourth.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  r = fourth.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// Beyond max_connections a few connections are kept for health probes: a GET of a probe path is
// answered (and the connection closed), anything else gets the 503; with those slots taken too,
// a connection is refused at once.
TEST(ServerTest, HealthProbesAreAnsweredBeyondMaxConnections) {
  ServerLimits limits = short_limits();
  limits.max_connections = 1;
  limits.probe_connections = 1;
  limits.idle_timeout = 5s;
  limits.header_timeout = 5s;
  Server server(limits, echo);
  const uint16_t port = listen_or_die(server);
  RawConn held(port);
  ASSERT_TRUE(held.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  ASSERT_TRUE(held.read_response());
  EXPECT_EQ(server.num_connections(), 1u);
  auto probe_slot_free = [&] {
    for (int i = 0; i < 400 && server.num_probe_connections() > 0; ++i)
      std::this_thread::sleep_for(5ms);
    return server.num_probe_connections() == 0;
  };
  for (const char* probe : {"/livez", "/readyz?verbose=1", "/health"}) {
    ASSERT_TRUE(probe_slot_free());
    RawConn c(port);
    ASSERT_TRUE(c.send(std::string("GET ") + probe + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r) << probe;
    EXPECT_EQ(r->status, 200) << probe;
    EXPECT_TRUE(c.wait_closed(2s)) << probe;  // no keep-alive on a probe slot
  }
  for (const char* other : {"GET /v1/models", "POST /livez"}) {
    ASSERT_TRUE(probe_slot_free());
    RawConn c(port);
    ASSERT_TRUE(c.send(std::string(other) + " HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r) << other;
    EXPECT_EQ(r->status, 503) << other;
    expect_error_body(r->body);
  }
  // An idle connection holds the one probe slot: the next is refused without being read.
  ASSERT_TRUE(probe_slot_free());
  RawConn idle(port);
  for (int i = 0; i < 400 && server.num_probe_connections() == 0; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server.num_probe_connections(), 1u);
  RawConn refused(port);
  auto r = refused.read_response(1s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(refused.wait_closed(2s));
  EXPECT_EQ(server.num_connections(), 1u);  // probe slots are not counted as serving
}

TEST(ServerTest, ConcurrentClientsAllGetTheirAnswers) {
  ServerLimits limits = short_limits();
  limits.idle_timeout = 5s;
  Server server(limits, echo, 4);
  uint16_t port = listen_or_die(server);
  ClientLimits client_limits;
  client_limits.io_threads = 2;
  Client client(client_limits);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::string body = std::to_string(t) + "-" + std::to_string(i);
        auto r = client.request("127.0.0.1", port, "POST", "/c", body, {}, 5s);
        if (!r.ok() || r->status != 200 || r->body != "POST /c " + body) ++wrong;
      }
    });
  }
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(server.num_accepted(), 16u + 4u);  // keep-alive: about one connection per thread
}

TEST(ServerTest, StopClosesEverythingPromptly) {
  Streamer streamer;
  streamer.chunk_bytes = 16;
  streamer.max_chunks = 100000;
  auto server = std::make_unique<Server>(short_limits(), streamer.handler());
  RawConn c(listen_or_die(*server));
  ASSERT_TRUE(c.send("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_NE(c.read_some(1s).find("200"), std::string::npos);
  auto start = std::chrono::steady_clock::now();
  server->stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  EXPECT_TRUE(c.wait_closed(2s));
  auto done = streamer.finished.get_future();
  ASSERT_EQ(done.wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(streamer.saw_gone);
  server.reset();  // the streamer's responder may outlive the server harmlessly
}

TEST(ServerTest, ListenOnBusyPortIsAnError) {
  Server a(short_limits(), echo);
  uint16_t port = listen_or_die(a);
  Server b(short_limits(), echo);
  auto r = b.listen("127.0.0.1", port);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace kvc::http
