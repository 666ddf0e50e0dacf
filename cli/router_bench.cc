#include "cli/router_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
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
#include "http/errors.h"
#include "http/server.h"
#include "router/router_stack.h"

namespace kvc::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
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

// One keep-alive HTTP/1.1 connection with blocking I/O: the load generator's client. It writes a
// prepared request and reads one response (Content-Length or chunked), nothing else, so that the
// client's own cost is small and the same for every target.
class RawConnection {
 public:
  ~RawConnection() { close_fd(); }
  bool connect_to(uint16_t port) {
    close_fd();
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ < 0) return false;
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      close_fd();
      return false;
    }
    buf_.clear();
    return true;
  }
  bool connected() const { return fd_ >= 0; }
  // The response's status (its body is read and dropped); 0 on any I/O or framing error, after
  // which the connection is closed.
  int exchange(const std::string& request) {
    size_t sent = 0;
    while (sent < request.size()) {
      const ssize_t n = send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return fail();
      sent += static_cast<size_t>(n);
    }
    size_t head_end;
    while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
      if (!fill()) return fail();
    }
    const std::string head = buf_.substr(0, head_end);
    buf_.erase(0, head_end + 4);
    if (head.size() < 12 || head.compare(0, 5, "HTTP/") != 0) return fail();
    const int status = std::atoi(head.c_str() + 9);
    std::string lower = head;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (const size_t cl = lower.find("\r\ncontent-length:"); cl != std::string::npos) {
      const size_t len = std::strtoull(lower.c_str() + cl + 17, nullptr, 10);
      while (buf_.size() < len) {
        if (!fill()) return fail();
      }
      buf_.erase(0, len);
    } else if (lower.find("\r\ntransfer-encoding: chunked") != std::string::npos) {
      for (;;) {
        size_t eol;
        while ((eol = buf_.find("\r\n")) == std::string::npos) {
          if (!fill()) return fail();
        }
        const size_t size = std::strtoull(buf_.c_str(), nullptr, 16);
        while (buf_.size() < eol + 2 + size + 2) {
          if (!fill()) return fail();
        }
        buf_.erase(0, eol + 2 + size + 2);
        if (size == 0) break;  // no trailers are sent by any of the targets
      }
    } else {
      return fail();  // every target frames its bodies
    }
    if (lower.find("\r\nconnection: close") != std::string::npos) close_fd();
    return status;
  }

 private:
  bool fill() {
    char chunk[16384];
    const ssize_t n = recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return false;
    buf_.append(chunk, static_cast<size_t>(n));
    return true;
  }
  int fail() {
    close_fd();
    return 0;
  }
  void close_fd() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int fd_ = -1;
  std::string buf_;
};

struct LoadResult {
  std::string target;
  int concurrency = 0;
  double seconds = 0;
  int64_t ok = 0, errors = 0;
  std::vector<double> latency_ms;  // of the successful requests in the measured window

  double rps() const { return static_cast<double>(ok) / seconds; }
  double percentile(double q) const {
    if (latency_ms.empty()) return 0.0;
    std::vector<double> v = latency_ms;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }
  json to_json() const {
    return {{"target", target},           {"concurrency", concurrency},
            {"seconds", seconds},         {"requests", ok},
            {"errors", errors},           {"rps", rps()},
            {"p50_ms", percentile(0.50)}, {"p90_ms", percentile(0.90)},
            {"p99_ms", percentile(0.99)}};
  }
};

// Closed loop: `concurrency` connections, connection i to ports[i % ports.size()], each sending
// the next prepared request as soon as the last response is read; the first tenth of `seconds` is
// a warm-up, then `seconds` are measured.
LoadResult run_load(const std::string& target, const std::vector<uint16_t>& ports, int concurrency,
                    double seconds, const std::vector<std::string>& requests) {
  LoadResult result;
  result.target = target;
  result.concurrency = concurrency;
  result.seconds = seconds;
  const auto warm =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds * 0.1));
  const auto span =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<LoadResult> per(static_cast<size_t>(concurrency));
  Clock::time_point begin, end;
  std::barrier sync(concurrency, [&]() noexcept {
    begin = Clock::now() + warm;
    end = begin + span;
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      LoadResult& mine = per[static_cast<size_t>(t)];
      const uint16_t port = ports[static_cast<size_t>(t) % ports.size()];
      RawConnection conn;
      size_t next = static_cast<size_t>(t) * 7919;
      sync.arrive_and_wait();
      for (;;) {
        const Clock::time_point start = Clock::now();
        if (start >= end) break;
        if (!conn.connected() && !conn.connect_to(port)) {
          if (start >= begin) ++mine.errors;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          continue;
        }
        const int status = conn.exchange(requests[next++ % requests.size()]);
        const Clock::time_point done = Clock::now();
        if (start < begin || done > end) continue;
        if (status == 200) {
          ++mine.ok;
          mine.latency_ms.push_back(
              std::chrono::duration<double, std::milli>(done - start).count());
        } else {
          ++mine.errors;
        }
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (LoadResult& r : per) {
    result.ok += r.ok;
    result.errors += r.errors;
    result.latency_ms.insert(result.latency_ms.end(), r.latency_ms.begin(), r.latency_ms.end());
  }
  return result;
}

// Requests of `tenants` families: each a shared system prompt of prompt_bytes plus a question.
std::vector<std::string> make_requests(int tenants, int prompt_bytes) {
  std::vector<std::string> out;
  for (int q = 0; q < 64; ++q) {
    for (int t = 0; t < tenants; ++t) {
      std::string prompt = "You are the assistant of tenant " + std::to_string(t) + ". ";
      while (static_cast<int>(prompt.size()) < prompt_bytes)
        prompt += "Answer tenant " + std::to_string(t) + "'s questions precisely and briefly. ";
      prompt.resize(static_cast<size_t>(prompt_bytes));
      prompt += " Question " + std::to_string(q) + ": what is " + std::to_string(q * 7 + t) + "?";
      const std::string body =
          json{{"model", kModel}, {"prompt", prompt}, {"max_tokens", 16}}.dump();
      out.push_back(
          "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
          "Content-Type: application/json\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body);
    }
  }
  return out;
}

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
      RawConnection probe;
      if (probe.connect_to(port_)) return port_;
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

void print_run(const LoadResult& r) {
  std::printf("%-8s %5d %9.0f %8.3f %8.3f %8.3f %7lld\n", r.target.c_str(), r.concurrency, r.rps(),
              r.percentile(0.5), r.percentile(0.9), r.percentile(0.99),
              static_cast<long long>(r.errors));
  std::fflush(stdout);
}

}  // namespace

int run_router_bench(const RouterBenchOptions& o) {
  std::vector<std::unique_ptr<FakeReplica>> fakes;
  std::vector<uint16_t> fake_ports;
  std::vector<std::string> addresses;
  for (int i = 0; i < o.replicas; ++i) {
    fakes.push_back(std::make_unique<FakeReplica>("fake" + std::to_string(i)));
    auto p = fakes.back()->listen();
    if (!p.ok()) {
      std::fprintf(stderr, "kvcascade bench router: %s\n", p.error().message.c_str());
      return 2;
    }
    fake_ports.push_back(*p);
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

  const std::vector<std::string> requests = make_requests(o.tenants, o.prompt_bytes);
  std::printf(
      "kvcascade bench router: %d instant fake replicas, %d tenants x %d-byte prompt prefixes, "
      "%.1f s per run (closed loop, keep-alive), %u cores, nginx %d workers\n\n",
      o.replicas, o.tenants, o.prompt_bytes, o.seconds, std::thread::hardware_concurrency(),
      workers);
  std::printf("%-8s %5s %9s %8s %8s %8s %7s\n", "target", "conns", "req/s", "p50 ms", "p90 ms",
              "p99 ms", "errors");
  std::vector<LoadResult> runs;
  std::vector<int64_t> router_share(fakes.size(), 0);
  for (int conc : {1, o.concurrency}) {
    runs.push_back(run_load("direct", fake_ports, conc, o.seconds, requests));
    print_run(runs.back());
    for (size_t i = 0; i < fakes.size(); ++i)
      router_share[i] -= fakes[i]->completions();
    runs.push_back(run_load("router", {*router_port}, conc, o.seconds, requests));
    print_run(runs.back());
    for (size_t i = 0; i < fakes.size(); ++i)
      router_share[i] += fakes[i]->completions();
    if (nginx_port.ok()) {
      runs.push_back(run_load("nginx", {*nginx_port}, conc, o.seconds, requests));
      print_run(runs.back());
    }
  }

  auto find = [&](const std::string& target, int conc) -> const LoadResult* {
    for (const LoadResult& r : runs)
      if (r.target == target && r.concurrency == conc) return &r;
    return nullptr;
  };
  json j;
  j["options"] = {{"seconds", o.seconds},    {"concurrency", o.concurrency},
                  {"replicas", o.replicas},  {"prompt_bytes", o.prompt_bytes},
                  {"tenants", o.tenants},    {"cores", std::thread::hardware_concurrency()},
                  {"nginx_workers", workers}};
  j["runs"] = json::array();
  for (const LoadResult& r : runs)
    j["runs"].push_back(r.to_json());
  j["router_requests_per_replica"] = router_share;
  const double added = find("router", 1)->percentile(0.99) - find("direct", 1)->percentile(0.99);
  j["router_added_p99_ms"] = added;
  std::printf("\nrouter: requests per replica");
  for (int64_t n : router_share)
    std::printf(" %lld", static_cast<long long>(n));
  std::printf(" (kvcascade policy: a tenant's prefix stays on one replica)\n");
  std::printf("router added p99 latency at 1 connection: %.3f ms (target <= 1 ms)", added);
  if (const LoadResult* n = find("nginx", 1)) {
    const double nginx_added = n->percentile(0.99) - find("direct", 1)->percentile(0.99);
    j["nginx_added_p99_ms"] = nginx_added;
    std::printf("; nginx adds %.3f ms", nginx_added);
  }
  std::printf("\n");
  if (const LoadResult* n = find("nginx", o.concurrency)) {
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
