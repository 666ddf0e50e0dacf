// `kvcascade router`: the prefix-aware router in front of replicas (static list or DNS).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/server_flags.h"
#include "router/router_stack.h"

namespace kvc::cli {
namespace {

struct RouterFlags {
  ServerFlags server;
  RouterConfig router;
  PoolConfig pool;
  std::vector<std::string> replicas;
  std::string replica_dns;
  int64_t dns_interval_ms = 5000;
  std::string api_key;
  size_t approx_capacity_blocks = 1 << 20;
  int64_t approx_ttl_s = 600;
  bool check_config = false;
};

int run_router(RouterFlags f) {
  if (f.replicas.empty() == f.replica_dns.empty()) {
    std::fprintf(stderr,
                 "kvcascade router: give either --replica URL... or --replica-dns NAME:PORT\n");
    return 2;
  }
  if (!f.api_key.empty()) f.router.api_key = f.api_key;
  if (f.check_config) {
    std::printf("kvcascade router: configuration ok\n");
    return 0;
  }
  block_shutdown_signals();
  RouterStackConfig c;
  c.router = f.router;
  c.pool = f.pool;
  c.limits = f.server.limits;
  c.http_threads = f.server.threads;
  c.replicas = f.replicas;
  c.replica_dns = f.replica_dns;
  c.dns_interval = std::chrono::milliseconds(f.dns_interval_ms);
  c.approx_capacity_blocks = f.approx_capacity_blocks;
  c.approx_ttl = std::chrono::seconds(f.approx_ttl_s);
  RouterStack stack(std::move(c));
  auto port = stack.start(f.server.host, f.server.port);
  if (!port.ok()) {
    std::fprintf(stderr, "kvcascade router: %s\n", port.error().message.c_str());
    return 2;
  }
  std::printf("kvcascade router (%s policy) on http://%s:%u\n", f.router.policy.c_str(),
              f.server.host.c_str(), *port);
  std::fflush(stdout);
  wait_for_shutdown_signal();
  std::printf("kvcascade router: shutting down\n");
  stack.stop();
  return 0;
}

}  // namespace

Run add_router_command(CLI::App& app) {
  auto f = std::make_shared<RouterFlags>();
  f->server.threads = RouterStackConfig{}.http_threads;  // one: see RouterStackConfig
  CLI::App* cmd = app.add_subcommand("router", "route OpenAI requests to replicas by prefix");
  add_server_flags(*cmd, f->server, 8080);
  cmd->add_option("--replica", f->replicas, "replica address host:port (repeatable)");
  cmd->add_option("--replica-dns", f->replica_dns,
                  "discover replicas by resolving NAME:PORT (a headless Service)");
  cmd->add_option("--dns-interval-ms", f->dns_interval_ms, "re-resolve period")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  cmd->add_option("--policy", f->router.policy, "routing policy")
      ->check(CLI::IsMember(policy_names()));
  cmd->add_option("--api-key", f->api_key, "require Authorization: Bearer KEY from clients");
  cmd->add_option("--max-attempts", f->router.max_attempts,
                  "replicas tried before the first byte reached the client")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--approx-capacity-blocks", f->approx_capacity_blocks,
                  "approximate mode: blocks remembered per replica")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  cmd->add_option("--approx-ttl-s", f->approx_ttl_s, "approximate mode: entry lifetime")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  cmd->add_option_function<int64_t>(
         "--sibling-window-ms",
         [f](int64_t ms) { f->router.siblings.window = std::chrono::milliseconds(ms); },
         "identical prompts within this window go to the same replica")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  add_millis(*cmd, "--upstream-timeout-ms", f->router.upstream_timeout,
             "non-streamed requests: longest wait for the replica's reply (a whole generation)");
  add_millis(*cmd, "--upstream-first-byte-timeout-ms", f->router.first_byte_timeout,
             "streamed requests: longest wait for the replica's first byte (queue + prefill)");
  add_millis(*cmd, "--upstream-idle-timeout-ms", f->router.idle_timeout,
             "longest silence inside a replica's reply once it started");
  add_millis(*cmd, "--health-interval-ms", f->pool.poll_interval,
             "period of the replicas' /v1/load health checks");
  add_millis(*cmd, "--health-timeout-ms", f->pool.poll_timeout,
             "a health check not answered within this failed");
  cmd->add_option("--health-failures-to-dead", f->pool.failed_polls_to_dead,
                  "failed health checks in a row after which a replica's requests in flight end "
                  "(and are retried elsewhere when nothing reached the client yet)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--check-config", f->check_config, "validate the flags and exit");
  return [f] { return run_router(*f); };
}

}  // namespace kvc::cli
