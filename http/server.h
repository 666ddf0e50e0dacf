// HTTP/1.1 server used by the replica and the router: keep-alive sessions with the named limits of
// ServerLimits, requests of one connection handled strictly in order, responses whole or streamed
// (chunked). The handler never sees malformed HTTP or limit violations: the session answers those
// itself with an OpenAI-style JSON error and closes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "http/limits.h"

namespace boost::asio {
class io_context;
}

namespace kvc::http {

using Headers = std::vector<std::pair<std::string, std::string>>;
// The first header of that name (case-insensitive), if any.
std::optional<std::string> find_header(const Headers& headers, std::string_view name);
// The value of `name` in the query of an origin-form target ("/path?a=1&b"): '&'-separated
// pairs after the first '?', compared as sent (no percent-decoding); a name without '=' has the
// empty value. nullopt when absent.
std::optional<std::string_view> query_param(std::string_view target, std::string_view name);

struct Request {
  std::string method;  // as sent, e.g. "POST"
  std::string target;  // origin form, e.g. "/v1/completions?x=1"
  Headers headers;     // in arrival order, names as sent
  std::string body;    // whole body (at most max_body_bytes)
  std::string remote;  // peer "ip:port"

  // First header with this name, compared case-insensitively.
  std::optional<std::string> header(std::string_view name) const;
};

// Whether a request with `method` may be served by a handler for `allowed`: the same method, or
// HEAD where GET is allowed (RFC 9110 9.3.2; the session sends a HEAD reply's headers only).
bool method_allowed(std::string_view method, std::string_view allowed);

// The rest of `path` after `prefix` with its %XX escapes decoded ("/v1/models/meta-llama%2FLlama"
// after "/v1/models/": "meta-llama/Llama"), or nullopt when path does not start with prefix, the
// rest is empty or an escape is malformed.
std::optional<std::string> path_rest_decoded(std::string_view path, std::string_view prefix);

// One response to one request. Thread-safe: may be used from any thread (the engine thread), also
// after the handler returned. Exactly one of send() or start_stream()...end() takes effect; later
// calls are ignored. Dropping the last reference without responding gets the client a 500 (or, mid
// stream, a closed connection).
class Responder {
 public:
  virtual ~Responder() = default;
  // One whole response. extra_headers e.g. {"x-kvcascade-replica","r0"}.
  virtual void send(int status, std::string content_type, std::string body,
                    Headers extra_headers = {}) = 0;
  // Streaming: headers now (chunked transfer encoding), then chunks, then end(). Server-sent events
  // are written by the caller as events framed by http::sse_event (sse.h) via write().
  virtual void start_stream(int status, std::string content_type, Headers extra_headers = {}) = 0;
  virtual void write(std::string chunk) = 0;  // queued; written in order; empty chunks are skipped
  virtual void end() = 0;
  // The response cannot be completed (its source failed): mid-stream the connection is closed
  // without the terminal chunk, so the client sees a truncated body, never one that looks
  // complete; before anything was sent, a 502. Ignored after send() or end().
  virtual void abort() = 0;
  // True once the client went away (connection closed, write failed or timed out). Cheap,
  // thread-safe; the engine polls it to abort work.
  virtual bool client_gone() const = 0;
  // Called once, from an I/O thread, when the client goes away (at once if it already has). Not
  // called when the response completes normally.
  virtual void on_client_gone(std::function<void()> callback) = 0;
};

// Runs on an I/O thread; must not block for long (hand work to another thread with the responder).
// An exception escaping it becomes a 500 reply (or a closed connection if the reply had started).
using Handler = std::function<void(Request, std::shared_ptr<Responder>)>;

struct ServerCore;

// Owns an io_context and its threads: one by default, as the router and the replica run it
// (with one, connections need no strands; several give each connection a strand of its own).
class Server {
 public:
  Server(ServerLimits limits, Handler handler, int threads = 1);
  ~Server();  // stops and joins
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens; port 0 picks a free port. Returns the bound port or an error message.
  // Precondition: called once.
  Result<uint16_t> listen(const std::string& host, uint16_t port);
  // Closes the listener and every connection (in-flight responders then see client_gone()), and
  // joins the threads unless called from one of them. Idempotent.
  void stop();
  // The io_context the server's threads run: an http::Client built on it (a proxy's upstream
  // client) runs its exchanges on those threads. Valid for the server's lifetime.
  boost::asio::io_context& io_context();
  // How many threads run io_context() (at least one).
  int io_threads() const;
  // Connections being served now (not counting those refused with 503).
  size_t num_connections() const;
  // Connections open on the slots kept for health probes (ServerLimits::probe_connections).
  size_t num_probe_connections() const;
  // Connections accepted since start, refused ones included (tests check connection reuse).
  size_t num_accepted() const;

 private:
  std::shared_ptr<ServerCore> core_;
};

}  // namespace kvc::http
