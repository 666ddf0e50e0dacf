#include "replica/server/replica_stack.h"

namespace kvc {

ReplicaStack::ReplicaStack(std::unique_ptr<Backend> backend,
                           std::shared_ptr<const Tokenizer> tokenizer, ReplicaStackConfig config,
                           const Clock& clock)
    : config_(std::move(config)), backend_(std::move(backend)), tokenizer_(std::move(tokenizer)) {
  metrics_ = std::make_unique<metrics::ReplicaMetrics>(registry_);
  engine_ = std::make_unique<Engine>(*backend_, *tokenizer_, config_.engine, clock);
  loop_ = std::make_unique<EngineLoop>(*engine_, config_.server.replica_id, metrics_.get(),
                                       config_.server.weight_version);
  server_ =
      std::make_unique<ReplicaServer>(*loop_, *engine_, config_.server, &registry_, metrics_.get());
}

ReplicaStack::~ReplicaStack() {
  stop_http();  // then the members go in reverse order: the engine thread before the engine
}

Result<uint16_t> ReplicaStack::listen(const std::string& host, uint16_t port) {
  http::ServerLimits limits = config_.limits;
  limits.on_response = [m = metrics_.get()](int status) { m->count_response(status); };
  http_ = std::make_unique<http::Server>(
      std::move(limits),
      [this](http::Request r, std::shared_ptr<http::Responder> w) {
        server_->handle(std::move(r), std::move(w));
      },
      config_.http_threads);
  return http_->listen(host, port);
}

void ReplicaStack::stop_http() {
  if (http_) http_->stop();
  http_.reset();
}

}  // namespace kvc
