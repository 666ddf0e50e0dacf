#include "http/client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/server.h"
#include "tests/testing/fake_clock.h"

namespace kvc::http {
namespace {

using namespace std::chrono_literals;

ServerLimits test_limits() {
  ServerLimits l;
  l.header_timeout = 500ms;
  l.read_timeout = 500ms;
  l.idle_timeout = 2s;
  l.write_timeout = 500ms;
  return l;
}

uint16_t listen_or_die(Server& server) {
  auto port = server.listen("127.0.0.1", 0);
  EXPECT_TRUE(port.ok());
  return port.ok() ? *port : 0;
}

// A port nobody listens on: bound and kept bound without listening (a connect there is
// refused), so no other process can take it while the test runs, as one could once it was closed.
class RefusingPort {
 public:
  RefusingPort() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  uint16_t port() const { return port_; }

 private:
  int fd_;
  uint16_t port_ = 0;
};

TEST(ClientTest, HostPortAddresses) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(parse_host_port("127.0.0.1:8001", host, port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 8001);
  ASSERT_TRUE(parse_host_port("http://replica-0.svc:80/", host, port));
  EXPECT_EQ(host, "replica-0.svc");
  EXPECT_EQ(port, 80);
  ASSERT_TRUE(parse_host_port("[::1]:65535", host, port));
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 65535);
  for (const char* bad : {"", "host", ":80", "host:", "host:0", "host:65536", "host:8x",
                          "ftp://host:21", "http://host:80/v1", "host:123456"}) {
    EXPECT_FALSE(parse_host_port(bad, host, port)) << bad;
  }
}

TEST(ClientTest, RequestRoundTripReusesOneConnection) {
  Server server(test_limits(), [](Request req, std::shared_ptr<Responder> r) {
    r->send(201, "application/json", "{\"got\":\"" + req.body + "\"}",
            {{"x-target", req.target}, {"x-auth", req.header("AUTHORIZATION").value_or("")}});
  });
  uint16_t port = listen_or_die(server);
  Client client;
  for (int i = 0; i < 5; ++i) {
    auto r = client.request("127.0.0.1", port, "POST", "/v1/x?i=" + std::to_string(i), "b",
                            {{"Authorization", "Bearer t"}});
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->status, 201);
    EXPECT_EQ(r->body, "{\"got\":\"b\"}");
    EXPECT_EQ(r->header("X-Target"), "/v1/x?i=" + std::to_string(i));
    EXPECT_EQ(r->header("x-auth"), "Bearer t");
  }
  EXPECT_EQ(client.num_connects(), 1u);
  EXPECT_EQ(server.num_accepted(), 1u);
}

TEST(ClientTest, ConnectErrorIsAResult) {
  Client client;
  const RefusingPort refusing;
  const uint16_t port = refusing.port();
  ASSERT_NE(port, 0);
  auto r = client.request("127.0.0.1", port, "GET", "/", {}, {}, 2s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("connect"), std::string::npos) << r.error().message;

  std::promise<Status> done;
  bool saw_headers = false;
  std::atomic<bool> saw_timeout{false};
  StreamOptions options;
  options.on_timeout = [&] { saw_timeout = true; };  // nothing was delivered: not a late answer
  client.stream(
      "127.0.0.1", port, "GET", "/", {}, {}, [&](int, const Headers&) { saw_headers = true; },
      [](std::string_view) { return true; }, [&](Status s) { done.set_value(s); }, options);
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  EXPECT_FALSE(f.get().ok());
  EXPECT_FALSE(saw_headers);
  EXPECT_FALSE(saw_timeout.load());
}

TEST(ClientTest, StreamDeliversChunksIncrementallyAndInOrder) {
  // The server writes chunk i+1 only after the client has seen chunk i: if the client buffered
  // the body, this would stall and fail on the timeouts.
  std::mutex mu;
  std::condition_variable cv;
  int seen = 0;
  std::thread worker;
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    r->start_stream(200, "text/event-stream", {{"x-kvcascade-replica", "r1"}});
    worker = std::thread([&, r] {
      for (int i = 0; i < 5; ++i) {
        r->write("data: " + std::to_string(i) + "\n\n");
        std::unique_lock lock(mu);
        if (!cv.wait_for(lock, 2s, [&] { return seen > i; })) break;
      }
      r->end();
    });
  });
  uint16_t port = listen_or_die(server);
  Client client;
  std::promise<Status> done;
  int status = 0;
  std::string got;
  client.stream(
      "127.0.0.1", port, "POST", "/v1/completions", "{}", {},
      [&](int s, const Headers& h) {
        status = s;
        bool found = false;
        for (auto& [n, v] : h)
          found |= n == "x-kvcascade-replica" && v == "r1";
        EXPECT_TRUE(found);
      },
      [&](std::string_view bytes) {
        got.append(bytes);
        std::lock_guard lock(mu);
        // count whole events seen so far
        int events = 0;
        for (size_t p = got.find("\n\n"); p != std::string::npos; p = got.find("\n\n", p + 2)) {
          ++events;
        }
        seen = events;
        cv.notify_all();
        return true;
      },
      [&](Status s) { done.set_value(s); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f.get().ok());
  worker.join();
  EXPECT_EQ(status, 200);
  EXPECT_EQ(got, "data: 0\n\ndata: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n");
}

TEST(ClientTest, CancelFromOnChunkEndsExchangeAndServerSeesGone) {
  std::promise<void> server_saw_gone;
  std::thread worker;
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    r->on_client_gone([&] { server_saw_gone.set_value(); });
    r->start_stream(200, "text/event-stream");
    worker = std::thread([r] {
      for (int i = 0; i < 2000 && !r->client_gone(); ++i) {
        r->write("data: x\n\n");
        std::this_thread::sleep_for(1ms);
      }
      r->end();
    });
  });
  uint16_t port = listen_or_die(server);
  Client client;
  std::promise<Status> done;
  client.stream(
      "127.0.0.1", port, "GET", "/s", {}, {}, nullptr, [](std::string_view) { return false; },
      [&](Status s) { done.set_value(s); });
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  Status s = f.get();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "cancelled");
  EXPECT_EQ(server_saw_gone.get_future().wait_for(2s), std::future_status::ready);
  worker.join();
}

// A Cancellation ends an exchange from another thread (the router: its client left, or the
// replica was found dead): on_done gets the reason at once and the server sees the client go.
TEST(ClientTest, CancellationEndsAnExchangeFromAnotherThread) {
  std::shared_ptr<Responder> held;
  std::promise<void> server_saw_gone;
  std::mutex mu;
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    r->on_client_gone([&] { server_saw_gone.set_value(); });
    std::lock_guard lock(mu);
    held = std::move(r);  // never answers
  });
  uint16_t port = listen_or_die(server);
  Client client;
  auto cancellation = std::make_shared<Cancellation>();
  std::promise<Status> done;
  StreamOptions options;
  options.cancellation = cancellation;
  client.stream(
      "127.0.0.1", port, "POST", "/hold", "{}", {}, nullptr, nullptr,
      [&](Status s) { done.set_value(s); }, options);
  for (int i = 0; i < 500; ++i) {
    {
      std::lock_guard lock(mu);
      if (held) break;
    }
    std::this_thread::sleep_for(2ms);
  }
  cancellation->cancel("the caller went away");
  cancellation->cancel("a second reason is ignored");
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  Status s = f.get();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.message(), "the caller went away");
  EXPECT_EQ(server_saw_gone.get_future().wait_for(2s), std::future_status::ready);
  std::lock_guard lock(mu);
  held.reset();
}

// Cancelled before it starts: the exchange ends at once and never reaches the server.
TEST(ClientTest, CancellationBeforeTheStartEndsTheExchangeAtOnce) {
  std::atomic<int> requests{0};
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    ++requests;
    r->send(200, "text/plain", "ok");
  });
  uint16_t port = listen_or_die(server);
  Client client;
  StreamOptions options;
  options.cancellation = std::make_shared<Cancellation>();
  options.cancellation->cancel("too late");
  std::promise<Status> done;
  client.stream(
      "127.0.0.1", port, "GET", "/", {}, {}, nullptr, nullptr, [&](Status s) { done.set_value(s); },
      options);
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  EXPECT_EQ(f.get().message(), "too late");
  EXPECT_EQ(client.num_connects(), 0u);
  EXPECT_EQ(requests.load(), 0);
  // Cancelling after the end changes nothing.
  options.cancellation->cancel("again");
}

// StreamOptions override the client's timeouts for one exchange: a short wait for the response
// headers (the router's first-byte timeout) and a short silence inside the body (its idle
// timeout), on a client whose own limits are long. Both answers were late after the request was
// out: on_timeout hears of each before on_done (the router answers 504 then).
TEST(ClientTest, StreamOptionsOverrideTheTimeouts) {
  std::vector<std::shared_ptr<Responder>> held;
  std::mutex mu;
  Server server(test_limits(), [&](Request req, std::shared_ptr<Responder> r) {
    if (req.target == "/half") {
      r->start_stream(200, "text/event-stream");
      r->write("data: 1\n\n");  // then silence
    }
    std::lock_guard lock(mu);
    held.push_back(std::move(r));
  });
  uint16_t port = listen_or_die(server);
  ClientLimits limits;
  limits.response_header_timeout = 60s;
  limits.body_idle_timeout = 60s;
  Client client(limits);
  auto run = [&](const std::string& target, StreamOptions options, std::string* body) {
    std::promise<Status> done;
    client.stream(
        "127.0.0.1", port, "GET", target, {}, {}, nullptr,
        [body](std::string_view b) {
          body->append(b);
          return true;
        },
        [&](Status s) { done.set_value(s); }, options);
    auto f = done.get_future();
    EXPECT_EQ(f.wait_for(5s), std::future_status::ready);
    return f.get();
  };
  std::string body;
  std::atomic<int> timeouts{0};
  StreamOptions first_byte;
  first_byte.response_header_timeout = 200ms;
  first_byte.on_timeout = [&] { ++timeouts; };
  auto start = std::chrono::steady_clock::now();
  Status s = run("/hold", first_byte, &body);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(s.message(), "no response from 127.0.0.1:" + std::to_string(port) + " within 200 ms");
  EXPECT_EQ(timeouts.load(), 1);
  StreamOptions idle;
  idle.body_idle_timeout = 200ms;
  idle.on_timeout = [&] { ++timeouts; };
  start = std::chrono::steady_clock::now();
  s = run("/half", idle, &body);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(body, "data: 1\n\n");
  EXPECT_EQ(s.message(),
            "response from 127.0.0.1:" + std::to_string(port) + " stalled: nothing for 200 ms");
  EXPECT_EQ(timeouts.load(), 2);
  std::lock_guard lock(mu);
  held.clear();
}

TEST(ClientTest, RequestTimeoutIsAnError) {
  std::shared_ptr<Responder> held;
  std::mutex mu;
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    std::lock_guard lock(mu);
    held = std::move(r);  // never answers
  });
  uint16_t port = listen_or_die(server);
  Client client;
  auto start = std::chrono::steady_clock::now();
  auto r = client.request("127.0.0.1", port, "GET", "/", {}, {}, 200ms);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
  std::lock_guard lock(mu);
  held.reset();
}

// A request() whose timeout is longer than the client's response_header_timeout waits for a
// late header as long as its timeout says (a router's fleet weight update waits minutes for a
// replica that drains first; the limit cut it at 30 s).
TEST(ClientTest, RequestTimeoutLongerThanTheHeaderLimitWaitsForALateHeader) {
  std::vector<std::thread> answers;
  std::mutex mu;
  struct JoinAll {  // also when an assertion returns early
    std::vector<std::thread>& threads;
    std::mutex& mu;
    ~JoinAll() {
      std::lock_guard lock(mu);
      for (std::thread& t : threads)
        t.join();
    }
  } join_all{answers, mu};
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    std::lock_guard lock(mu);
    answers.emplace_back([r] {
      std::this_thread::sleep_for(300ms);
      r->send(200, "text/plain", "late");
    });
  });
  uint16_t port = listen_or_die(server);
  ClientLimits limits;
  limits.response_header_timeout = 100ms;
  Client client(limits);
  auto r = client.request("127.0.0.1", port, "POST", "/", "x", {}, 5s);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->body, "late");
  // A timeout shorter than the limit still ends the wait at the timeout.
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(client.request("127.0.0.1", port, "POST", "/", "x", {}, 50ms).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);
}

// StreamOptions::on_written says whether the request reached a connection: a caller that gets
// an error after it cannot tell whether the server acted on the request (a router's fleet weight
// update reports that replica's outcome as unknown); refused on connect, it never fires.
TEST(ClientTest, OnWrittenSaysWhetherTheRequestWentOut) {
  Server server(test_limits(),
                [](Request, std::shared_ptr<Responder> r) { r->send(200, "text/plain", "ok"); });
  const uint16_t port = listen_or_die(server);
  auto sent = [&](uint16_t to) {
    Client client;  // its own: no kept-alive connection to the stopped server
    std::atomic<bool> written{false};
    StreamOptions options;
    options.on_written = [&written] { written = true; };
    (void)client.request("127.0.0.1", to, "POST", "/", "x", {}, 5s, std::nullopt,
                         std::move(options));
    return written.load();
  };
  EXPECT_TRUE(sent(port));
  server.stop();
  EXPECT_FALSE(sent(port));  // nothing listens there now: refused on connect
}

// Pooled connections age on the client's Clock: older than pool_idle_timeout, one is dropped and
// the next request connects anew; younger, it is reused. No sleeping: a FakeClock moves.
TEST(ClientTest, PooledConnectionsAgeOnTheInjectedClock) {
  Server server(test_limits(),
                [](Request, std::shared_ptr<Responder> r) { r->send(200, "text/plain", "ok"); });
  uint16_t port = listen_or_die(server);
  kvc::testing::FakeClock clock;
  ClientLimits limits;
  limits.pool_idle_timeout = std::chrono::seconds(30);
  Client client(limits, clock);
  ASSERT_TRUE(client.request("127.0.0.1", port, "GET", "/").ok());
  clock.advance(std::chrono::seconds(29));
  ASSERT_TRUE(client.request("127.0.0.1", port, "GET", "/").ok());
  EXPECT_EQ(client.num_connects(), 1u) << "29 s old: reused";
  clock.advance(std::chrono::seconds(31));
  ASSERT_TRUE(client.request("127.0.0.1", port, "GET", "/").ok());
  EXPECT_EQ(client.num_connects(), 2u) << "31 s old: dropped, a new connection";
}

TEST(ClientTest, PooledConnectionClosedByServerIsReplaced) {
  ServerLimits limits = test_limits();
  limits.idle_timeout = 50ms;
  Server server(limits,
                [](Request, std::shared_ptr<Responder> r) { r->send(200, "text/plain", "ok"); });
  uint16_t port = listen_or_die(server);
  Client client;
  ASSERT_TRUE(client.request("127.0.0.1", port, "GET", "/").ok());
  // The server closes the idle connection (its idle timer: real time, in the socket layer).
  for (int i = 0; i < 500 && server.num_connections() > 0; ++i)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server.num_connections(), 0u);
  auto r = client.request("127.0.0.1", port, "GET", "/");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->body, "ok");
  EXPECT_EQ(client.num_connects(), 2u);
}

TEST(ClientTest, ResponseBodyOverLimitIsAnError) {
  Server server(test_limits(), [](Request, std::shared_ptr<Responder> r) {
    r->send(200, "text/plain", std::string(10000, 'z'));
  });
  uint16_t port = listen_or_die(server);
  ClientLimits limits;
  limits.max_body_bytes = 1000;
  Client client(limits);
  auto r = client.request("127.0.0.1", port, "GET", "/");
  EXPECT_FALSE(r.ok());
}

TEST(ClientTest, DestroyingClientEndsInFlightStreams) {
  std::shared_ptr<Responder> held;
  std::mutex mu;
  Server server(test_limits(), [&](Request, std::shared_ptr<Responder> r) {
    std::lock_guard lock(mu);
    held = std::move(r);
  });
  uint16_t port = listen_or_die(server);
  std::promise<Status> done;
  {
    Client client;
    client.stream("127.0.0.1", port, "GET", "/", {}, {}, nullptr, nullptr,
                  [&](Status s) { done.set_value(s); });
    for (int i = 0; i < 200; ++i) {
      {
        std::lock_guard lock(mu);
        if (held) break;
      }
      std::this_thread::sleep_for(2ms);
    }
  }
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(0s), std::future_status::ready);
  EXPECT_FALSE(f.get().ok());
  std::lock_guard lock(mu);
  held.reset();
}

// A proxy: the front server's handler forwards through a client built on the front server's own
// io_context (its callbacks run on the thread that read the request, as in RouterStack), one
// thread. Then shutdown() ends an exchange in flight while that io_context still runs, refuses new
// ones, and the front server stops cleanly afterwards.
TEST(ClientTest, ClientOnAServersIoContextProxiesAndShutsDown) {
  std::shared_ptr<Responder> held;
  std::mutex mu;
  Server upstream(test_limits(), [&](Request req, std::shared_ptr<Responder> r) {
    if (req.target == "/hold") {
      std::lock_guard lock(mu);
      held = std::move(r);
      return;
    }
    r->send(200, "text/plain", "upstream saw " + req.target);
  });
  const uint16_t up = listen_or_die(upstream);
  std::unique_ptr<Client> client;
  Server front(
      test_limits(),
      [&](Request req, std::shared_ptr<Responder> r) {
        auto body = std::make_shared<std::string>();
        client->stream(
            "127.0.0.1", up, "GET", req.target, {}, {}, nullptr,
            [body](std::string_view b) {
              body->append(b);
              return true;
            },
            [r, body](Status s) {
              if (s.ok())
                r->send(200, "text/plain", *body);
              else
                r->send(502, "text/plain", s.message());
            });
      },
      1);
  client = std::make_unique<Client>(ClientLimits{}, front);
  const uint16_t port = listen_or_die(front);
  Client outside;
  for (int i = 0; i < 3; ++i) {
    auto r = outside.request("127.0.0.1", port, "GET", "/p" + std::to_string(i));
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "upstream saw /p" + std::to_string(i));
  }
  std::promise<Status> done;
  client->stream("127.0.0.1", up, "GET", "/hold", {}, {}, nullptr, nullptr,
                 [&](Status s) { done.set_value(s); });
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard lock(mu);
      if (held) break;
    }
    std::this_thread::sleep_for(2ms);
  }
  client->shutdown();
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  EXPECT_FALSE(f.get().ok());
  bool refused = false;
  client->stream("127.0.0.1", up, "GET", "/late", {}, {}, nullptr, nullptr,
                 [&](Status s) { refused = !s.ok(); });
  EXPECT_TRUE(refused);  // at once, on this thread
  front.stop();
  client.reset();
  std::lock_guard lock(mu);
  held.reset();
}

}  // namespace
}  // namespace kvc::http
