// Helpers of the HTTP server tests (server_test.cc: requests and framing;
// server_lifetime_test.cc: timeouts, disconnects, half-closed clients, limits, stop): short
// limits, an echo handler, listening on a free port, the OpenAI-shaped error body.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "http/errors.h"
#include "http/server.h"

namespace kvc::http::testing {

using namespace std::chrono_literals;

inline ServerLimits short_limits() {
  ServerLimits l;
  l.max_body_bytes = 1024;
  l.max_header_bytes = 1024;
  l.header_timeout = 200ms;
  l.read_timeout = 200ms;
  l.idle_timeout = 200ms;
  l.write_timeout = 200ms;
  l.max_connections = 64;
  l.half_close_probe_interval = 100ms;
  return l;
}

inline void echo(Request req, std::shared_ptr<Responder> r) {
  if (req.target == "/throw") throw std::runtime_error("boom");
  if (req.method != "GET" && req.method != "POST") {
    send_error(*r, 405, "method not allowed");
    return;
  }
  r->send(200, "text/plain", req.method + " " + req.target + " " + req.body,
          {{"x-kvcascade-replica", "r0"}});
}

inline uint16_t listen_or_die(Server& server) {
  auto port = server.listen("127.0.0.1", 0);
  EXPECT_TRUE(port.ok()) << (port.ok() ? "" : port.error().message);
  return port.ok() ? *port : 0;
}

// The error body is OpenAI-shaped: error.{message,type,param,code}.
inline void expect_error_body(const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << body;
  ASSERT_TRUE(j.contains("error")) << body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  EXPECT_TRUE(j["error"].contains("param"));
  EXPECT_TRUE(j["error"].contains("code"));
}

}  // namespace kvc::http::testing
