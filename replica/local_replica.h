// An in-process replica on 127.0.0.1:<port 0>: the tiny model (random weights) on the CPU backend
// (bytes, or a real tokenizer and chat template),
// its engine thread, metrics and OpenAI-compatible HTTP server. Used by `kvcascade demo` and by
// the router and end-to-end tests.
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
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
      : limits_(limits), tokenizer_(std::make_shared<ByteTokenizer>()) {
    ReplicaServerConfig server_config;
    server_config.api_keys = std::move(api_keys);
    init(std::move(id), kv_blocks, host, std::move(server_config));
  }
  // The tiny model with a real tokenizer (its vocabulary grown to the tokenizer's, random
  // weights) and, when given, the model's chat template.
  LocalReplica(std::string id, std::shared_ptr<const Tokenizer> tokenizer,
               std::shared_ptr<const ChatTemplate> chat_template, int32_t kv_blocks = 256)
      : tokenizer_(std::move(tokenizer)) {
    ReplicaServerConfig server_config;
    server_config.chat_template = std::move(chat_template);
    init(std::move(id), kv_blocks, "127.0.0.1", std::move(server_config));
  }
  ~LocalReplica() { stop(); }

  // Stops serving (connections cut, port closed): the replica "dies".
  void stop() {
    if (http_) http_->stop();
    http_.reset();
  }
  uint16_t port() const { return port_; }
  const std::string& id() const { return id_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  const Engine& engine() const { return *engine_; }
  EngineLoop& loop() { return *loop_; }  // tests hold the engine thread through it

 private:
  void init(std::string id, int32_t kv_blocks, const std::string& host,
            ReplicaServerConfig server_config) {
    id_ = id;
    backend_ = std::make_unique<CpuBackend>(weights(tokenizer_->vocab_size()), kv_blocks, 16);
    EngineConfig config;
    config.scheduler.max_model_len = 4096;
    engine_ = std::make_unique<Engine>(*backend_, *tokenizer_, config, SteadyClock::instance());
    metrics_ = std::make_unique<metrics::ReplicaMetrics>(registry_);
    loop_ = std::make_unique<EngineLoop>(*engine_, id, metrics_.get());
    server_config.replica_id = id;
    server_ = std::make_unique<ReplicaServer>(*loop_, *engine_, std::move(server_config),
                                              &registry_, metrics_.get());
    host_ = host;
    start();
  }
  // One set of weights per vocabulary size, shared by every local replica.
  static const ModelWeights& weights(int32_t vocab) {
    static std::mutex mu;
    static std::map<int32_t, std::unique_ptr<ModelWeights>> by_vocab;
    std::lock_guard lock(mu);
    auto& w = by_vocab[vocab];
    if (!w) {
      ModelConfig c = *preset_config("tiny");
      c.vocab_size = std::max(c.vocab_size, vocab);
      w = std::make_unique<ModelWeights>(random_weights(c, 3));
    }
    return *w;
  }
  void start() {
    http_ = std::make_unique<http::Server>(
        limits_, [this](http::Request r, std::shared_ptr<http::Responder> w) {
          server_->handle(std::move(r), std::move(w));
        });
    auto port = http_->listen(host_, 0);
    port_ = port.ok() ? *port : 0;
  }

  // Declared first: the engine thread (loop_) uses the tokenizer until it is destroyed.
  http::ServerLimits limits_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  prometheus::Registry registry_;
  std::unique_ptr<metrics::ReplicaMetrics> metrics_;
  std::unique_ptr<CpuBackend> backend_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<ReplicaServer> server_;
  std::unique_ptr<http::Server> http_;
  std::string id_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace kvc
