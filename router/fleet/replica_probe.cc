#include "router/fleet/replica_probe.h"

#include <algorithm>

namespace kvc {

// The requests of one poll, under one deadline.
struct ReplicaProbe::Exchange {
  http::Client& client;
  const std::string& host;
  uint16_t port;
  const ProbeConfig& config;
  std::chrono::steady_clock::time_point deadline;

  // A GET that came back (any status), or the transport's error.
  Result<http::ClientResponse> get(const std::string& path, size_t max_body_bytes = 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return Error{"GET " + path + ": the poll ran out of time"};
    auto r = client.request(host, port, "GET", path, "", config.headers, left,
                            max_body_bytes ? max_body_bytes : config.max_body_bytes);
    if (!r.ok()) return Error{"GET " + path + ": " + r.error().message};
    return r;
  }
  static std::string status_error(const std::string& path, int status) {
    return "GET " + path + ": status " + std::to_string(status);
  }
};

ProbeResult ReplicaProbe::run(http::Client& client, const std::string& host, uint16_t port,
                              const ProbeConfig& config, bool detect_now) {
  Exchange x{client, host, port, config, std::chrono::steady_clock::now() + config.timeout};
  ProbeResult out;
  if (detect_now || kind_ == ReplicaKind::kAuto) {
    detect(x, out);
    if (!out.error.empty()) return out;
  } else if (kind_ != ReplicaKind::kKvcascade) {
    check_foreign_health(x, out);
    if (!out.error.empty()) return out;
  }
  out.kind = kind_;
  read_load(x, out);
  // kvcascade's /v1/load is its health check (what the pool always asked it); a foreign replica
  // whose load signal fails is still healthy and is routed on the router's own counts.
  out.healthy = kind_ != ReplicaKind::kKvcascade || out.load.has_value();
  if (!out.healthy) out.error = out.load_error;
  return out;
}

void ReplicaProbe::detect(Exchange& x, ProbeResult& out) {
  kind_ = ReplicaKind::kAuto;
  health_endpoint_ = true;
  sglang_metrics_ = true;
  polls_since_models_ = 0;
  if (forced_ == ReplicaKind::kAuto || forced_ == ReplicaKind::kKvcascade) {
    auto r = x.get("/v1/info");
    if (!r.ok()) {  // unreachable: asking more would only spend the deadline
      out.error = r.error().message;
      return;
    }
    if (r->status == 200) {
      auto info = read_kvcascade_info(r->body, x.config.default_block_size);
      if (info.ok()) {
        kind_ = ReplicaKind::kKvcascade;
        out.identity = true;
        out.models = {info->model};
        out.max_model_len = info->max_model_len;
        out.replica_id = info->replica_id;
        out.replica_id_error = std::move(info->replica_id_error);
        out.hash_model = info->hash_model;
        out.block_size = info->block_size;
        out.chat_template = std::move(info->chat_template);
        out.chat_template_error = std::move(info->chat_template_error);
        out.completion_prefix = std::move(info->completion_prefix);
        out.completion_suffix = std::move(info->completion_suffix);
        if (info->key_space == "token_ids") read_token_table(x, info->tokenizer, out);
        return;
      }
      if (forced_ == ReplicaKind::kKvcascade) {
        out.error = info.error().message;
        return;
      }
    } else if (forced_ == ReplicaKind::kKvcascade) {
      out.error = Exchange::status_error("/v1/info", r->status);
      return;
    }
  }
  auto r = x.get("/v1/models");
  if (!r.ok() || r->status != 200) {
    out.error = r.ok() ? Exchange::status_error("/v1/models", r->status) : r.error().message;
    return;
  }
  auto models = read_model_list(r->body);
  if (!models.ok()) {
    out.error = models.error().message;
    return;
  }
  ReplicaKind kind = forced_ != ReplicaKind::kAuto ? forced_ : kind_from_owner(models->owned_by);
  if (kind == ReplicaKind::kOpenai && forced_ == ReplicaKind::kAuto) {
    // owned_by said nothing we know: the namespace of its metrics may.
    auto m = x.get("/metrics");
    if (m.ok() && m->status == 200) kind = kind_from_metrics(m->body);
  }
  kind_ = kind;
  out.identity = true;
  out.models = std::move(models->ids);
  out.max_model_len = models->max_model_len;
  out.block_size = x.config.default_block_size;
}

void ReplicaProbe::read_token_table(Exchange& x, const std::string& tokenizer, ProbeResult& out) {
  if (!token_table_ || token_table_of_ != tokenizer) {
    token_table_.reset();
    auto r = x.get("/v1/token_bytes", x.config.max_token_table_bytes);
    Result<TokenTable> table = Error{""};
    if (r.ok() && r->status == 200) table = decode_token_table(r->body);
    if (!table.ok()) {
      // Token-id prompts to this replica are routed without prefix affinity; the rest as ever.
      out.token_table_error = !r.ok() ? r.error().message
                              : r->status != 200
                                  ? Exchange::status_error("/v1/token_bytes", r->status)
                                  : table.error().message;
      return;
    }
    token_table_ = std::make_shared<const TokenTable>(std::move(*table));
    token_table_of_ = tokenizer;
  }
  out.token_table = token_table_;
}

void ReplicaProbe::check_foreign_health(Exchange& x, ProbeResult& out) {
  if (health_endpoint_) {
    auto r = x.get("/health");
    if (!r.ok()) {
      out.error = r.error().message;
      return;
    }
    if (r->status == 404 || r->status == 405) {
      health_endpoint_ = false;  // none: /v1/models is the health check from now on
    } else if (r->status != 200) {
      out.error = Exchange::status_error("/health", r->status);
      return;
    }
  }
  if (health_endpoint_ && ++polls_since_models_ < x.config.models_refresh_polls) return;
  polls_since_models_ = 0;
  auto r = x.get("/v1/models");
  Result<ModelList> models = Error{""};
  if (r.ok() && r->status == 200) models = read_model_list(r->body);
  if (models.ok()) {
    out.identity = true;
    out.models = std::move(models->ids);
    out.max_model_len = models->max_model_len;
    out.block_size = x.config.default_block_size;
    return;
  }
  // /health answered: a failed refresh keeps the models known; without /health it is the check.
  if (health_endpoint_) return;
  out.error = !r.ok()            ? r.error().message
              : r->status != 200 ? Exchange::status_error("/v1/models", r->status)
                                 : models.error().message;
}

void ReplicaProbe::read_load(Exchange& x, ProbeResult& out) {
  auto fetch = [&](const std::string& path, auto read) -> bool {
    auto r = x.get(path);
    if (!r.ok() || r->status != 200) {
      out.load_error = r.ok() ? Exchange::status_error(path, r->status) : r.error().message;
      return false;
    }
    Result<ReplicaLoad> load = read(r->body);
    if (!load.ok()) {
      out.load_error = load.error().message;
      return false;
    }
    out.load = *load;
    out.load_error.clear();
    return true;
  };
  switch (kind_) {
    case ReplicaKind::kKvcascade:
      fetch("/v1/load", read_kvcascade_load);
      return;
    case ReplicaKind::kVllm:
      fetch("/metrics", read_vllm_metrics);
      return;
    case ReplicaKind::kSglang:
      // /metrics only with --enable-metrics; /get_load always (deprecated for /v1/loads lately).
      if (sglang_metrics_ && fetch("/metrics", read_sglang_metrics)) return;
      sglang_metrics_ = false;
      fetch("/get_load", read_sglang_load);
      return;
    case ReplicaKind::kOpenai:
    case ReplicaKind::kAuto:
      return;
  }
}

}  // namespace kvc
