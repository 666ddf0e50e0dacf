// Flags shared by the HTTP servers (replica, router): address and every network limit by name.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "http/limits.h"

namespace kvc::cli {

struct ServerFlags {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  int threads = 2;
  http::ServerLimits limits;
};

void add_server_flags(CLI::App& cmd, ServerFlags& flags, uint16_t default_port);

// A duration flag in milliseconds (1 ms .. 24 h), its default shown in --help.
void add_millis(CLI::App& cmd, const char* name, std::chrono::milliseconds& value,
                const char* help);

// Call before starting any thread: SIGINT and SIGTERM are then delivered only to
// wait_for_shutdown_signal(), which blocks until one arrives.
void block_shutdown_signals();
void wait_for_shutdown_signal();

}  // namespace kvc::cli
