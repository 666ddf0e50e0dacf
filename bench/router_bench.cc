#include "bench/router_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/child_process.h"
#include "bench/fake_engine.h"
#include "bench/loadgen.h"
#include "http/client.h"
#include "http/errors.h"
#include "http/server.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;

constexpr const char* kModel = "bench";

// nginx as a reverse proxy to the fakes (keep-alive upstream connections, as the router keeps
// its own), in a temporary folder that is removed afterwards.
class Nginx {
 public:
  Result<uint16_t> start(const std::string& binary, const std::vector<uint16_t>& upstreams,
                         int workers) {
    auto dir = TempDir::create("nginx");
    if (!dir.ok()) return Error{dir.error().message};
    dir_ = std::move(*dir);
    port_ = free_loopback_port();
    if (port_ == 0) return Error{"no free port"};
    const std::string d = dir_.path();
    std::string servers;
    for (uint16_t p : upstreams)
      servers += "    server 127.0.0.1:" + std::to_string(p) + ";\n";
    std::ofstream(dir_.file("nginx.conf"))
        << "worker_processes " << workers << ";\ndaemon off;\npid " << d << "/nginx.pid;\n"
        << "error_log " << d << "/error.log warn;\nevents { worker_connections 1024; }\n"
        << "http {\n  access_log off;\n  client_body_buffer_size 1m;\n"
        << "  client_body_temp_path " << d << "/body;\n"
        << "  proxy_temp_path " << d << "/proxy;\n  fastcgi_temp_path " << d << "/fcgi;\n"
        << "  uwsgi_temp_path " << d << "/uwsgi;\n  scgi_temp_path " << d << "/scgi;\n"
        << "  upstream replicas {\n"
        << servers << "    keepalive 64;\n  }\n"
        << "  server {\n    listen 127.0.0.1:" << port_ << ";\n"
        << "    location / {\n      proxy_pass http://replicas;\n"
        << "      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }\n"
        << "  }\n}\n";
    auto process = ChildProcess::start(
        {binary, "-p", d, "-c", dir_.file("nginx.conf"), "-e", dir_.file("error.log")},
        dir_.file("nginx.log"));
    if (!process.ok()) return Error{process.error().message};
    process_ = std::move(*process);
    for (int i = 0; i < 100; ++i) {
      if (can_connect({"127.0.0.1", port_})) return port_;
      if (process_->exited()) return Error{"nginx exited at start: " + file_tail(error_log())};
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Error{"nginx did not listen within 5 s: " + file_tail(error_log())};
  }
  pid_t pid() const { return process_ ? process_->pid() : -1; }

 private:
  std::string error_log() const { return dir_.file("error.log"); }
  TempDir dir_;  // first: removed after the process has stopped
  uint16_t port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

struct RouterProcess {
  TempDir dir;  // its log; first: removed after the process has stopped
  std::unique_ptr<ChildProcess> process;
  uint16_t port = 0;
};

// `kvcascade router` (`binary`, empty: this binary) in front of `replicas`; waits (bounded) until
// it reports every replica healthy in /router/state.
Result<RouterProcess> start_router(const std::vector<std::string>& replicas, int threads,
                                   std::string binary) {
  RouterProcess r;
  if (binary.empty()) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return Error{"cannot find this binary (/proc/self/exe)"};
    self[n] = '\0';
    binary = self;
  }
  r.port = free_loopback_port();
  if (r.port == 0) return Error{"no free port"};
  std::vector<std::string> argv = {binary,           "router",
                                   "--host",         "127.0.0.1",
                                   "--port",         std::to_string(r.port),
                                   "--http-threads", std::to_string(threads)};
  for (const std::string& a : replicas) {
    argv.push_back("--replica");
    argv.push_back(a);
  }
  auto dir = TempDir::create("bench-router");
  if (!dir.ok()) return Error{dir.error().message};
  r.dir = std::move(*dir);
  const std::string log = r.dir.file("router.log");
  auto process = ChildProcess::start(argv, log);
  if (!process.ok()) return Error{process.error().message};
  r.process = std::move(*process);
  http::Client client;
  for (int i = 0; i < 200; ++i) {
    auto state = client.request("127.0.0.1", r.port, "GET", "/router/state", "", {},
                                std::chrono::seconds(1));
    if (state.ok() && state->status == 200) {
      const json j = json::parse(state->body, nullptr, false);
      size_t healthy = 0;
      if (j.is_object() && j.contains("replicas")) {
        for (const json& rep : j["replicas"])
          healthy += rep.value("healthy", false) ? 1 : 0;
      }
      if (healthy == replicas.size()) return r;
    }
    if (r.process->exited()) return Error{"the router exited at start: " + file_tail(log)};
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Error{"the router did not report its replicas healthy within 10 s: " + file_tail(log)};
}

// A proxy's CPU time per request during one run: all of it, and the part in user space (the
// rest is the kernel's: its socket calls, and on a virtual machine the hypervisor's cost of each
// sleep and wake-up, which swings from run to run).
struct CpuPerRequest {
  double total_us = 0;
  double user_us = 0;
};

// One closed-loop run, with the CPU time the process (tree) `pid` used during it, per request.
LoadStats measured(const std::string& target, const std::vector<Endpoint>& endpoints, int conc,
                   double seconds, const std::vector<std::string>& requests, pid_t pid,
                   CpuPerRequest& cpu) {
  const ProcessCpu before = process_cpu(pid);
  LoadStats s = run_closed_loop(target, endpoints, conc, seconds, requests, false);
  const ProcessCpu after = process_cpu(pid);
  if (pid > 0 && s.exchanges > 0) {
    const double n = static_cast<double>(s.exchanges);
    cpu.total_us = (after.total() - before.total()) * 1e6 / n;
    cpu.user_us = (after.user_s - before.user_s) * 1e6 / n;
  }
  return s;
}

void print_run(const LoadStats& r, const CpuPerRequest& cpu) {
  std::printf("%-8s %5d %9.0f %8.3f %8.3f %8.3f %7lld", r.target.c_str(), r.concurrency, r.rps(),
              LoadStats::percentile(r.latency_ms, 0.5), LoadStats::percentile(r.latency_ms, 0.9),
              LoadStats::percentile(r.latency_ms, 0.99), static_cast<long long>(r.errors));
  if (cpu.total_us > 0) std::printf(" %10.1f %9.1f", cpu.total_us, cpu.user_us);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace

int run_router_bench(const RouterBenchOptions& o) {
  const std::optional<ReplicaKind> kind = parse_replica_kind(o.replica_kind);
  if (!kind || *kind == ReplicaKind::kAuto) {
    std::fprintf(stderr, "kvcascade bench router: unknown replica kind '%s'\n",
                 o.replica_kind.c_str());
    return 2;
  }
  std::vector<std::unique_ptr<FakeEngine>> fakes;
  std::vector<uint16_t> fake_ports;
  std::vector<Endpoint> fake_endpoints;
  std::vector<std::string> addresses;
  for (int i = 0; i < o.replicas; ++i) {
    FakeEngineOptions fo;
    fo.kind = *kind;
    fo.id = "fake" + std::to_string(i);
    fo.models = {kModel};
    fakes.push_back(std::make_unique<FakeEngine>(fo));
    auto p = fakes.back()->start();
    if (!p.ok()) {
      std::fprintf(stderr, "kvcascade bench router: %s\n", p.error().message.c_str());
      return 2;
    }
    fake_ports.push_back(*p);
    fake_endpoints.push_back({"127.0.0.1", *p});
    addresses.push_back("127.0.0.1:" + std::to_string(*p));
  }

  // The router as its own process (as nginx is), so that its CPU time per request is measured
  // the same way.
  auto router = start_router(addresses, o.router_threads, o.router_binary);
  if (!router.ok()) {
    std::fprintf(stderr, "kvcascade bench router: %s\n", router.error().message.c_str());
    return 2;
  }
  const uint16_t router_port = router->port;

  Nginx nginx;
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto nginx_port = nginx.start(o.nginx, fake_ports, workers);
  if (!nginx_port.ok()) {
    std::printf("nginx: not measured (%s; scripts/install-deps.sh installs it)\n",
                nginx_port.error().message.c_str());
  }

  Workload w;
  w.model = kModel;
  w.tenants = o.tenants;
  w.prompt_bytes = o.prompt_bytes;
  const std::vector<std::string> requests = prepare_requests(w);
  std::printf(
      "kvcascade bench router: %d instant fake %s replicas, %d tenants x %d-byte prompt "
      "prefixes, %.1f s per run (closed loop, keep-alive), %u cores, nginx %d workers\n\n",
      o.replicas, o.replica_kind.c_str(), o.tenants, o.prompt_bytes, o.seconds,
      std::thread::hardware_concurrency(), workers);
  std::printf("%-8s %5s %9s %8s %8s %8s %7s %10s %9s\n", "target", "conns", "req/s", "p50 ms",
              "p90 ms", "p99 ms", "errors", "cpu us/req", "user us");
  std::vector<LoadStats> runs;
  std::map<std::pair<std::string, int>, CpuPerRequest> cpu;  // the proxies'
  std::vector<int64_t> router_share(fakes.size(), 0);
  std::vector<int> concurrencies = {1};
  if (o.concurrency != 1) concurrencies.push_back(o.concurrency);
  for (int conc : concurrencies) {
    CpuPerRequest unused;
    runs.push_back(measured("direct", fake_endpoints, conc, o.seconds, requests, -1, unused));
    print_run(runs.back(), unused);
    for (size_t i = 0; i < fakes.size(); ++i)
      router_share[i] -= fakes[i]->completions();
    runs.push_back(measured("router", {{"127.0.0.1", router_port}}, conc, o.seconds, requests,
                            router->process->pid(), cpu[{"router", conc}]));
    print_run(runs.back(), cpu[{"router", conc}]);
    for (size_t i = 0; i < fakes.size(); ++i)
      router_share[i] += fakes[i]->completions();
    if (nginx_port.ok()) {
      runs.push_back(measured("nginx", {{"127.0.0.1", *nginx_port}}, conc, o.seconds, requests,
                              nginx.pid(), cpu[{"nginx", conc}]));
      print_run(runs.back(), cpu[{"nginx", conc}]);
    }
  }

  auto find = [&](const std::string& target, int conc) -> const LoadStats* {
    for (const LoadStats& r : runs)
      if (r.target == target && r.concurrency == conc) return &r;
    return nullptr;
  };
  json j;
  j["options"] = {{"seconds", o.seconds},
                  {"concurrency", o.concurrency},
                  {"replica_kind", o.replica_kind},
                  {"replicas", o.replicas},
                  {"prompt_bytes", o.prompt_bytes},
                  {"tenants", o.tenants},
                  {"cores", std::thread::hardware_concurrency()},
                  {"nginx_workers", workers}};
  j["runs"] = json::array();
  for (const LoadStats& r : runs) {
    json run = r.to_json();
    if (auto it = cpu.find({r.target, r.concurrency}); it != cpu.end()) {
      run["proxy_cpu_us_per_request"] = it->second.total_us;
      run["proxy_user_cpu_us_per_request"] = it->second.user_us;
    }
    j["runs"].push_back(run);
  }
  j["router_requests_per_replica"] = router_share;
  auto p99 = [&](const char* target) {
    return LoadStats::percentile(find(target, 1)->latency_ms, 0.99);
  };
  const double added = p99("router") - p99("direct");
  j["router_added_p99_ms"] = added;
  std::printf("\nrouter: requests per replica");
  for (int64_t n : router_share)
    std::printf(" %lld", static_cast<long long>(n));
  std::printf(" (kvcascade policy: a tenant's prefix stays on one replica)\n");
  size_t accepted = 0;
  for (const auto& f : fakes)
    accepted += f->connections_accepted();
  std::printf("connections the fake replicas accepted in all runs: %zu\n", accepted);
  std::printf("router added p99 latency at 1 connection: %.3f ms (target <= 1 ms)", added);
  if (find("nginx", 1) != nullptr) {
    const double nginx_added = p99("nginx") - p99("direct");
    j["nginx_added_p99_ms"] = nginx_added;
    std::printf("; nginx adds %.3f ms", nginx_added);
  }
  std::printf("\n");
  if (const LoadStats* n = find("nginx", o.concurrency); n != nullptr && n->rps() > 0) {
    const double ratio = find("router", o.concurrency)->rps() / n->rps();
    j["router_vs_nginx_throughput"] = ratio;
    std::printf(
        "router throughput at %d connections: %.0f req/s = %.2fx nginx's %.0f (target >= "
        "0.7x)\n",
        o.concurrency, find("router", o.concurrency)->rps(), ratio, n->rps());
    const CpuPerRequest& rc = cpu[{"router", o.concurrency}];
    const CpuPerRequest& nc = cpu[{"nginx", o.concurrency}];
    const double cpu_ratio = nc.total_us > 0 ? rc.total_us / nc.total_us : 0.0;
    j["router_vs_nginx_cpu"] = cpu_ratio;
    std::printf(
        "proxy CPU per request at %d connections: router %.1f us = %.2fx nginx's %.1f us (target "
        "<= 1.2x at 2 KB prompts); in user space router %.1f us, nginx %.1f us\n",
        o.concurrency, rc.total_us, cpu_ratio, nc.total_us, rc.user_us, nc.user_us);
  }
  int rc = 0;
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << j.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "kvcascade bench router: cannot write %s\n", o.out.c_str());
      rc = 2;
    } else {
      std::printf("wrote %s\n", o.out.c_str());
    }
  }
  router->process->stop();
  int64_t errors = 0;
  for (const LoadStats& r : runs)
    errors += r.errors;
  if (errors > 0) {
    std::fprintf(stderr, "kvcascade bench router: %lld requests failed\n",
                 static_cast<long long>(errors));
    return 1;
  }
  return rc;
}

}  // namespace kvc::bench
