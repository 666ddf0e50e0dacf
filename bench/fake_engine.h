// Instant stand-ins for the inference servers the router sits in front of, on 127.0.0.1, each
// answering with the paths, JSON shapes and metric names of the engine it mimics (no model: a
// completion is a fixed text, its usage counted from the prompt's bytes). Used by
// `kvcascade bench router --replica-kind` and by the router's tests.
//
//   kvcascade  this project's replica: /v1/info, /v1/load, /v1/models (owned_by "kvcascade");
//              /v1/kv_events is a 404, so the router routes it approximately.
//   vllm       vLLM's OpenAI server as of v0.10 (v0.6-v0.9 with legacy_metric_names): /health
//              (200, empty body), /v1/models (owned_by "vllm", root, max_model_len), /metrics with
//              vllm:num_requests_running / _waiting, vllm:kv_cache_usage_perc (v0.6-v0.9:
//              vllm:gpu_cache_usage_perc), vllm:cache_config_info{block_size,num_gpu_blocks,...};
//              every series labelled model_name (and engine, since v0.10).
//   sglang     SGLang's server as of v0.4.9-v0.5: /health, /v1/models (owned_by "sglang"),
//              /get_model_info, /get_load ([{dp_rank, num_reqs (running + waiting),
//              num_waiting_reqs, num_tokens}], one object per DP rank), and with metrics on
//              (its --enable-metrics) /metrics: sglang:num_running_reqs, sglang:num_queue_reqs,
//              sglang:token_usage, sglang:max_total_num_tokens, labelled model_name.
//   openai     any other OpenAI-compatible server: /v1/models (owned_by "openai") and the two
//              completion endpoints; no /health, no /metrics.
// Completions follow the OpenAI shapes vLLM and SGLang answer with (usage with
// prompt_tokens_details null; SSE chunks ending with data: [DONE]).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "http/server.h"
#include "router/fleet/engine_signals.h"

namespace kvc::bench {

struct FakeEngineOptions {
  ReplicaKind kind = ReplicaKind::kVllm;
  std::string id = "fake";  // kvcascade: its replica_id
  std::vector<std::string> models = {"fake-model"};
  bool legacy_metric_names = false;      // vllm: gpu_cache_usage_perc, no engine label
  bool sglang_metrics = false;           // sglang: /metrics on (--enable-metrics)
  int64_t num_gpu_blocks = 1000;         // vllm: KV capacity in blocks of 16 tokens
  int64_t max_total_num_tokens = 16000;  // sglang: KV capacity in tokens
  bool record_bodies = false;            // keep every completion request's body (tests)
};

// What the fake reports as its load (every kind in its own shape).
struct FakeLoad {
  int64_t running = 0;
  int64_t waiting = 0;
  double kv_usage = 0.0;
};

class FakeEngine {
 public:
  explicit FakeEngine(FakeEngineOptions options);
  ~FakeEngine();

  // Listens on 127.0.0.1 (port 0: any; the first call's port is kept for restarts).
  Result<uint16_t> start(uint16_t port = 0);
  // Stops answering and closes every connection (the engine "dies"); start() brings it back on
  // the same port.
  void stop();
  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  void set_load(FakeLoad load);
  // Replaces the /metrics body (garbage, or a huge one); nullopt: the real one again.
  void set_metrics_body(std::optional<std::string> body);
  // Completions are answered with this status and an error body (0: served again).
  void set_completion_status(int status) { completion_status_ = status; }

  int64_t completions() const { return completions_.load(); }
  size_t connections_accepted() const;
  // The bodies of the completion requests received, oldest first (with record_bodies).
  std::vector<std::string> request_bodies() const;

 private:
  void handle(const http::Request& r, http::Responder& w);
  void complete(const http::Request& r, http::Responder& w, bool chat);
  std::string metrics() const;

  const FakeEngineOptions options_;
  mutable std::mutex mu_;
  FakeLoad load_;
  std::optional<std::string> metrics_body_;
  std::vector<std::string> bodies_;
  std::atomic<int64_t> completions_{0};
  std::atomic<int> completion_status_{0};
  size_t accepted_before_ = 0;  // by servers stopped earlier
  std::unique_ptr<http::Server> server_;
  uint16_t port_ = 0;
};

}  // namespace kvc::bench
