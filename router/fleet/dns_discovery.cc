#include "router/fleet/dns_discovery.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "http/client.h"

namespace kvc {

Result<std::vector<std::string>> resolve_all(const std::string& name, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(name.c_str(), nullptr, &hints, &res); rc != 0) {
    return Error{"cannot resolve " + name + ": " + gai_strerror(rc)};
  }
  std::vector<std::string> out;
  for (addrinfo* a = res; a; a = a->ai_next) {
    char ip[INET6_ADDRSTRLEN] = {};
    if (a->ai_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, ip, sizeof ip);
      out.push_back(std::string(ip) + ":" + std::to_string(port));
    } else if (a->ai_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr, ip, sizeof ip);
      out.push_back(std::string("[").append(ip).append("]:").append(std::to_string(port)));
    }
  }
  freeaddrinfo(res);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

DnsDiscovery::DnsDiscovery(ReplicaPool& pool, std::string target,
                           std::chrono::milliseconds interval)
    : pool_(pool), target_(std::move(target)), interval_(interval) {}

DnsDiscovery::~DnsDiscovery() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Status parse_dns_target(const std::string& target, std::string& name, uint16_t& port) {
  // The one host:port parser of the project (digits only, 1..65535).
  if (!http::parse_host_port(target, name, port) || target.find("://") != std::string::npos) {
    return Error{"--replica-dns wants NAME:PORT (port 1-65535), got '" + target + "'"};
  }
  return Status::Ok();
}

Status check_replica_addresses(const std::vector<std::string>& replicas,
                               const std::string& replica_dns) {
  std::string host;
  uint16_t port = 0;
  for (const std::string& address : replicas) {
    if (Status s = parse_replica_address(address, host, port); !s.ok()) return s;
  }
  if (!replica_dns.empty()) return parse_dns_target(replica_dns, host, port);
  return Status::Ok();
}

Status DnsDiscovery::start() {
  if (Status s = parse_dns_target(target_, name_, port_); !s.ok()) return s;
  thread_ = std::thread([this] { run(); });
  return Status::Ok();
}

void DnsDiscovery::run() {
  while (true) {
    // A failed lookup keeps the current set: DNS hiccups must not empty the pool.
    if (auto addrs = resolve_all(name_, port_); addrs.ok()) pool_.set_addresses(*addrs);
    std::unique_lock lock(mu_);
    if (wake_.wait_for(lock, interval_, [&] { return stopping_; })) return;
  }
}

}  // namespace kvc
