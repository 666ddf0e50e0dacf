// The replica's OpenAI-compatible HTTP server, on http/ and the EngineLoop:
//   POST /v1/completions, POST /v1/chat/completions (streaming or not), GET /v1/models,
//   GET /livez (the process serves), GET /readyz and /health (ready to serve: 503 while the
//   weights are incomplete after a failed update), GET /v1/info (model, block size, replica id,
//   tokenizer, chat template), GET /v1/load (queue and KV occupancy), GET /v1/kv_events (SSE of
//   KV events in router key space, snapshot first).
// HEAD is answered wherever GET is. With API keys, every path but the probes (/livez, /readyz,
// /health) needs one.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/openai_request.h"
#include "http/server.h"
#include "replica/core/engine_loop.h"

namespace kvc {

struct ReplicaServerConfig {
  std::string replica_id = "replica-0";
  std::string served_model_name;  // defaults to the model's name
  ApiLimits api;
  // When not empty, every path but the probes (/livez, /readyz, /health) needs "Authorization:
  // Bearer KEY" with one of these (several: a key can be rotated without downtime).
  std::vector<std::string> api_keys;
  // The model's chat template (published in /v1/info for routers); null: canonical rendering.
  std::shared_ptr<const ChatTemplate> chat_template;
  // The admin endpoints (/v1/admin/*) need one of these when given, else one of api_keys.
  std::vector<std::string> admin_api_keys;
  // The version of the weights the replica starts with (responses carry it: weight_version).
  std::string weight_version = "0";
  // GET /v1/load's "tick": the routing figures as the first poll within each period of the
  // system clock found them, so that routers polling within one period (ReplicaPool aligns its
  // polls to the clock) read the same numbers and agree without talking. 0: no tick object.
  std::chrono::milliseconds load_tick{100};
  // A streamed choice's tokens after its first go out in chunks of up to this many (SGLang's
  // --stream-interval): the same text in fewer events, for less CPU per generated token in the
  // replica, the router and the client. Its first token and its last (with the finish reason)
  // are sent at once. 1: a chunk per token.
  int32_t stream_interval = 1;
};

class ReplicaServer {
 public:
  // registry/metrics: what /metrics exposes and where request timings go; may be null.
  ReplicaServer(EngineLoop& loop, const Engine& engine, ReplicaServerConfig config,
                prometheus::Registry* registry = nullptr,
                metrics::ReplicaMetrics* metrics = nullptr);
  // The handler to give an http::Server.
  void handle(http::Request request, std::shared_ptr<http::Responder> responder);
  const ReplicaServerConfig& config() const { return config_; }

 private:
  void generate(Endpoint endpoint, const http::Request& request,
                std::shared_ptr<http::Responder> responder);
  // Why the context cannot hold prompt `index` (npos: the only one) of a request with what it
  // asked for, in OpenAI's words and naming the field (answered with code
  // context_length_exceeded, which clients such as LangChain recognise), or nullopt. A default
  // max_tokens is lowered to fit instead. The engine's Scheduler::check_fits holds the same rule
  // for its other callers, in its own words.
  std::optional<ApiError> context_refusal(Endpoint endpoint, size_t index,
                                          const GenerationRequest& g) const;
  // /v1/kv_events; `queued` (?queued=1): with the queued events (EngineLoop::subscribe_kv_events).
  // With `work` (?work=1, and queued), the work events (KvWork) too.
  void kv_events(std::shared_ptr<http::Responder> responder, bool queued, bool work);
  // POST /v1/admin/weights, /v1/admin/pause, /v1/admin/resume.
  void admin(const std::string& path, const http::Request& request,
             std::shared_ptr<http::Responder> responder);
  std::string info_json() const;
  std::string load_json() const;
  nlohmann::json model_json() const;  // the served model, as /v1/models lists it
  std::string models_json() const;

  EngineLoop& loop_;
  const Engine& engine_;
  mutable std::mutex tick_mu_;
  mutable int64_t tick_ = -1;  // the period tick_load_ was taken in
  mutable LoadSnapshot tick_load_;
  prometheus::Registry* registry_;
  metrics::ReplicaMetrics* metrics_;
  ReplicaServerConfig config_;
  // GET /v1/token_bytes (api/token_table.h), encoded once; empty unless the key space is
  // kTokenIds (the only one whose KV events a router matches token-id prompts against).
  std::string token_table_;
  std::atomic<uint64_t> next_request_{1};
  // A random tag of this process in every response id, so ids stay unique across restarts of a
  // replica (the counter starts at 1 again).
  std::string instance_;
  // A weight update is in flight (a second one is a 409). Shared with the update's callback.
  std::shared_ptr<std::atomic<bool>> updating_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace kvc
