// Replica discovery through DNS (a Kubernetes headless Service): NAME:PORT is resolved every
// `interval`, and the pool's addresses follow the answer, so replicas that appear join and those
// that disappear leave the index.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "router/fleet/replica_pool.h"

namespace kvc {

// All IPv4/IPv6 addresses of `name`, as "ip:port" ("[ip]:port" for IPv6), sorted.
Result<std::vector<std::string>> resolve_all(const std::string& name, uint16_t port);

class DnsDiscovery {
 public:
  // target: "name:port".
  DnsDiscovery(ReplicaPool& pool, std::string target, std::chrono::milliseconds interval);
  ~DnsDiscovery();
  Status start();  // fails on a malformed target; resolution errors are retried

 private:
  void run();
  ReplicaPool& pool_;
  std::string target_, name_;
  uint16_t port_ = 0;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace kvc
