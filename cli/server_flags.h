// Flags shared by the HTTP servers (replica, router): address and every network limit by name.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/status.h"
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

// API keys given on the command line (repeatable) or in a file (one per line, e.g. a mounted
// Kubernetes Secret; read when the server starts, not by --check-config).
struct ApiKeyFlags {
  std::vector<std::string> keys;
  std::string file;
};
// Adds `--NAME KEY` and `--NAME-file PATH` (mutually exclusive); `what` completes their help.
void add_api_key_flags(CLI::App& cmd, ApiKeyFlags& flags, const std::string& name,
                       const std::string& what);
// The keys of --NAME or of the file (read now). Empty when neither flag was given.
Result<std::vector<std::string>> load_api_keys(const ApiKeyFlags& flags);

// 127.0.0.1 (and the rest of 127/8), ::1 or localhost: only this machine can connect.
bool is_loopback(const std::string& host);

// Call before starting any thread: SIGINT and SIGTERM are then delivered only to
// wait_for_shutdown_signal(), which blocks until one arrives.
void block_shutdown_signals();
void wait_for_shutdown_signal();

}  // namespace kvc::cli
