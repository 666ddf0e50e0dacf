// Debian's Prometheus server, started by the demo on loopback with the project's own config
// (deploy/prometheus/prometheus.yml) and scrape targets written for the ports actually in use,
// then queried over its HTTP API. Stopped (and its temporary folder removed) on destruction.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "bench/child_process.h"

namespace kvc::cli {

using bench::ChildProcess;

struct ScrapeTarget {
  std::string address;    // host:port
  std::string component;  // router | replica
};

class PrometheusProcess {
 public:
  // Starts `binary` with a copy of `config_file` and a targets.json for `targets` in a fresh
  // temporary folder; waits (bounded) until it is ready. Fails when the binary or config is
  // missing or it does not come up.
  static Result<std::unique_ptr<PrometheusProcess>> start(const std::string& binary,
                                                          const std::string& config_file,
                                                          const std::vector<ScrapeTarget>& targets);
  uint16_t port() const { return port_; }
  // An instant query; returns data.result (a JSON array of {metric, value}).
  Result<nlohmann::json> query(const std::string& promql) const;
  // Waits (bounded, 20 s) until all `targets` are up and each was last scraped after now.
  void wait_for_fresh_scrapes(size_t targets) const;

 private:
  PrometheusProcess() = default;
  TempDir dir_;  // first: removed after the process has stopped
  std::unique_ptr<ChildProcess> process_;
  uint16_t port_ = 0;
};

}  // namespace kvc::cli
