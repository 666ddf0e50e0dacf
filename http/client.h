// Upstream HTTP/1.1 client for the router (and health checks and tests): keep-alive connections
// pooled per host:port, streamed responses delivered piece by piece as they arrive. Errors are
// values (Status / Result), never exceptions.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "http/limits.h"
#include "http/server.h"

namespace boost::asio {
class io_context;
}

namespace kvc::http {

struct ClientResponse {
  int status = 0;
  Headers headers;
  std::string body;

  // First header with this name, compared case-insensitively.
  std::optional<std::string> header(std::string_view name) const;
};

// An upstream address: "host:port", optionally "http://" before it and "/" after it, an IPv6 host
// in brackets. Sets host (brackets removed) and port; false for anything else (another scheme, a
// path, a port that is not 1..65535).
bool parse_host_port(std::string_view address, std::string& host, uint16_t& port);

// Ends an exchange from another thread: the caller's own client went away, or its upstream was
// found dead. Made before the exchange starts, so a cancel that comes first is not lost.
// Thread-safe.
class Cancellation {
 public:
  // The exchange's connection is closed (its server sees the client go) and on_done(Error{reason})
  // follows on the I/O thread; an exchange started later ends at once the same way. A no-op once
  // the exchange finished. The first reason wins.
  void cancel(std::string reason);
  bool cancelled() const;

  // For Client: `canceller` is what cancel() calls (at once if already cancelled).
  void attach(std::function<void(const std::string& reason)> canceller);

 private:
  mutable std::mutex mu_;
  std::optional<std::string> reason_;
  std::function<void(const std::string&)> canceller_;
};

// What one stream() may set beyond the client's limits.
struct StreamOptions {
  // Overrides of ClientLimits::response_header_timeout and body_idle_timeout (unset: those).
  std::optional<std::chrono::milliseconds> response_header_timeout;
  std::optional<std::chrono::milliseconds> body_idle_timeout;
  std::shared_ptr<Cancellation> cancellation;  // null: only on_chunk can cancel
  // Called once, on the I/O thread just before on_done(error), when the exchange ends because a
  // deadline passed after the whole request was written: no response header within
  // response_header_timeout, or a body silent for body_idle_timeout. The server may still be
  // working on the request (a proxy answers 504 and may not want to send it elsewhere). Not
  // called for a connect timeout, nor while the request was still being written (the server
  // cannot have it whole).
  std::function<void()> on_timeout;
  // Called once, on the I/O thread, when the whole request has been written to a connection
  // (the server may have it: an error after this leaves its outcome unknown).
  std::function<void()> on_written;
};

// A request body, held by reference count: an exchange (and its retry on a fresh connection)
// writes these bytes after its header as they are, and a caller that keeps them, such as a proxy
// for its own retries, hands them over without a copy.
class Body {
 public:
  Body() = default;
  Body(std::string bytes)  // NOLINT(google-explicit-constructor): a string is a body
      : bytes_(std::make_shared<const std::string>(std::move(bytes))) {}
  Body(const char* bytes) : Body(std::string(bytes)) {}  // NOLINT(google-explicit-constructor)
  Body(std::shared_ptr<const std::string> bytes)         // NOLINT(google-explicit-constructor)
      : bytes_(std::move(bytes)) {}
  std::string_view view() const { return bytes_ ? std::string_view(*bytes_) : std::string_view(); }

 private:
  std::shared_ptr<const std::string> bytes_;
};

struct ClientCore;

// Owns an io_context and limits.io_threads threads. Thread-safe.
class Client {
 public:
  using OnHeaders = std::function<void(int status, const Headers& headers)>;
  // Return false to cancel the exchange (on_done then gets an error "cancelled").
  using OnChunk = std::function<bool(std::string_view bytes)>;
  using OnDone = std::function<void(Status)>;

  // `clock` times pooled connections (pool_idle_timeout); socket timeouts run on Asio's timers.
  explicit Client(ClientLimits limits = {}, const Clock& clock = SteadyClock::instance());
  // Runs every exchange on `server`'s io_context (a proxy's: the upstream exchange then stays on
  // the thread that read the request, with no hand-off between thread pools; with one such
  // thread an exchange needs no strand). Starts no threads; limits.io_threads is unused. The
  // server keeps running until shutdown() has returned and outlives the client; request() must
  // not be called from the server's threads (it would wait for itself).
  Client(ClientLimits limits, Server& server, const Clock& clock = SteadyClock::instance());
  // Exchanges still in flight end with on_done(error); then the threads are joined.
  // Precondition: not called from a callback of this client.
  ~Client();
  // Refuses new exchanges, ends those in flight with on_done(error) (run on the I/O threads) and
  // drops pooled connections. Idempotent; the destructor calls it. With an external io_context,
  // call it while that io_context still runs.
  void shutdown();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Blocking convenience call (for health checks and tests). The body is buffered, at most
  // limits.max_body_bytes or `max_body_bytes` if smaller (a larger one is an error and the
  // connection is dropped). timeout bounds the whole exchange, and the wait for the response's
  // header is the longer of it and limits.response_header_timeout. A non-2xx status is not an
  // error.
  // Precondition: not called from a callback of this client (it would wait for itself).
  Result<ClientResponse> request(const std::string& host, uint16_t port, std::string method,
                                 std::string target, std::string body = {}, Headers headers = {},
                                 std::chrono::milliseconds timeout = std::chrono::seconds(30),
                                 std::optional<size_t> max_body_bytes = std::nullopt,
                                 StreamOptions options = {});

  // Streaming: on_headers(status, headers) once, then on_chunk(bytes) for each piece of body as it
  // arrives (chunk framing removed), then on_done(error or ok) exactly once — also when connecting
  // fails (then without on_headers). Callbacks run on the client's I/O thread, one exchange's
  // callbacks never concurrently. A pooled connection that turns out closed before any response
  // byte arrived is retried once on a fresh connection. `options` may shorten or lengthen the
  // timeouts of this exchange and hand it a Cancellation.
  void stream(const std::string& host, uint16_t port, std::string method, std::string target,
              Body body, Headers headers, OnHeaders on_headers, OnChunk on_chunk, OnDone on_done,
              StreamOptions options = {});

  // TCP connections opened so far (tests check keep-alive reuse).
  size_t num_connects() const;

 private:
  std::shared_ptr<ClientCore> core_;
};

}  // namespace kvc::http
