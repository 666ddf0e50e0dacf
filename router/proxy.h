// The router's HTTP front: the replicas' OpenAI-compatible API, routed by prefix. For each
// request it renders and hashes the prompt, asks the index which replica holds how much of it,
// pins sibling bursts, lets the policy choose, and proxies the request there unchanged, streaming
// the answer back byte for byte. A replica that fails before the first byte reached the client
// is retried on another; after that the client gets a clean error event. A replica that stalls
// is cut by the timeouts below or by the pool's health checks; a client that leaves ends the
// upstream exchange at once (the replica then frees the group). A try that timed out once its
// request was sent ends as a 504 when it is the last (other failures: 502).
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/openai_request.h"
#include "http/client.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "prefix_index/radix_index.h"
#include "router/fleet/replica_pool.h"
#include "router/policy/policy.h"
#include "router/policy/sibling_tracker.h"
#include "router/router_stats.h"
#include "router/tenant.h"
#include "router/weight_rollout.h"

namespace kvc {

struct RouterConfig {
  std::string policy = "kvcascade";
  // When not empty, clients must send "Authorization: Bearer <one of these>" (probes excepted).
  std::vector<std::string> api_keys;
  // Sent to replicas started with --api-key, on every proxied request (the pool's polls and
  // subscriptions send PoolConfig::replica_api_key). Empty: none.
  std::string replica_api_key;
  int32_t max_attempts = 3;  // replicas tried before the first byte was sent
  // Upstream exchanges. A replica sends a streamed reply's headers with its first token, so
  // first_byte_timeout bounds the queueing and prefill of a streamed request; a non-streamed
  // reply comes whole when the generation is done, so upstream_timeout bounds the whole
  // generation: a request that misses it gets a 504 and is not retried elsewhere (it would take
  // as long there; proxy.cc on_done). A stream without its first byte is retried (another
  // replica may start it sooner). idle_timeout is the longest silence once a reply started
  // (between two SSE events; a streaming replica sends one per decode step).
  std::chrono::milliseconds first_byte_timeout{60000};
  std::chrono::milliseconds upstream_timeout{600000};
  std::chrono::milliseconds idle_timeout{30000};
  // Tenant isolation (router/tenant.h): the salt derived from the client's key or from
  // `tenant_header` is the request's cache_salt, for hashing and at the replica.
  TenantIsolation tenant_isolation = TenantIsolation::kOff;
  std::string tenant_header;  // kHeader: the header a trusted gateway sets, e.g. x-tenant-id
  // Adds x-kvcascade-matched-bytes to responses: how much of the prompt the chosen replica held,
  // which without tenant isolation tells a client what others have cached; and
  // x-kvcascade-route-detail: the kvcascade policy's view of every healthy candidate for this
  // decision (RouteDecision::detail: ids, matches, work, bounds, costs). Off by default.
  bool debug_headers = false;
  // An explicit affinity key: requests carrying this header (or SGLang gateway's
  // x-smg-routing-key) go to the replica the key's rendezvous hash picks, whatever the policy.
  std::string routing_key_header = "x-kvcascade-routing-key";
  // Blocks at the start of a prompt that key its rendezvous hash (RouteRequest::affinity_key):
  // prompts that share them go to the same replica while cold, so a later one finds the prefix.
  int32_t affinity_key_blocks = 4;
  SiblingTrackerConfig siblings;
  ApiLimits api;
  // Which kvcascade replicas take new requests while their weight versions differ: "latest"
  // (only those at the newest version among healthy replicas: the one a replica loaded last, by
  // the load times the replicas report, so every router finds the same one; a group already
  // placed stays where it is, so it is never split across versions) or "any". A request header
  // x-kvcascade-weight-version: V takes only replicas at V (409 when none).
  std::string weight_version_policy = "latest";
  // Sent to replicas on /router/admin/weights' fan-out (their --admin-api-key); empty: the
  // replica_api_key.
  std::string replica_admin_api_key;
  // The admin endpoints (/router/admin/*) take only "Authorization: Bearer <one of these>" when
  // any is given (never a client key of api_keys). With none, they are refused (403) when the
  // router has api_keys or tenant isolation, since a tenant must never administer the fleet, and
  // open only on a router with neither (a trusted network).
  std::vector<std::string> admin_api_keys;
  // No admin key on a router that tells clients apart: /router/admin/* is refused to everyone.
  bool admin_disabled() const {
    return admin_api_keys.empty() &&
           (!api_keys.empty() || tenant_isolation != TenantIsolation::kOff);
  }
};

class RouterServer {
 public:
  // `indexes`: what each replica holds (the pool feeds the exact one; the proxy inserts into the
  // approximate one for replicas without KV events). registry/metrics: /metrics and its
  // counters; may be null.
  RouterServer(ReplicaPool& pool, FleetIndexes& indexes, http::Client& client, const Clock& clock,
               RouterConfig config, prometheus::Registry* registry = nullptr,
               metrics::RouterMetrics* metrics = nullptr);

  void handle(http::Request request, std::shared_ptr<http::Responder> responder);
  RouterStats& stats() { return stats_; }

 private:
  class ProxiedRequest;  // one client request on its way to a replica (proxy.cc)
  void route(Endpoint endpoint, http::Request request, std::shared_ptr<http::Responder> responder);
  // The gate of /router/admin/* (RouterConfig::admin_api_keys); false: refused (answered).
  bool authorize_admin(const http::Request& request, http::Responder& responder);
  // Replies to probes: 200 while at least one replica is healthy, else 503.
  void send_readiness(http::Responder& responder);
  std::string state_json();

  ReplicaPool& pool_;
  FleetIndexes& indexes_;
  http::Client& client_;
  RouterConfig config_;
  std::unique_ptr<Policy> policy_;
  std::mutex policy_mu_;
  SiblingTracker siblings_;
  prometheus::Registry* registry_;
  metrics::RouterMetrics* metrics_;
  RouterStats stats_;
  const Clock& clock_;
  std::unique_ptr<WeightRollout> rollout_;  // POST /router/admin/weights (weight_rollout.h)
};

}  // namespace kvc
