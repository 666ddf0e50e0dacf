// The HTTP server: requests and their framing (keep-alive, pipelining, bodies, limits on their
// size, malformed and ambiguous requests, Host, absolute-form targets, encodings, HEAD).
#include "http/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
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

// With one I/O thread (the default: connections share its executor) and with four (a strand
// each).
TEST(ServerTest, EchoKeepAliveSequentialAndPipelined) {
  for (int threads : {1, 4}) {
    Server server(short_limits(), echo, threads);
    uint16_t port = listen_or_die(server);
    RawConn c(port);
    ASSERT_TRUE(c.connected());
    for (int i = 0; i < 3; ++i) {
      std::string body = "hello" + std::to_string(i);
      ASSERT_TRUE(c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: " +
                         std::to_string(body.size()) + "\r\n\r\n" + body));
      auto r = c.read_response();
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200);
      EXPECT_EQ(r->body, "POST /echo " + body);
      EXPECT_EQ(r->header("x-kvcascade-replica"), "r0");
    }
    // pipelined: three requests in one write, answered in order
    ASSERT_TRUE(
        c.send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nContent-Length: "
               "2\r\n\r\nbbGET /c HTTP/1.1\r\nHost: x\r\n\r\n"));
    for (const char* expected : {"GET /a ", "POST /b bb", "GET /c "}) {
      auto r = c.read_response();
      ASSERT_TRUE(r);
      EXPECT_EQ(r->body, expected);
    }
    // Connection: close is honoured
    ASSERT_TRUE(c.send("GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->header("connection"), "close");
    EXPECT_TRUE(c.wait_closed(1s));
    EXPECT_EQ(server.num_accepted(), 1u);
  }
}

// A response's pieces go out in the order of the responder's calls, also when they come from two
// threads: the head from the handler on the I/O thread, the chunks and the end from another
// thread (an engine) before the handler returns. With one I/O thread, what it posts waits in its
// private queue until its handler returns, so the executor alone sent the chunks first
// (Session::post_output keeps them in order). Over several servers: one thread, and four.
// A server of `threads` I/O threads whose handler starts a stream and then, before it returns,
// has another thread (an engine) run `engine` on the responder.
std::unique_ptr<Server> stream_then_engine(int threads, std::function<void(Responder&)> engine) {
  return std::make_unique<Server>(
      short_limits(),
      [engine](Request, std::shared_ptr<Responder> r) {
        r->start_stream(200, "text/plain");
        std::thread t([&] { engine(*r); });
        t.join();  // what the engine posts is posted before this handler returns
      },
      threads);
}

TEST(ServerTest, PiecesFromTwoThreadsGoOutInTheOrderOfTheCalls) {
  for (int threads : {1, 4}) {
    auto server = stream_then_engine(threads, [](Responder& r) {
      r.write("first ");
      r.write("second");
      r.end();
    });
    const uint16_t port = listen_or_die(*server);
    RawConn c(port);
    ASSERT_TRUE(c.connected());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
      auto r = c.read_response();
      ASSERT_TRUE(r) << threads << " thread(s), request " << i;
      EXPECT_EQ(r->status, 200);
      EXPECT_TRUE(r->chunked);
      EXPECT_EQ(r->body, "first second") << threads << " thread(s), request " << i;
    }
  }
}

// An abort from another thread goes out after what was written before it: the head (from the
// I/O thread) and the chunk reach the client, then the connection closes without the terminal
// chunk (a truncated body, never one that looks complete).
TEST(ServerTest, AnAbortFromAnotherThreadFollowsWhatWasWritten) {
  for (int threads : {1, 4}) {
    auto server = stream_then_engine(threads, [](Responder& r) {
      r.write("partial");
      r.abort();
    });
    const uint16_t port = listen_or_die(*server);
    RawConn c(port);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.send("GET /s HTTP/1.1\r\nHost: x\r\n\r\n"));
    std::string all;
    for (int i = 0; i < 100; ++i) {
      const std::string got = c.read_some(500ms);
      if (got.empty()) break;
      all += got;
    }
    EXPECT_TRUE(c.wait_closed(1s)) << threads;
    EXPECT_TRUE(all.starts_with("HTTP/1.1 200")) << threads << ": " << all;
    EXPECT_NE(all.find("\r\n\r\n7\r\npartial\r\n"), std::string::npos) << threads << ": " << all;
    EXPECT_EQ(all.find("0\r\n\r\n"), std::string::npos) << threads << ": " << all;
  }
}

// A body is delivered whole, chunked or not, and with a declared length its buffer holds the JSON
// parser's padding past its end (api/openai_request.h JsonBody reads it in place).
TEST(ServerTest, BodiesArriveWholeWithTheirPaddingReserved) {
  std::mutex mu;
  std::vector<std::pair<std::string, size_t>> seen;  // body, capacity beyond its size
  Server server(short_limits(), [&](Request req, std::shared_ptr<Responder> r) {
    {
      std::lock_guard lock(mu);
      seen.emplace_back(req.body, req.body.capacity() - req.body.size());
    }
    r->send(200, "text/plain", "ok");
  });
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.connected());
  const std::string body(700, 'x');
  ASSERT_TRUE(c.send("POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 700\r\n\r\n" + body));
  ASSERT_TRUE(c.read_response());
  ASSERT_TRUE(
      c.send("POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
             "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  ASSERT_TRUE(c.read_response());
  std::lock_guard lock(mu);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].first, body);
  EXPECT_GE(seen[0].second, 64u);
  EXPECT_EQ(seen[1].first, "hello world");
}

TEST(ServerTest, UnknownMethodReachesHandler) {
  Server server(short_limits(), echo);
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.send("BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  expect_error_body(r->body);
}

TEST(ServerTest, BodyOverLimitIs413) {
  Server server(short_limits(), echo);
  uint16_t port = listen_or_die(server);
  {
    RawConn c(port);
    ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    expect_error_body(r->body);
    EXPECT_TRUE(c.wait_closed(2s));
  }
  {  // chunked body with no declared length, caught while reading
    RawConn c(port);
    std::string chunk(600, 'x');
    ASSERT_TRUE(c.send("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n" +
                       chunk + "\r\n258\r\n" + chunk + "\r\n0\r\n\r\n"));
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
}

TEST(ServerTest, HeadersOverLimitIs431) {
  Server server(short_limits(), echo);
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.send("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 431);
  expect_error_body(r->body);
}

TEST(ServerTest, MalformedRequestLineIs400AndCloses) {
  Server server(short_limits(), echo);
  uint16_t port = listen_or_die(server);
  for (const char* bad : {"GARBAGE\r\n\r\n", "GET / HTTP/9.x\r\n\r\n", "GET  HTTP/1.1\r\n\r\n",
                          "GET / HTTP/1.1\r\nBad Header\r\n\r\n"}) {
    RawConn c(port);
    ASSERT_TRUE(c.send(bad));
    auto r = c.read_response();
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << bad;
    expect_error_body(r->body);
    EXPECT_TRUE(c.wait_closed(2s));
  }
}

// Request smuggling: a front proxy and this server must never disagree on where a body
// ends, so any framing other than a lone "chunked" or a lone Content-Length is refused, and the
// connection is closed without reading a body.
TEST(ServerTest, AmbiguousFramingIs400AndCloses) {
  std::atomic<int> handled{0};
  Server server(short_limits(), [&](Request req, std::shared_ptr<Responder> r) {
    ++handled;
    echo(std::move(req), std::move(r));
  });
  uint16_t port = listen_or_die(server);
  const char* bad[] = {
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\nContent-Length: 3\r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\nContent-Length: "
      "3\r\n\r\nabc",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: "
      "chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
      "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
  };
  for (const char* request : bad) {
    RawConn c(port);
    ASSERT_TRUE(c.send(request));
    auto r = c.read_response();
    ASSERT_TRUE(r) << request;
    EXPECT_EQ(r->status, 400) << request;
    expect_error_body(r->body);
    EXPECT_TRUE(c.wait_closed(2s)) << request;
  }
  EXPECT_EQ(handled.load(), 0);
  // Plain chunked and plain Content-Length still work; the coding name is case-insensitive.
  RawConn c(port);
  ASSERT_TRUE(c.send(
      "POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
      "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nde"));
  auto a = c.read_response();
  ASSERT_TRUE(a);
  EXPECT_EQ(a->body, "POST /a abc");
  auto b = c.read_response();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->body, "POST /b de");
}

// HTTP/1.1 requires exactly one Host header (RFC 9112 3.2); HTTP/1.0 may omit it.
TEST(ServerTest, MissingOrRepeatedHostIs400) {
  Server server(short_limits(), echo);
  uint16_t port = listen_or_die(server);
  for (const char* request :
       {"GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"}) {
    RawConn c(port);
    ASSERT_TRUE(c.send(request));
    auto r = c.read_response();
    ASSERT_TRUE(r) << request;
    EXPECT_EQ(r->status, 400) << request;
    expect_error_body(r->body);
    EXPECT_TRUE(c.wait_closed(2s)) << request;
  }
  RawConn c(port);
  ASSERT_TRUE(c.send("GET /old HTTP/1.0\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A target in absolute form (RFC 9112 3.2.2: servers must accept it) reaches the handler in
// origin form; a body in a Content-Encoding other than identity is a 415 naming identity in
// Accept-Encoding, and the connection serves on.
TEST(ServerTest, AbsoluteFormTargetsAndEncodedBodies) {
  Server server(short_limits(), echo);
  uint16_t port = listen_or_die(server);
  for (const auto& [line, want] : std::vector<std::pair<std::string, std::string>>{
           {"POST http://x/v1/a?q=1", "POST /v1/a?q=1"},
           {"POST HTTPS://x:8/b", "POST /b"},
           {"POST http://x", "POST /"},
           {"POST http://x?q", "POST /?q"}}) {
    RawConn c(port);
    ASSERT_TRUE(c.send(line + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nde"));
    auto r = c.read_response();
    ASSERT_TRUE(r) << line;
    EXPECT_EQ(r->status, 200) << line;
    EXPECT_EQ(r->body, want + " de") << line;
  }
  RawConn c(port);
  ASSERT_TRUE(
      c.send("POST /z HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n"
             "\r\nabc"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
  EXPECT_EQ(r->header("accept-encoding"), "identity");  // RFC 7694: the codings it takes
  expect_error_body(r->body);
  for (const char* identity : {"identity", "identity, identity", "", " , identity"}) {
    ASSERT_TRUE(c.send(std::string("POST /z HTTP/1.1\r\nHost: x\r\nContent-Encoding: ") + identity +
                       "\r\nContent-Length: 2\r\n\r\nde"));
    r = c.read_response();
    ASSERT_TRUE(r) << identity;
    EXPECT_EQ(r->status, 200) << identity;
    EXPECT_EQ(r->body, "POST /z de") << identity;
  }
  ASSERT_TRUE(
      c.send("POST /z HTTP/1.1\r\nHost: x\r\nContent-Encoding: identity, br\r\n"
             "Content-Length: 2\r\n\r\nde"));
  r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
}

// A HEAD reply carries GET's headers (content-length included) and no body, so the next response
// on the connection is read from the right place.
TEST(ServerTest, HeadResponsesHaveNoBody) {
  Server server(short_limits(), [](Request req, std::shared_ptr<Responder> r) {
    r->send(200, "text/plain", "twelve bytes");
  });
  RawConn c(listen_or_die(server));
  ASSERT_TRUE(c.send("HEAD / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string bytes;
  for (int i = 0; i < 50 && bytes.find("twelve bytes") == std::string::npos; ++i)
    bytes += c.read_some(100ms);
  EXPECT_EQ(bytes.find("HTTP/1.1 200"), 0u) << bytes;
  const size_t second = bytes.find("HTTP/1.1 200", 1);
  ASSERT_NE(second, std::string::npos) << bytes;
  const std::string head = bytes.substr(0, second);
  EXPECT_NE(head.find("content-length: 12\r\n"), std::string::npos) << head;
  EXPECT_TRUE(head.ends_with("\r\n\r\n")) << head;
  EXPECT_TRUE(bytes.ends_with("\r\n\r\ntwelve bytes")) << bytes;
}

}  // namespace
}  // namespace kvc::http
