// Named network limits for the HTTP server and the upstream client (STYLE 8: every limit has a name
// and a flag). Defaults suit a replica or router facing ordinary clients; tests shrink them.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace kvc::http {

struct ServerLimits {
  size_t max_body_bytes = 8 << 20;                  // larger body -> 413 JSON error
  size_t max_header_bytes = 16 << 10;               // larger headers -> 431 JSON error
  std::chrono::milliseconds header_timeout{10000};  // request line + headers must arrive within
  std::chrono::milliseconds read_timeout{30000};    // whole body must arrive within
  std::chrono::milliseconds idle_timeout{60000};    // keep-alive connection idle -> closed
  std::chrono::milliseconds write_timeout{30000};   // a client that does not read is cut
  size_t max_connections = 1024;                    // beyond: accept then 503 JSON error and close
  // Connections kept for health probes beyond max_connections: one answers a GET or HEAD of a
  // probe path (then closes) and anything else with the 503, so a client holding every
  // connection does not fail the server's own liveness probe.
  size_t probe_connections = 8;
  std::vector<std::string> probe_paths{"/livez", "/readyz", "/health"};
  // After a response that closes the connection, how long the server keeps reading (and
  // discarding) what the client still sends, so the close does not reset the response away
  // (at most read_timeout).
  std::chrono::milliseconds linger_timeout{1000};
  // A client sent FIN while its HTTP/1.1 request is answered (it half-closed, or left): how often
  // an interim 100 Continue goes out until the response starts, to find out which (a peer that
  // left answers with a reset; http/session.h probe_half_closed).
  std::chrono::milliseconds half_close_probe_interval{1000};
  // stop(): how long handlers still running may take before the I/O threads are stopped.
  std::chrono::milliseconds stop_grace{2000};
  // accept() failed (e.g. out of file descriptors): wait this long before the next one.
  std::chrono::milliseconds accept_backoff{50};
  size_t max_queued_writes_per_send = 64;  // response pieces gathered into one socket write
  // Called with the status of every response as its head goes out (handlers' and the server's
  // own refusals alike), on an I/O or handler thread: a status count for metrics. May be empty.
  std::function<void(int status)> on_response;
};

struct ClientLimits {
  std::chrono::milliseconds connect_timeout{3000};  // resolve + TCP connect
  // From the request written until the response's status line and headers are read.
  std::chrono::milliseconds response_header_timeout{30000};
  // Longest silence between two pieces of a response body (a stalled upstream is cut).
  std::chrono::milliseconds body_idle_timeout{60000};
  std::chrono::milliseconds pool_idle_timeout{
      30000};                          // pooled connections older than this are dropped
  size_t max_idle_per_host = 32;       // pooled keep-alive connections per host:port
  size_t max_header_bytes = 64 << 10;  // response headers larger -> error
  size_t max_body_bytes = 64 << 20;    // request(): buffered body larger -> error
  int io_threads = 1;                  // threads running the client's io_context
};

}  // namespace kvc::http
