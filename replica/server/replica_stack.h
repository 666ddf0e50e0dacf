// A whole replica in one object: the engine over a backend and a tokenizer, its engine thread,
// metrics and the OpenAI-compatible HTTP server. `kvcascade replica`, `kvcascade demo` and the
// tests (replica/server/local_replica.h) wire a replica the same way. Wiring: it lives in cli/.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/clock.h"
#include "http/server.h"
#include "metrics/metrics.h"
#include "replica/backend/backend.h"
#include "replica/core/engine.h"
#include "replica/core/engine_loop.h"
#include "replica/server/replica_server.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc {

struct ReplicaStackConfig {
  EngineConfig engine;
  ReplicaServerConfig server;  // replica_id, served model name, API keys, chat template
  http::ServerLimits limits;
  int http_threads = 1;
};

class ReplicaStack {
 public:
  // Takes the backend and shares the tokenizer (the engine thread uses both until it stops).
  ReplicaStack(std::unique_ptr<Backend> backend, std::shared_ptr<const Tokenizer> tokenizer,
               ReplicaStackConfig config, const Clock& clock = SteadyClock::instance());
  ~ReplicaStack();
  ReplicaStack(const ReplicaStack&) = delete;
  ReplicaStack& operator=(const ReplicaStack&) = delete;

  // Listens (port 0: any); the bound port.
  Result<uint16_t> listen(const std::string& host, uint16_t port);
  // Stops serving (connections cut, port closed); the engine thread keeps running until the
  // stack is destroyed.
  void stop_http();

  Backend& backend() { return *backend_; }
  const Engine& engine() const { return *engine_; }
  EngineLoop& loop() { return *loop_; }
  ReplicaServer& server() { return *server_; }

 private:
  ReplicaStackConfig config_;
  // Declared first: the engine thread uses them until the loop is destroyed.
  std::unique_ptr<Backend> backend_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  prometheus::Registry registry_;
  std::unique_ptr<metrics::ReplicaMetrics> metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineLoop> loop_;
  std::unique_ptr<ReplicaServer> server_;
  std::unique_ptr<http::Server> http_;
};

}  // namespace kvc
