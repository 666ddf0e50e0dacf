// A whole router in one object (wiring: it lives in cli/): indexes, upstream client, replica pool
// (with optional DNS discovery), metrics and the HTTP server. `kvcascade router`, `kvcascade demo`
// and the router tests build it the same way.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "http/client.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "router/fleet/dns_discovery.h"
#include "router/fleet/fleet_indexes.h"
#include "router/fleet/replica_pool.h"
#include "router/proxy.h"

namespace kvc {

struct RouterStackConfig {
  RouterConfig router;
  PoolConfig pool;
  http::ServerLimits limits;
  // Threads of the HTTP server's io_context, which also runs the upstream client's exchanges.
  // One thread (the default) hands nothing between threads: on a 2-core VM it used 70 us of CPU
  // per proxied request against 107-116 us with two (bench/results/router.md).
  int http_threads = 1;
  std::vector<std::string> replicas;  // host:port
  // The kind of each replica (same length as `replicas`), or of all (one entry); empty or kAuto:
  // detected. Replicas found by DNS take pool.default_kind.
  std::vector<ReplicaKind> replica_kinds;
  std::string replica_dns;  // NAME:PORT, instead of `replicas`
  std::chrono::milliseconds dns_interval{5000};
  size_t approx_capacity_blocks = 1 << 20;
  std::chrono::seconds approx_ttl{600};
  // How long a prompt sent to a replica with KV events counts as held there before its events
  // say so (FleetIndexes::routed); 0: not at all.
  std::chrono::milliseconds routed_ttl = FleetIndexes::kRoutedTtl;
};

class RouterStack {
 public:
  // `clock`: the indexes' TTLs, the pool's health and backoff, the proxy's timings and sibling
  // windows (tests pass a FakeClock); it must outlive the stack.
  explicit RouterStack(RouterStackConfig config, const Clock& clock = SteadyClock::instance());
  ~RouterStack();

  // Adds the replicas, starts polling/subscriptions and listens. Returns the bound port.
  Result<uint16_t> start(const std::string& host, uint16_t port);
  void stop();

  ReplicaPool& pool() { return *pool_; }
  RouterServer& server() { return *server_; }
  FleetIndexes& indexes() { return indexes_; }

 private:
  RouterStackConfig config_;
  FleetIndexes indexes_;
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<http::Client> client_;
  prometheus::Registry registry_;
  metrics::RouterMetrics metrics_;
  std::unique_ptr<ReplicaPool> pool_;
  std::unique_ptr<DnsDiscovery> dns_;
  std::unique_ptr<RouterServer> server_;
};

}  // namespace kvc
