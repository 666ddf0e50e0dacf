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

// A --replica-dns target as DnsDiscovery::start takes it: NAME:PORT (port 1-65535, no scheme).
Status parse_dns_target(const std::string& target, std::string& name, uint16_t& port);

// The replica addresses a router starts with, checked as they will be used: each of `replicas`
// as ReplicaPool::add parses it, `replica_dns` (unless empty) as DnsDiscovery::start does.
// RouterStack::start runs it before adding any, and `kvcascade router --check-config` too, so
// the check passes exactly what a real start takes.
Status check_replica_addresses(const std::vector<std::string>& replicas,
                               const std::string& replica_dns);

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
