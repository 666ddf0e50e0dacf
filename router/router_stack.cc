#include "router/router_stack.h"

#include <algorithm>

namespace kvc {
namespace {

RadixIndexConfig approx_config(const RouterStackConfig& c) {
  RadixIndexConfig r;
  r.capacity_blocks_per_replica = c.approx_capacity_blocks;
  r.ttl = c.approx_ttl;
  return r;
}

// Proxied requests set their own timeouts (RouterConfig); these are for the pool's polls and
// KV-event feeds.
http::ClientLimits client_limits() {
  http::ClientLimits l;
  l.body_idle_timeout = std::chrono::hours(24);  // KV-event streams are long-lived
  return l;
}

// One replica key for everything the router sends a replica: proxied requests and pool traffic.
RouterStackConfig with_replica_key(RouterStackConfig c) {
  c.pool.replica_api_key = c.router.replica_api_key;
  return c;
}

}  // namespace

RouterStack::RouterStack(RouterStackConfig config, const Clock& clock)
    : config_(with_replica_key(std::move(config))),
      indexes_(clock, approx_config(config_), {.ttl = config_.routed_ttl}),
      metrics_(registry_) {
  http::ServerLimits limits = config_.limits;
  limits.on_response = [this](int status) { metrics_.count_response(status); };
  http_ = std::make_unique<http::Server>(
      std::move(limits),
      [this](http::Request r, std::shared_ptr<http::Responder> w) {
        server_->handle(std::move(r), std::move(w));
      },
      config_.http_threads);
  client_ = std::make_unique<http::Client>(client_limits(), *http_);
  PoolConfig pool = config_.pool;
  // Feeds start after start(), when server_ exists.
  pool.on_resync = [this, also = config_.pool.on_resync](const std::string& replica,
                                                         const char* reason) {
    server_->stats().note_kv_resync(replica, reason);
    if (also) also(replica, reason);
  };
  pool_ = std::make_unique<ReplicaPool>(*client_, indexes_, clock, pool);
  server_ = std::make_unique<RouterServer>(*pool_, indexes_, *client_, clock, config_.router,
                                           &registry_, &metrics_);
}

RouterStack::~RouterStack() {
  stop();
}

Result<uint16_t> RouterStack::start(const std::string& host, uint16_t port) {
  // Every address before any replica is added (`kvcascade router --check-config` runs it too).
  if (Status s = check_replica_addresses(config_.replicas, config_.replica_dns); !s.ok()) {
    return Error{s.message()};
  }
  const std::vector<ReplicaKind>& kinds = config_.replica_kinds;
  if (kinds.size() > 1 && kinds.size() != config_.replicas.size()) {
    return Error{"give one replica kind for all replicas or one per replica (" +
                 std::to_string(kinds.size()) + " kinds for " +
                 std::to_string(config_.replicas.size()) + " replicas)"};
  }
  for (size_t i = 0; i < config_.replicas.size(); ++i) {
    const ReplicaKind kind =
        kinds.empty() ? ReplicaKind::kAuto : kinds[std::min(i, kinds.size() - 1)];
    if (auto added = pool_->add(config_.replicas[i], kind); !added.ok()) {
      return Error{added.error().message};
    }
  }
  if (!config_.replica_dns.empty()) {
    dns_ = std::make_unique<DnsDiscovery>(*pool_, config_.replica_dns, config_.dns_interval);
    if (Status s = dns_->start(); !s.ok()) return Error{s.message()};
  }
  pool_->poll_now();
  pool_->start();
  return http_->listen(host, port);
}

void RouterStack::stop() {
  // The client's exchanges (KV-event subscriptions, requests in flight) end while the server's
  // threads still run them; then the server stops and joins its threads. The server object
  // stays: the client's io_context is its.
  if (client_) client_->shutdown();
  if (http_) http_->stop();
  dns_.reset();
}

}  // namespace kvc
