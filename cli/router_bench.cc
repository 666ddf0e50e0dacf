#include "cli/router_bench.h"

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/child_process.h"
#include "cli/loadgen.h"
#include "http/errors.h"
#include "http/server.h"
#include "router/router_stack.h"

namespace kvc::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kModel = "bench";

// An instant replica: the endpoints the router's pool polls and a fixed completion. Its
// /v1/kv_events is a 404, so the router routes it in approximate mode (what it inserted itself).
class FakeReplica {
 public:
  explicit FakeReplica(std::string id) : id_(std::move(id)) {
    const std::string text(64, 'x');
    completion_ = json{{"id", "cmpl-bench"},
                       {"object", "text_completion"},
                       {"created", 0},
                       {"model", kModel},
                       {"choices", {{{"index", 0}, {"text", text}, {"finish_reason", "length"}}}},
                       {"usage", {{"prompt_tokens", 2048}, {"completion_tokens", 16}}}}
                      .dump();
    server_ = std::make_unique<http::Server>(
        http::ServerLimits{},
        [this](http::Request r, std::shared_ptr<http::Responder> w) { handle(r, *w); }, 1);
  }
  Result<uint16_t> listen() {
    auto p = server_->listen("127.0.0.1", 0);
    if (p.ok()) port_ = *p;
    return p;
  }
  uint16_t port() const { return port_; }
  int64_t completions() const { return completions_.load(); }

 private:
  void handle(const http::Request& r, http::Responder& w) {
    const std::string path = r.target.substr(0, r.target.find('?'));
    if (path == "/v1/completions" && r.method == "POST") {
      completions_.fetch_add(1);
      w.send(200, "application/json", completion_);
    } else if (path == "/v1/info") {
      w.send(200, "application/json",
             json{{"replica_id", id_}, {"model", kModel}, {"block_size", 16}}.dump());
    } else if (path == "/v1/load") {
      w.send(200, "application/json",
             R"({"queued_prefill_tokens":0,"running_sequences":0,"waiting_sequences":0})");
    } else {
      http::send_error(w, 404, "no such path: " + path, "not_found_error");
    }
  }

  std::string id_;
  std::string completion_;
  std::unique_ptr<http::Server> server_;
  uint16_t port_ = 0;
  std::atomic<int64_t> completions_{0};
};

// nginx as a reverse proxy to the fakes (keep-alive upstream connections, as the router keeps
// its own), in a temporary folder that is removed afterwards.
class Nginx {
 public:
  ~Nginx() {
    if (process_) process_->stop();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  Result<uint16_t> start(const std::string& binary, const std::vector<uint16_t>& upstreams,
                         int workers) {
    char tmpl[] = "/tmp/kvcascade-nginx-XXXXXX";
    if (!mkdtemp(tmpl)) return Error{"cannot create a temporary folder"};
    dir_ = tmpl;
    port_ = free_loopback_port();
    if (port_ == 0) return Error{"no free port"};
    std::string servers;
    for (uint16_t p : upstreams)
      servers += "    server 127.0.0.1:" + std::to_string(p) + ";\n";
    std::ofstream(dir_ + "/nginx.conf")
        << "worker_processes " << workers << ";\ndaemon off;\npid " << dir_ << "/nginx.pid;\n"
        << "error_log " << dir_ << "/error.log warn;\nevents { worker_connections 1024; }\n"
        << "http {\n  access_log off;\n  client_body_temp_path " << dir_ << "/body;\n"
        << "  proxy_temp_path " << dir_ << "/proxy;\n  fastcgi_temp_path " << dir_ << "/fcgi;\n"
        << "  uwsgi_temp_path " << dir_ << "/uwsgi;\n  scgi_temp_path " << dir_ << "/scgi;\n"
        << "  upstream replicas {\n"
        << servers << "    keepalive 64;\n  }\n"
        << "  server {\n    listen 127.0.0.1:" << port_ << ";\n"
        << "    location / {\n      proxy_pass http://replicas;\n"
        << "      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }\n"
        << "  }\n}\n";
    auto process = ChildProcess::start(
        {binary, "-p", dir_, "-c", dir_ + "/nginx.conf", "-e", dir_ + "/error.log"},
        dir_ + "/nginx.log");
    if (!process.ok()) return Error{process.error().message};
    process_ = std::move(*process);
    for (int i = 0; i < 100; ++i) {
      if (can_connect({"127.0.0.1", port_})) return port_;
      if (process_->exited()) return Error{"nginx exited at start: " + log_tail()};
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return Error{"nginx did not listen within 5 s: " + log_tail()};
  }

 private:
  std::string log_tail() const {
    std::ifstream f(dir_ + "/error.log");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return s.size() > 400 ? s.substr(s.size() - 400) : s;
  }
  std::string dir_;
  uint16_t port_ = 0;
  std::unique_ptr<ChildProcess> process_;
};

void print_run(const LoadStats& r) {
  std::printf("%-8s %5d %9.0f %8.3f %8.3f %8.3f %7lld\n", r.target.c_str(), r.concurrency, r.rps(),
              LoadStats::percentile(r.latency_ms, 0.5), LoadStats::percentile(r.latency_ms, 0.9),
              LoadStats::percentile(r.latency_ms, 0.99), static_cast<long long>(r.errors));
  std::fflush(stdout);
}

}  // namespace

int run_router_bench(const RouterBenchOptions& o) {
  std::vector<std::unique_ptr<FakeReplica>> fakes;
  std::vector<uint16_t> fake_ports;
  std::vector<Endpoint> fake_endpoints;
  std::vector<std::string> addresses;
  for (int i = 0; i < o.replicas; ++i) {
    fakes.push_back(std::make_unique<FakeReplica>("fake" + std::to_string(i)));
    auto p = fakes.back()->listen();
    if (!p.ok()) {
      std::fprintf(stderr, "kvcascade bench router: %s\n", p.error().message.c_str());
      return 2;
    }
    fake_ports.push_back(*p);
    fake_endpoints.push_back({"127.0.0.1", *p});
    addresses.push_back("127.0.0.1:" + std::to_string(*p));
  }

  RouterStackConfig rc;
  rc.replicas = addresses;
  rc.http_threads = o.router_threads;
  rc.router.policy = "kvcascade";
  RouterStack router(rc);
  auto router_port = router.start("127.0.0.1", 0);
  if (!router_port.ok()) {
    std::fprintf(stderr, "kvcascade bench router: %s\n", router_port.error().message.c_str());
    return 2;
  }
  for (int i = 0; i < 200; ++i) {
    auto s = router.pool().snapshot();
    if (std::count_if(s.begin(), s.end(), [](const ReplicaView& r) { return r.healthy; }) ==
        o.replicas)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

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
      "kvcascade bench router: %d instant fake replicas, %d tenants x %d-byte prompt prefixes, "
      "%.1f s per run (closed loop, keep-alive), %u cores, nginx %d workers\n\n",
      o.replicas, o.tenants, o.prompt_bytes, o.seconds, std::thread::hardware_concurrency(),
      workers);
  std::printf("%-8s %5s %9s %8s %8s %8s %7s\n", "target", "conns", "req/s", "p50 ms", "p90 ms",
              "p99 ms", "errors");
  std::vector<LoadStats> runs;
  std::vector<int64_t> router_share(fakes.size(), 0);
  for (int conc : {1, o.concurrency}) {
    runs.push_back(run_closed_loop("direct", fake_endpoints, conc, o.seconds, requests, false));
    print_run(runs.back());
    for (size_t i = 0; i < fakes.size(); ++i)
      router_share[i] -= fakes[i]->completions();
    runs.push_back(
        run_closed_loop("router", {{"127.0.0.1", *router_port}}, conc, o.seconds, requests, false));
    print_run(runs.back());
    for (size_t i = 0; i < fakes.size(); ++i)
      router_share[i] += fakes[i]->completions();
    if (nginx_port.ok()) {
      runs.push_back(
          run_closed_loop("nginx", {{"127.0.0.1", *nginx_port}}, conc, o.seconds, requests, false));
      print_run(runs.back());
    }
  }

  auto find = [&](const std::string& target, int conc) -> const LoadStats* {
    for (const LoadStats& r : runs)
      if (r.target == target && r.concurrency == conc) return &r;
    return nullptr;
  };
  json j;
  j["options"] = {{"seconds", o.seconds},    {"concurrency", o.concurrency},
                  {"replicas", o.replicas},  {"prompt_bytes", o.prompt_bytes},
                  {"tenants", o.tenants},    {"cores", std::thread::hardware_concurrency()},
                  {"nginx_workers", workers}};
  j["runs"] = json::array();
  for (const LoadStats& r : runs)
    j["runs"].push_back(r.to_json());
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
  std::printf("router added p99 latency at 1 connection: %.3f ms (target <= 1 ms)", added);
  if (find("nginx", 1) != nullptr) {
    const double nginx_added = p99("nginx") - p99("direct");
    j["nginx_added_p99_ms"] = nginx_added;
    std::printf("; nginx adds %.3f ms", nginx_added);
  }
  std::printf("\n");
  if (const LoadStats* n = find("nginx", o.concurrency)) {
    const double ratio = find("router", o.concurrency)->rps() / n->rps();
    j["router_vs_nginx_throughput"] = ratio;
    std::printf(
        "router throughput at %d connections: %.0f req/s = %.2fx nginx's %.0f (target >= "
        "0.7x)\n",
        o.concurrency, find("router", o.concurrency)->rps(), ratio, n->rps());
  }
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << j.dump(1) << "\n";
    if (!f) {
      std::fprintf(stderr, "kvcascade bench router: cannot write %s\n", o.out.c_str());
      return 2;
    }
    std::printf("wrote %s\n", o.out.c_str());
  }
  router.stop();
  return 0;
}

}  // namespace kvc::cli
