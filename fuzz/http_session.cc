// The HTTP server's session on arbitrary client bytes. A session is bound to a TCP socket, so each
// process runs one real http::Server on 127.0.0.1 (port 0, one I/O thread) and each input is one
// connection: the bytes are written, the write side is shut (the server sees the end of input,
// so nothing waits for a timeout), and the reply is read to the end. Properties:
// - whatever is answered is HTTP/1.1 responses;
// - the connection is closed within a bound (no hang) and the session is gone afterwards (no
//   leak: num_connections() returns to 0).
// The handler answers by path, exercising every responder route: /stream (chunked), /drop (no
// reply: the responder's 500), /throw (an exception), anything else a whole response that echoes
// the body and a header value.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "fuzz/fuzz_input.h"
#include "http/server.h"

namespace {

using namespace std::chrono_literals;

void handle(kvc::http::Request request, std::shared_ptr<kvc::http::Responder> responder) {
  if (request.target.starts_with("/stream")) {
    responder->start_stream(200, "text/event-stream", {{"x-method", request.method}});
    responder->write(request.body);
    responder->write("data: [DONE]\n\n");
    responder->end();
  } else if (request.target.starts_with("/drop")) {
    return;
  } else if (request.target.starts_with("/throw")) {
    throw std::runtime_error("handler failed: " + request.target);
  } else {
    kvc::http::Headers extra;
    if (!request.headers.empty()) extra.emplace_back("x-echo", request.headers.front().second);
    responder->send(200, "application/json", request.body, std::move(extra));
  }
}

struct Fixture {
  Fixture() : server(limits(), handle, /*threads=*/1) {
    auto bound = server.listen("127.0.0.1", 0);
    FUZZ_CHECK(bound.ok());
    port = *bound;
  }
  static kvc::http::ServerLimits limits() {
    kvc::http::ServerLimits l;
    l.max_body_bytes = 2048;  // below the inputs' max_len, so that 413 is reachable
    l.max_header_bytes = 1024;
    l.header_timeout = 500ms;
    l.read_timeout = 500ms;
    l.idle_timeout = 500ms;
    l.write_timeout = 500ms;
    return l;
  }
  kvc::http::Server server;
  uint16_t port = 0;
};

int connect_to(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0);
  timeval tv{5, 0};  // far above every server timeout: hitting it means a hang
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Interrupted (see below), the connect goes on: retrying reports EALREADY, then EISCONN.
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  while (rc != 0 && (errno == EINTR || errno == EALREADY)) {
    std::this_thread::sleep_for(100us);
    rc = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  FUZZ_CHECK(rc == 0 || errno == EISCONN);
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* fixture = new Fixture();  // lives for the process: one server, many inputs
  const int fd = connect_to(fixture->port);
  // The server may answer and close before reading everything (a 431, a 400): a failed write
  // is then expected.
  for (size_t sent = 0; sent < size;) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    // libFuzzer's SIGALRM (its -timeout watchdog) interrupts a socket call that has a timeout
    // set, even with SA_RESTART (signal(7)): EINTR is retried, not a finding.
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno != ECONNRESET) std::fprintf(stderr, "recv: %s\n", std::strerror(errno));
      FUZZ_CHECK(errno == ECONNRESET);  // EAGAIN: the server kept the connection open (a hang)
      break;
    }
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  FUZZ_CHECK(reply.empty() || reply.starts_with("HTTP/1.1 "));
  // The session must go away once the connection is closed.
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (fixture->server.num_connections() != 0) {
    FUZZ_CHECK(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(100us);
  }
  return 0;
}
