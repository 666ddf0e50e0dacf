#include "cli/prometheus_process.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "http/client.h"

namespace kvc::cli {

using bench::file_tail;
using bench::free_loopback_port;
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string url_encode(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      std::snprintf(buf, sizeof buf, "%%%02X", c);
      out += buf;
    }
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<PrometheusProcess>> PrometheusProcess::start(
    const std::string& binary, const std::string& config_file,
    const std::vector<ScrapeTarget>& targets) {
  if (access(binary.c_str(), X_OK) != 0) return Error{binary + " is not installed"};
  if (!fs::exists(config_file)) return Error{config_file + " not found"};
  std::unique_ptr<PrometheusProcess> p(new PrometheusProcess());
  auto dir = TempDir::create("prometheus");
  if (!dir.ok()) return Error{dir.error().message};
  p->dir_ = std::move(*dir);
  std::error_code ec;
  fs::copy_file(config_file, p->dir_.file("prometheus.yml"), ec);
  if (ec) return Error{"cannot copy " + config_file + ": " + ec.message()};
  json groups = json::array();
  for (const ScrapeTarget& t : targets) {
    groups.push_back({{"targets", {t.address}}, {"labels", {{"component", t.component}}}});
  }
  std::ofstream(p->dir_.file("targets.json")) << groups.dump(2) << "\n";
  p->port_ = free_loopback_port();
  if (p->port_ == 0) return Error{"no free port"};
  const std::string log = p->dir_.file("prometheus.log");
  auto process = ChildProcess::start({binary, "--config.file=" + p->dir_.file("prometheus.yml"),
                                      "--storage.tsdb.path=" + p->dir_.file("data"),
                                      "--web.listen-address=127.0.0.1:" + std::to_string(p->port_)},
                                     log);
  if (!process.ok()) return Error{process.error().message};
  p->process_ = std::move(*process);
  http::Client client;
  for (int i = 0; i < 150; ++i) {
    auto r =
        client.request("127.0.0.1", p->port_, "GET", "/-/ready", "", {}, std::chrono::seconds(1));
    if (r.ok() && r->status == 200) return p;
    if (p->process_->exited()) {
      return Error{"prometheus exited at start: " + file_tail(log)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return Error{"prometheus did not become ready within 15 s"};
}

Result<json> PrometheusProcess::query(const std::string& promql) const {
  http::Client client;
  auto r = client.request("127.0.0.1", port_, "GET", "/api/v1/query?query=" + url_encode(promql),
                          "", {}, std::chrono::seconds(5));
  if (!r.ok()) return Error{r.error().message};
  json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success") {
    return Error{"query failed: " + r->body.substr(0, 200)};
  }
  return j["data"]["result"];
}

void PrometheusProcess::wait_for_fresh_scrapes(size_t targets) const {
  const double since =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto value = [&](const std::string& q) -> double {
    auto r = query(q);
    if (!r.ok() || r->empty()) return -1;
    return std::stod((*r)[0]["value"][1].get<std::string>());
  };
  for (int i = 0; i < 100; ++i) {
    if (value("count(up == 1)") == static_cast<double>(targets) &&
        value("min(timestamp(up))") > since) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace kvc::cli
