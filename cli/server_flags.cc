#include "cli/server_flags.h"

#include <pthread.h>

#include <csignal>

#include "http/auth.h"

namespace kvc::cli {

void add_millis(CLI::App& cmd, const char* name, std::chrono::milliseconds& value,
                const char* help) {
  cmd.add_option_function<int64_t>(
         name, [&value](int64_t ms) { value = std::chrono::milliseconds(ms); }, help)
      ->check(CLI::Range(int64_t{1}, int64_t{24} * 3600 * 1000))
      ->default_str(std::to_string(value.count()));
}

void add_server_flags(CLI::App& cmd, ServerFlags& f, uint16_t default_port) {
  f.port = default_port;
  cmd.add_option("--host", f.host, "address to listen on");
  cmd.add_option("--port", f.port, "port to listen on (0: any free port)");
  cmd.add_option("--http-threads", f.threads, "I/O threads")->check(CLI::Range(1, 256));
  cmd.add_option("--max-body-bytes", f.limits.max_body_bytes, "larger bodies get 413")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd.add_option("--max-header-bytes", f.limits.max_header_bytes, "larger headers get 431")
      ->check(CLI::Range(size_t{512}, size_t{1} << 20));
  cmd.add_option("--max-connections", f.limits.max_connections, "more get 503")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd.add_option("--probe-connections", f.limits.probe_connections,
                 "connections kept beyond --max-connections for /livez, /readyz and /health")
      ->check(CLI::Range(size_t{0}, size_t{1024}));
  add_millis(cmd, "--header-timeout-ms", f.limits.header_timeout,
             "request line and headers must arrive within");
  add_millis(cmd, "--read-timeout-ms", f.limits.read_timeout, "the body must arrive within");
  add_millis(cmd, "--idle-timeout-ms", f.limits.idle_timeout, "idle keep-alive connections close");
  add_millis(cmd, "--write-timeout-ms", f.limits.write_timeout,
             "a client that does not read is cut");
}

void add_api_key_flags(CLI::App& cmd, ApiKeyFlags& f, const std::string& name,
                       const std::string& what) {
  CLI::Option* keys =
      cmd.add_option("--" + name, f.keys, what + " (repeatable: any of them is accepted)")
          ->check([](const std::string& key) {
            const Status s = http::validate_api_key(key);
            return s.ok() ? std::string() : s.message();
          });
  CLI::Option* file = cmd.add_option("--" + name + "-file", f.file,
                                     "file holding the keys of --" + name + ", one per line");
  keys->excludes(file);
}

Result<std::vector<std::string>> load_api_keys(const ApiKeyFlags& f) {
  if (f.file.empty()) return f.keys;
  return http::read_api_keys_file(f.file);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

namespace {
sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}
}  // namespace

void block_shutdown_signals() {
  const sigset_t set = shutdown_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void wait_for_shutdown_signal() {
  const sigset_t set = shutdown_signals();
  int sig = 0;
  sigwait(&set, &sig);
}

}  // namespace kvc::cli
