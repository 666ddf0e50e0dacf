// An in-process replica on 127.0.0.1:<port 0>: the tiny model on the CPU backend, its engine
// thread and its OpenAI-compatible HTTP server. For router and end-to-end tests.
#pragma once

#include <memory>
#include <string>

#include "http/server.h"
#include "replica/cpu_backend.h"
#include "replica/engine_loop.h"
#include "replica/server.h"
#include "replica/weights.h"

namespace kvc::testing {

class LocalReplica {
 public:
  LocalReplica(std::string id, int32_t kv_blocks = 256, uint64_t weights_seed = 3) {
    static const ModelWeights weights = random_weights(*preset_config("tiny"), weights_seed);
    backend_ = std::make_unique<CpuBackend>(weights, kv_blocks, 16);
    EngineConfig config;
    config.scheduler.max_model_len = 4096;
    engine_ = std::make_unique<Engine>(*backend_, tokenizer_, config, SteadyClock::instance());
    metrics_ = std::make_unique<metrics::ReplicaMetrics>(registry_);
    loop_ = std::make_unique<EngineLoop>(*engine_, id, metrics_.get());
    server_ = std::make_unique<ReplicaServer>(*loop_, *engine_, ReplicaServerConfig{id, "", {}},
                                              &registry_, metrics_.get());
    start();
  }
  ~LocalReplica() { stop(); }

  // Stops serving (connections cut, port closed): the replica "dies".
  void stop() {
    if (http_) http_->stop();
    http_.reset();
  }
  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  const Engine& engine() const { return *engine_; }

 private:
  void start() {
    http_ = std::make_unique<http::Server>(
        http::ServerLimits{}, [this](http::Request r, std::shared_ptr<http::Responder> w) {
          server_->handle(std::move(r), std::move(w));
        });
    auto port = http_->listen("127.0.0.1", 0);
    port_ = port.ok() ? *port : 0;
  }

  prometheus::Registry registry_;
  std::unique_ptr<metrics::ReplicaMetrics> metrics_;
  ByteTokenizer tokenizer_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<ReplicaServer> server_;
  std::unique_ptr<http::Server> http_;
  uint16_t port_ = 0;
};

}  // namespace kvc::testing
