// One health-and-load poll of one replica, per its kind (router/fleet/engine_signals.h): at start
// and whenever the pool asks (the replica was unhealthy: it may have come back as something else),
// the kind is detected or confirmed and the identity (models, hash model, block size) read; every
// poll checks health and reads the load. Every answer is size-capped and the whole poll shares
// one deadline, so a replica answering slowly, hugely or with garbage costs one poll_timeout at
// most and never more memory than the cap.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/token_table.h"
#include "http/client.h"
#include "router/fleet/engine_signals.h"

namespace kvc {

struct ProbeConfig {
  std::chrono::milliseconds timeout{2000};  // the whole poll, every request of it together
  size_t max_body_bytes = size_t{4} << 20;  // larger answers (a runaway /metrics) are refused
  int32_t default_block_size = 16;          // the router's block size for foreign replicas
  http::Headers headers;                    // sent on every request (the replica API key)
  int32_t models_refresh_polls = 20;        // foreign replicas: /v1/models re-read this often
  size_t max_token_table_bytes = size_t{64} << 20;  // GET /v1/token_bytes (api/token_table.h)
};

struct ProbeResult {
  bool healthy = false;
  std::string error;  // why not healthy
  ReplicaKind kind = ReplicaKind::kAuto;
  bool identity = false;  // the fields below were (re)read by this poll
  std::vector<std::string> models;
  std::optional<int64_t> max_model_len;  // the context its models state (the smallest), if any
  std::string replica_id;                // kvcascade's own id; empty otherwise
  std::string hash_model;                // kvcascade only: the chain seed's model name
  int32_t block_size = 16;
  std::shared_ptr<const ChatTemplate> chat_template;  // kvcascade only (engine_signals.h)
  std::string chat_template_error;
  std::string replica_id_error;                      // KvcascadeInfo::replica_id_error
  std::string completion_prefix, completion_suffix;  // kvcascade only (engine_signals.h)
  // kvcascade replicas keyed by token ids (kTokenIds): their tokens' bytes, to hash prompts given
  // as token ids (api/token_table.h). Null otherwise, or when the fetch failed (token_table_error).
  std::shared_ptr<const TokenTable> token_table;
  std::string token_table_error;
  std::optional<ReplicaLoad> load;  // nullopt: no load signal (openai), or it failed
  std::string load_error;           // why a load signal the kind should have is missing
};

// Remembers what earlier polls learned (the kind; whether /health and SGLang's /metrics exist).
// Not thread-safe: one poll of a replica at a time.
class ReplicaProbe {
 public:
  explicit ReplicaProbe(ReplicaKind forced = ReplicaKind::kAuto) : forced_(forced) {}

  // detect: (re)learn the kind and identity first (start-up, reconnect).
  ProbeResult run(http::Client& client, const std::string& host, uint16_t port,
                  const ProbeConfig& config, bool detect);
  ReplicaKind forced() const { return forced_; }

 private:
  struct Exchange;
  void detect(Exchange& x, ProbeResult& out);
  void check_foreign_health(Exchange& x, ProbeResult& out);
  void read_load(Exchange& x, ProbeResult& out);
  // The replica's token table (ProbeResult::token_table), fetched once per tokenizer name.
  void read_token_table(Exchange& x, const std::string& tokenizer, ProbeResult& out);

  ReplicaKind forced_;
  std::shared_ptr<const TokenTable> token_table_;
  std::string token_table_of_;  // the tokenizer it came from
  ReplicaKind kind_ = ReplicaKind::kAuto;
  bool health_endpoint_ = true;  // /health exists; else /v1/models is the health check
  bool sglang_metrics_ = true;   // SGLang's /metrics has its load; else /get_load
  int32_t polls_since_models_ = 0;
};

}  // namespace kvc
