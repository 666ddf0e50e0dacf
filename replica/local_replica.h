// An in-process replica on 127.0.0.1:<port 0>: the tiny model (random weights) on the CPU backend
// (or a given backend), its engine thread, metrics and OpenAI-compatible HTTP server. Used by
// `kvcascade demo` and by the router and end-to-end tests.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "http/server.h"
#include "metrics/metrics.h"
#include "replica/cpu_backend.h"
#include "replica/engine_loop.h"
#include "replica/replica_server.h"
#include "replica/weights.h"

namespace kvc {

class LocalReplica {
 public:
  // Every local replica serves the same random model (weights seed 3), so their outputs agree.
  // api_keys: when not empty, every path but /health needs "Authorization: Bearer KEY".
  LocalReplica(std::string id, int32_t kv_blocks = 256, const std::string& host = "127.0.0.1",
               http::ServerLimits limits = {}, std::vector<std::string> api_keys = {})
      : LocalReplica(std::move(id), tiny_backend(kv_blocks), tiny_engine_config(), host, limits,
                     std::move(api_keys)) {}
  // Any backend (the sim backend for fleet-scale routing tests and `bench routing`).
  LocalReplica(std::string id, std::unique_ptr<Backend> backend, EngineConfig config,
               const std::string& host = "127.0.0.1", http::ServerLimits limits = {},
               std::vector<std::string> api_keys = {})
      : backend_(std::move(backend)), id_(id), limits_(limits) {
    engine_ = std::make_unique<Engine>(*backend_, tokenizer_, config, SteadyClock::instance());
    metrics_ = std::make_unique<metrics::ReplicaMetrics>(registry_);
    loop_ = std::make_unique<EngineLoop>(*engine_, id, metrics_.get());
    ReplicaServerConfig server_config;
    server_config.replica_id = id;
    server_config.api_keys = std::move(api_keys);
    server_ = std::make_unique<ReplicaServer>(*loop_, *engine_, std::move(server_config),
                                              &registry_, metrics_.get());
    host_ = host;
    start();
  }
  ~LocalReplica() { stop(); }

  // Stops serving (connections cut, port closed): the replica "dies".
  void stop() {
    if (http_) http_->stop();
    http_.reset();
  }
  uint16_t port() const { return port_; }
  const Backend& backend() const { return *backend_; }
  const std::string& id() const { return id_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  const Engine& engine() const { return *engine_; }
  EngineLoop& loop() { return *loop_; }  // tests hold the engine thread through it

 private:
  static std::unique_ptr<Backend> tiny_backend(int32_t kv_blocks) {
    static const ModelWeights weights = random_weights(*preset_config("tiny"), 3);
    return std::make_unique<CpuBackend>(weights, kv_blocks, 16);
  }
  static EngineConfig tiny_engine_config() {
    EngineConfig config;
    config.scheduler.max_model_len = 4096;
    return config;
  }
  void start() {
    http_ = std::make_unique<http::Server>(
        limits_, [this](http::Request r, std::shared_ptr<http::Responder> w) {
          server_->handle(std::move(r), std::move(w));
        });
    auto port = http_->listen(host_, 0);
    port_ = port.ok() ? *port : 0;
  }

  prometheus::Registry registry_;
  std::unique_ptr<metrics::ReplicaMetrics> metrics_;
  ByteTokenizer tokenizer_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<ReplicaServer> server_;
  std::unique_ptr<http::Server> http_;
  std::string id_;
  http::ServerLimits limits_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace kvc
