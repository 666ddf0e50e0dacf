// An in-process replica on <host>:<port 0>: the tiny model (random weights) on the CPU backend
// (bytes, or a real tokenizer and chat template), wired as `kvcascade replica` wires one
// (replica/server/replica_stack.h). Used by `kvcascade demo`, `kvcascade bench pressure` and the
// tests.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/model/weights.h"
#include "replica/server/replica_stack.h"

namespace kvc {

class LocalReplica {
 public:
  // Every local replica serves the same random model (weights seed 3), so their outputs agree.
  // api_keys: when not empty, every path but the probes (/livez, /readyz, /health) needs
  // "Authorization: Bearer KEY".
  LocalReplica(std::string id, int32_t kv_blocks = 256, const std::string& host = "127.0.0.1",
               http::ServerLimits limits = {}, std::vector<std::string> api_keys = {}) {
    ReplicaStackConfig c;
    c.server.api_keys = std::move(api_keys);
    c.limits = limits;
    init(std::move(id), kv_blocks, host, std::make_shared<ByteTokenizer>(), std::move(c));
  }
  // The tiny model with a real tokenizer (its vocabulary grown to the tokenizer's, random
  // weights) and, when given, the model's chat template.
  LocalReplica(std::string id, std::shared_ptr<const Tokenizer> tokenizer,
               std::shared_ptr<const ChatTemplate> chat_template, int32_t kv_blocks = 256) {
    ReplicaStackConfig c;
    c.server.chat_template = std::move(chat_template);
    init(std::move(id), kv_blocks, "127.0.0.1", std::move(tokenizer), std::move(c));
  }

  // The tiny model with every setting of the stack given (a stream interval, API keys).
  LocalReplica(std::string id, int32_t kv_blocks, ReplicaStackConfig c) {
    init(std::move(id), kv_blocks, "127.0.0.1", std::make_shared<ByteTokenizer>(), std::move(c));
  }

  // Any backend (the sim backend of fleet-scale routing tests and `bench routing`), the byte
  // tokenizer.
  LocalReplica(std::string id, std::unique_ptr<Backend> backend, EngineConfig config,
               const std::string& host = "127.0.0.1", http::ServerLimits limits = {},
               std::vector<std::string> api_keys = {})
      : LocalReplica(std::move(id), std::move(backend),
                     stack_config(std::move(config), limits, std::move(api_keys)), host) {}
  // Any backend and every setting of the stack (admin keys, the initial weight version).
  LocalReplica(std::string id, std::unique_ptr<Backend> backend, ReplicaStackConfig c,
               const std::string& host = "127.0.0.1") {
    id_ = id;
    host_ = host;
    c.server.replica_id = id;
    stack_ = std::make_unique<ReplicaStack>(std::move(backend), std::make_shared<ByteTokenizer>(),
                                            std::move(c));
    auto port = stack_->listen(host_, 0);
    port_ = port.ok() ? *port : 0;
  }

  // Stops serving (connections cut, port closed): the replica "dies".
  void stop() { stack_->stop_http(); }
  // The replica process restarts: it stops, and a fresh one (the same model and settings, an
  // empty cache) serves on the same port. False when the port cannot be had again, or for a
  // replica built on a given backend (nothing to rebuild it from).
  bool restart() {
    if (!rebuild_) return false;
    stack_->stop_http();
    stack_.reset();
    stack_ = rebuild_();
    auto port = stack_->listen(host_, port_);
    return port.ok() && *port == port_;
  }
  uint16_t port() const { return port_; }
  const Backend& backend() { return stack_->backend(); }
  const std::string& id() const { return id_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  const Engine& engine() const { return stack_->engine(); }
  EngineLoop& loop() { return stack_->loop(); }  // tests hold the engine thread through it

 private:
  static ReplicaStackConfig stack_config(EngineConfig engine, http::ServerLimits limits,
                                         std::vector<std::string> api_keys) {
    ReplicaStackConfig c;
    c.engine = std::move(engine);
    c.limits = limits;
    c.server.api_keys = std::move(api_keys);
    return c;
  }
  void init(std::string id, int32_t kv_blocks, const std::string& host,
            std::shared_ptr<const Tokenizer> tokenizer, ReplicaStackConfig c) {
    id_ = id;
    host_ = host;
    c.engine.scheduler.max_model_len = 4096;
    c.server.replica_id = id;
    rebuild_ = [kv_blocks, tokenizer = std::move(tokenizer), c = std::move(c)] {
      auto backend = std::make_unique<CpuBackend>(weights(tokenizer->vocab_size()), kv_blocks, 16);
      return std::make_unique<ReplicaStack>(std::move(backend), tokenizer, c);
    };
    stack_ = rebuild_();
    auto port = stack_->listen(host_, 0);
    port_ = port.ok() ? *port : 0;
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

  std::unique_ptr<ReplicaStack> stack_;
  std::function<std::unique_ptr<ReplicaStack>()> rebuild_;  // restart(): a fresh stack
  std::string id_;
  std::string host_;
  uint16_t port_ = 0;
};

}  // namespace kvc
