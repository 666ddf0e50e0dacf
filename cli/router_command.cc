// `kvcascade router`: the prefix-aware router in front of replicas (static list or DNS).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/server_flags.h"
#include "http/auth.h"
#include "router/fleet/engine_signals.h"
#include "router/router_stack.h"

namespace kvc::cli {
namespace {

struct RouterFlags {
  ServerFlags server;
  RouterConfig router;
  PoolConfig pool;
  std::vector<std::string> replicas;
  std::vector<std::string> replica_kinds;
  std::string replica_dns;
  int64_t dns_interval_ms = 5000;
  ApiKeyFlags api_keys;
  ApiKeyFlags admin_api_keys;
  std::string replica_api_key;
  std::string replica_api_key_file;
  std::string tenant_isolation = "off";
  std::optional<size_t> approx_capacity_blocks;  // unset: 1 << 20, or from the replica's metrics
  int64_t approx_ttl_s = 600;
  int64_t routed_ttl_ms = FleetIndexes::kRoutedTtl.count();
  bool check_config = false;
};

// CLI11 check: an HTTP header name (a token, RFC 9110 5.1).
std::string http_header_name(const std::string& name) {
  const bool token = !name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) {
    return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
  return token ? std::string() : std::string("not an HTTP header name");
}

int run_router(RouterFlags f) {
  if (f.replicas.empty() == f.replica_dns.empty()) {
    std::fprintf(stderr,
                 "kvcascade router: give either --replica URL... or --replica-dns NAME:PORT\n");
    return 2;
  }
  f.router.tenant_isolation = *parse_tenant_isolation(f.tenant_isolation);  // checked by CLI11
  if (f.router.tenant_isolation == TenantIsolation::kHeader && f.router.tenant_header.empty()) {
    std::fprintf(stderr,
                 "kvcascade router: --tenant-isolation header needs --tenant-header NAME\n");
    return 2;
  }
  if (f.replica_kinds.size() > 1 && f.replica_kinds.size() != f.replicas.size()) {
    std::fprintf(stderr,
                 "kvcascade router: give --replica-kind once (for every replica) or once per "
                 "--replica, in the same order (%zu kinds for %zu replicas)\n",
                 f.replica_kinds.size(), f.replicas.size());
    return 2;
  }
  // What a real start refuses (RouterStack::start runs the same check), so --check-config does.
  if (Status s = check_replica_addresses(f.replicas, f.replica_dns); !s.ok()) {
    std::fprintf(stderr, "kvcascade router: %s\n", s.message().c_str());
    return 2;
  }
  if (f.check_config) {
    std::printf("kvcascade router: configuration ok\n");
    return 0;
  }
  // Key files are read now, not by --check-config: manifests are checked without their Secrets.
  Result<std::vector<std::string>> keys = load_api_keys(f.api_keys);
  if (!keys.ok()) {
    std::fprintf(stderr, "kvcascade router: %s\n", keys.error().message.c_str());
    return 2;
  }
  f.router.api_keys = std::move(*keys);
  Result<std::vector<std::string>> admin_keys = load_api_keys(f.admin_api_keys);
  if (!admin_keys.ok()) {
    std::fprintf(stderr, "kvcascade router: %s\n", admin_keys.error().message.c_str());
    return 2;
  }
  f.router.admin_api_keys = std::move(*admin_keys);
  // A client holding the admin key could administer the fleet: the two sets must not meet.
  for (const std::string& k : f.router.admin_api_keys) {
    if (std::find(f.router.api_keys.begin(), f.router.api_keys.end(), k) !=
        f.router.api_keys.end()) {
      std::fprintf(stderr,
                   "kvcascade router: an --admin-api-key is also an --api-key: give the admin "
                   "a key of its own\n");
      return 2;
    }
  }
  f.router.replica_api_key = f.replica_api_key;
  if (!f.replica_api_key_file.empty()) {
    Result<std::vector<std::string>> replica_keys =
        http::read_api_keys_file(f.replica_api_key_file);
    if (!replica_keys.ok()) {
      std::fprintf(stderr, "kvcascade router: %s\n", replica_keys.error().message.c_str());
      return 2;
    }
    f.router.replica_api_key = replica_keys->front();  // the current key comes first
  }
  if (f.router.tenant_isolation == TenantIsolation::kApiKey && f.router.api_keys.empty()) {
    std::fprintf(stderr,
                 "kvcascade router: warning: --tenant-isolation api-key without --api-key: every "
                 "Bearer token is accepted and is a tenant of its own\n");
  }
  if (f.router.admin_disabled()) {
    std::fprintf(stderr,
                 "kvcascade router: note: no --admin-api-key: /router/admin/* (weight updates) "
                 "is refused (403); client keys and tenants may not administer the fleet\n");
  }
  block_shutdown_signals();
  RouterStackConfig c;
  c.router = f.router;
  c.pool = f.pool;
  c.limits = f.server.limits;
  c.http_threads = f.server.threads;
  c.replicas = f.replicas;
  for (const std::string& k : f.replica_kinds)
    c.replica_kinds.push_back(*parse_replica_kind(k));  // checked by CLI11
  if (!f.replica_dns.empty() && !c.replica_kinds.empty()) c.pool.default_kind = c.replica_kinds[0];
  c.replica_dns = f.replica_dns;
  c.dns_interval = std::chrono::milliseconds(f.dns_interval_ms);
  c.approx_capacity_blocks = f.approx_capacity_blocks.value_or(c.approx_capacity_blocks);
  c.pool.derive_approx_capacity = !f.approx_capacity_blocks.has_value();
  c.approx_ttl = std::chrono::seconds(f.approx_ttl_s);
  c.routed_ttl = std::chrono::milliseconds(f.routed_ttl_ms);
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
  cmd->add_option("--replica-kind", f->replica_kinds,
                  "what the replicas are: auto (detected at start and on reconnect), kvcascade, "
                  "vllm, sglang, openai (any server with /v1/models); once for all, or once per "
                  "--replica in the same order")
      ->check(CLI::IsMember(replica_kind_names()));
  cmd->add_option("--replica-dns", f->replica_dns,
                  "discover replicas by resolving NAME:PORT (a headless Service)");
  cmd->add_option("--dns-interval-ms", f->dns_interval_ms, "re-resolve period")
      ->check(CLI::Range(int64_t{100}, int64_t{3600000}));
  cmd->add_option("--policy", f->router.policy, "routing policy")
      ->check(CLI::IsMember(policy_names()));
  cmd->add_option("--weight-version-policy", f->router.weight_version_policy,
                  "latest: only replicas at the newest weight version (the one an update "
                  "loaded last, as the replicas report) take new requests (a group stays where "
                  "it began); any: every replica")
      ->check(CLI::IsMember({"latest", "any"}))
      ->capture_default_str();
  add_api_key_flags(*cmd, f->api_keys, "api-key",
                    "require Authorization: Bearer KEY from clients (not on /livez, /readyz, "
                    "/health; /router/admin/* takes --admin-api-key instead)");
  add_api_key_flags(*cmd, f->admin_api_keys, "admin-api-key",
                    "require Authorization: Bearer KEY on /router/admin/* (weight updates), "
                    "where no --api-key is accepted; without it those are refused (403) when "
                    "--api-key or --tenant-isolation is set, and open to every client only on a "
                    "router with neither (a trusted network)");
  auto* replica_key =
      cmd->add_option("--replica-api-key", f->replica_api_key,
                      "send Authorization: Bearer KEY to replicas (their --api-key)")
          ->check([](const std::string& key) {
            const Status s = http::validate_api_key(key);
            return s.ok() ? std::string() : s.message();
          });
  cmd->add_option("--replica-api-key-file", f->replica_api_key_file,
                  "file whose first key is sent to replicas")
      ->excludes(replica_key);
  cmd->add_option("--replica-admin-api-key", f->router.replica_admin_api_key,
                  "send Authorization: Bearer KEY to replicas on /router/admin/weights (their "
                  "--admin-api-key; default: the --replica-api-key)")
      ->check([](const std::string& key) {
        const Status s = http::validate_api_key(key);
        return s.ok() ? std::string() : s.message();
      });
  cmd->add_option("--tenant-isolation", f->tenant_isolation,
                  "off: tenants may share cached prefixes; api-key / header: a salt from the "
                  "client's Bearer key / from --tenant-header keeps each tenant's KV apart")
      ->check(CLI::IsMember({"off", "api-key", "header"}));
  cmd->add_option("--tenant-header", f->router.tenant_header,
                  "--tenant-isolation header: the header naming the tenant (set by a trusted "
                  "gateway; clients must not be able to set it)")
      ->check(http_header_name);
  cmd->add_flag("--debug-headers", f->router.debug_headers,
                "add x-kvcascade-matched-bytes and x-kvcascade-route-detail to responses (tell "
                "clients what is cached and every replica's load)");
  cmd->add_option("--max-attempts", f->router.max_attempts,
                  "replicas tried before the first byte reached the client")
      ->check(CLI::Range(1, 16));
  cmd->add_option("--approx-capacity-blocks", f->approx_capacity_blocks,
                  "approximate mode: blocks remembered per replica (default: what the replica's "
                  "metrics say its KV cache holds, else 1048576)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 30));
  cmd->add_option("--approx-bytes-per-token", f->pool.approx_bytes_per_token,
                  "approximate mode: prompt bytes per token of the replicas' tokenizer, to turn "
                  "their KV capacity (tokens) into router blocks (bytes)")
      ->check(CLI::Range(0.25, 64.0))
      ->capture_default_str();
  cmd->add_option("--routing-key-header", f->router.routing_key_header,
                  "requests with this header go to the replica its value's rendezvous hash picks "
                  "(sessions, RL rollouts); x-smg-routing-key is accepted too")
      ->check(http_header_name)
      ->capture_default_str();
  cmd->add_option("--approx-ttl-s", f->approx_ttl_s, "approximate mode: entry lifetime")
      ->check(CLI::Range(int64_t{1}, int64_t{86400}));
  cmd->add_option("--routed-ttl-ms", f->routed_ttl_ms,
                  "a prompt sent to a replica with KV events counts as held there for this long "
                  "before its events say so (0: not at all)")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}))
      ->capture_default_str();
  cmd->add_option_function<int64_t>(
         "--sibling-window-ms",
         [f](int64_t ms) { f->router.siblings.window = std::chrono::milliseconds(ms); },
         "identical prompts within this window go to the same replica")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  add_millis(*cmd, "--upstream-timeout-ms", f->router.upstream_timeout,
             "non-streamed requests: longest wait for the replica's reply (a whole generation; "
             "past it: 504, not retried)");
  add_millis(*cmd, "--upstream-first-byte-timeout-ms", f->router.first_byte_timeout,
             "streamed requests: longest wait for the replica's first byte (queue + prefill)");
  add_millis(*cmd, "--upstream-idle-timeout-ms", f->router.idle_timeout,
             "longest silence inside a replica's reply once it started");
  add_millis(*cmd, "--health-interval-ms", f->pool.poll_interval,
             "period of the replicas' health and load polls");
  add_millis(*cmd, "--health-timeout-ms", f->pool.poll_timeout,
             "a health and load poll (every request of it) not answered within this failed");
  cmd->add_option("--max-replica-metrics-bytes", f->pool.max_probe_body_bytes,
                  "answers to health and load polls (a replica's /metrics) larger than this are "
                  "refused; the replica is then routed on the router's own counts")
      ->check(CLI::Range(size_t{4096}, size_t{256} << 20))
      ->capture_default_str();
  cmd->add_option("--health-failures-to-dead", f->pool.failed_polls_to_dead,
                  "failed health checks in a row after which a replica's requests in flight end "
                  "(and are retried elsewhere when nothing reached the client yet)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_flag("--check-config", f->check_config, "validate the flags and exit");
  return [f] { return run_router(*f); };
}

}  // namespace kvc::cli
