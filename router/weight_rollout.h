// POST /router/admin/weights: a weight update fanned out to the fleet's kvcascade replicas (each
// gets POST /v1/admin/weights, replica/server/replica_server.h), all at once or rolling (at most
// `max_parallel` replicas updating at a time, so the others keep serving; a failure stops the
// roll). Answers when done, with each replica's result and version; the pool is polled then, so
// /router/state and version-aware routing (RouterConfig::weight_version_policy) see the new
// versions at once. Who may call it: RouterConfig::admin_api_keys (RouterServer checks it
// before this runs). Status: 200 when every replica updated; 400 or 409 when every replica called
// refused the update itself with that status (a folder none has, an update already running:
// the client's error, nothing changed); else 502 (a replica failed, was unreachable or refused
// the router's key, or the outcomes differ). weight_rollout.cc reply_status says it in full.
//
// Body: {"path": DIR, "version": V, "mode": "drain" | "abort", "strategy": "rolling" |
// "all-at-once", "max_parallel": k (rolling; default 1), "replicas": [ids] (default: every
// healthy kvcascade replica)}.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http/client.h"
#include "http/server.h"
#include "router/fleet/replica_pool.h"

namespace kvc {

class WeightRollout {
 public:
  // replica_admin_key: sent as the Bearer token to the replicas (their --admin-api-key, else
  // their --api-key); empty: none.
  WeightRollout(ReplicaPool& pool, http::Client& client, std::string replica_admin_key);
  ~WeightRollout();  // waits for rollouts in flight
  WeightRollout(const WeightRollout&) = delete;
  WeightRollout& operator=(const WeightRollout&) = delete;

  void handle(const http::Request& request, std::shared_ptr<http::Responder> responder);

 private:
  struct Target {
    std::string id, host;
    uint16_t port;
  };
  void run(std::vector<Target> targets, std::string body, int max_parallel,
           std::shared_ptr<http::Responder> responder);

  ReplicaPool& pool_;
  http::Client& client_;
  std::string key_;
  std::mutex mu_;
  bool running_ = false;  // one rollout at a time (guarded by mu_)
  std::vector<std::thread> threads_;
};

}  // namespace kvc
