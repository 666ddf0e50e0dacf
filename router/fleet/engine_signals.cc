#include "router/fleet/engine_signals.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include <nlohmann/json.hpp>

#include "api/openai_request.h"  // ApiLimits
#include "base/label.h"
#include "router/fleet/prometheus_text.h"

namespace kvc {
namespace {

using json = nlohmann::json;

constexpr double kMaxCount = 1e12;  // a reported count beyond this is nonsense: clamped

constexpr std::array<std::pair<ReplicaKind, std::string_view>, 5> kKindNames = {{
    {ReplicaKind::kAuto, "auto"},
    {ReplicaKind::kKvcascade, "kvcascade"},
    {ReplicaKind::kVllm, "vllm"},
    {ReplicaKind::kSglang, "sglang"},
    {ReplicaKind::kOpenai, "openai"},
}};

int64_t count(double v) {
  return static_cast<int64_t>(std::clamp(v, 0.0, kMaxCount));
}

// A non-negative count from a JSON number; nullopt for anything else (strings, null, objects).
std::optional<int64_t> count_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return count(v);
}

// A non-negative finite JSON number (seconds, a share); nullopt for anything else.
std::optional<double> amount_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  return std::isfinite(v) && v >= 0 ? std::optional<double>(v) : std::nullopt;
}

// A time stamp: ms since the epoch, as sent (a positive integer); nullopt for anything else.
std::optional<int64_t> timestamp_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) return std::nullopt;
  return it->get<int64_t>();
}

std::optional<std::string> string_field(const json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

Result<json> parse_json(std::string_view body, std::string_view what) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) return Error{std::string(what) + " is not JSON"};
  return j;
}

std::optional<double> share(std::optional<double> v) {
  if (!v) return std::nullopt;
  return std::clamp(*v, 0.0, 1.0);
}

std::optional<int64_t> label_int(const MetricSample& s, std::string_view name) {
  const std::optional<std::string_view> v = s.label(name);
  if (!v) return std::nullopt;
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || end != v->data() + v->size() || out < 0) return std::nullopt;
  return out;
}

Error missing(std::string_view metric, const MetricSamples& m) {
  return Error{"no " + std::string(metric) + " in /metrics (" + std::to_string(m.num_lines) +
               " sample lines, " + std::to_string(m.num_malformed) + " malformed)"};
}

// A model's max_model_len, when it states one in range.
std::optional<int64_t> context_field(const json& j) {
  const auto n = count_field(j, "max_model_len");
  return n && *n >= 1 && *n <= (int64_t{1} << 40) ? n : std::nullopt;
}

}  // namespace

std::string_view replica_kind_name(ReplicaKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "?";
}

std::optional<ReplicaKind> parse_replica_kind(std::string_view name) {
  for (const auto& [k, n] : kKindNames)
    if (n == name) return k;
  return std::nullopt;
}

std::vector<std::string> replica_kind_names() {
  std::vector<std::string> out;
  for (const auto& [_, n] : kKindNames)
    out.emplace_back(n);
  return out;
}

Result<KvcascadeInfo> read_kvcascade_info(std::string_view body, int32_t default_block_size) {
  auto j = parse_json(body, "/v1/info");
  if (!j.ok()) return j.error();
  if (!j->is_object()) return Error{"/v1/info is not a JSON object"};
  KvcascadeInfo info;
  info.model = string_field(*j, "model").value_or("");
  if (info.model.empty()) return Error{"/v1/info names no model"};
  // Other servers may answer /v1/info too: a kvcascade replica also states how it hashes.
  if (!j->contains("hash_model") && !j->contains("block_size")) {
    return Error{"/v1/info has neither hash_model nor block_size"};
  }
  info.replica_id = string_field(*j, "replica_id").value_or("");
  if (!info.replica_id.empty() &&
      (!is_plain_label(info.replica_id) || info.replica_id.find(';') != std::string::npos)) {
    info.replica_id_error =
        "replica_id is not 1-128 printable ASCII characters without spaces "
        "or ';' (named by its address instead)";
    info.replica_id.clear();
  }
  info.hash_model = string_field(*j, "hash_model").value_or(info.model);
  const int64_t bs = count_field(*j, "block_size").value_or(default_block_size);
  if (bs < 1 || bs > 4096) return Error{"/v1/info block_size out of range"};
  info.block_size = static_cast<int32_t>(bs);
  info.completion_prefix = string_field(*j, "completion_prefix").value_or("");
  info.completion_suffix = string_field(*j, "completion_suffix").value_or("");
  info.tokenizer = string_field(*j, "tokenizer").value_or("");
  info.key_space = string_field(*j, "key_space").value_or("bytes");
  info.max_model_len = context_field(*j);
  if (const auto t = j->find("chat_template"); t != j->end() && !t->is_null()) {
    auto compiled = ChatTemplate::from_json(*t);
    if (compiled.ok()) {
      info.chat_template = std::make_shared<const ChatTemplate>(std::move(*compiled));
    } else {
      info.chat_template_error = compiled.error().message;
    }
  }
  return info;
}

Result<ReplicaLoad> read_kvcascade_load(std::string_view body) {
  auto j = parse_json(body, "/v1/load");
  if (!j.ok()) return j.error();
  if (!j->is_object()) return Error{"/v1/load is not a JSON object"};
  ReplicaLoad load;
  // The figures of the replica's current tick when it gives them (every router polling within
  // the period reads the same ones), else the live ones.
  const auto tick = j->find("tick");
  const json& figures = tick != j->end() && tick->is_object() ? *tick : *j;
  load.queued_prefill_tokens = count_field(figures, "queued_prefill_tokens").value_or(0);
  load.running = count_field(figures, "running_sequences").value_or(0);
  load.waiting = count_field(figures, "waiting_sequences").value_or(0);
  load.weight_version = string_field(*j, "weight_version").value_or("");
  load.weight_loaded_at_ms = timestamp_field(*j, "weight_loaded_at_ms");
  if (const auto p = j->find("paused"); p != j->end() && p->is_boolean()) {
    load.paused = p->get<bool>();
  }
  load.computed_tokens_total = count_field(figures, "computed_tokens_total");
  load.queued_work_tokens = count_field(figures, "queued_work_tokens");
  if (const auto plan = count_field(figures, "planned_open_completion_tokens")) {
    // A figure past what any request may ask for is no replica's plan.
    load.planned_open_completion_tokens = std::clamp<int64_t>(*plan, 1, ApiLimits{}.max_tokens);
  }
  load.finished_requests_total = count_field(figures, "finished_requests_total");
  load.busy_seconds_total = amount_field(figures, "busy_seconds_total");
  load.steps_total = count_field(figures, &figures != &*j ? "steps_total" : "steps");
  if (const auto m = j->find("step_model"); m != j->end()) load.step_model = read_step_model(*m);
  if (&figures != &*j) load.tick_at_ms = timestamp_field(figures, "at_ms");
  load.work_seq = count_field(figures, "work_seq");
  if (!load.computed_tokens_total || !load.queued_work_tokens) {
    load.computed_tokens_total.reset();  // an older replica: this router counts its own
    load.queued_work_tokens.reset();
    load.work_seq.reset();
  }
  return load;
}

Result<ReplicaLoad> read_vllm_metrics(std::string_view text) {
  static constexpr std::string_view kNames[] = {
      "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
      "vllm:gpu_cache_usage_perc", "vllm:cache_config_info"};
  const MetricSamples m = parse_prometheus_text(text, kNames);
  const std::optional<double> running = m.sum("vllm:num_requests_running");
  if (!running) return missing("vllm:num_requests_running", m);
  ReplicaLoad load;
  load.running = count(*running);
  load.waiting = count(m.sum("vllm:num_requests_waiting").value_or(0));
  // kv_cache_usage_perc since v0.10; gpu_cache_usage_perc before. A fraction despite the name.
  // Several engines (data parallel): the fullest one.
  load.kv_usage = share(m.max("vllm:kv_cache_usage_perc"));
  if (!load.kv_usage) load.kv_usage = share(m.max("vllm:gpu_cache_usage_perc"));
  int64_t capacity = 0;
  for (const MetricSample& s : m.samples) {
    if (s.name != "vllm:cache_config_info") continue;
    const auto blocks = label_int(s, "num_gpu_blocks");
    const auto block_size = label_int(s, "block_size");
    if (blocks && block_size && *blocks < (int64_t{1} << 31) && *block_size < (1 << 20)) {
      capacity += *blocks * *block_size;
    }
  }
  if (capacity > 0) load.kv_capacity_tokens = capacity;
  return load;
}

Result<ReplicaLoad> read_sglang_metrics(std::string_view text) {
  static constexpr std::string_view kNames[] = {"sglang:num_running_reqs", "sglang:num_queue_reqs",
                                                "sglang:token_usage",
                                                "sglang:max_total_num_tokens"};
  const MetricSamples m = parse_prometheus_text(text, kNames);
  const std::optional<double> running = m.sum("sglang:num_running_reqs");
  if (!running) return missing("sglang:num_running_reqs", m);
  ReplicaLoad load;
  load.running = count(*running);
  load.waiting = count(m.sum("sglang:num_queue_reqs").value_or(0));
  load.kv_usage = share(m.max("sglang:token_usage"));
  if (auto cap = m.sum("sglang:max_total_num_tokens"); cap && *cap >= 1) {
    load.kv_capacity_tokens = count(*cap);
  }
  return load;
}

Result<ReplicaLoad> read_sglang_load(std::string_view body) {
  auto j = parse_json(body, "/get_load");
  if (!j.ok()) return j.error();
  ReplicaLoad load;
  auto add_rank = [&](const json& rank) -> bool {
    if (!rank.is_object()) return false;
    if (auto legacy = count_field(rank, "load")) {  // older versions: one number
      load.running += *legacy;
      return true;
    }
    const std::optional<int64_t> reqs = count_field(rank, "num_reqs");
    if (!reqs) return false;
    const int64_t waiting = count_field(rank, "num_waiting_reqs").value_or(0);
    load.waiting += waiting;
    load.running += std::max<int64_t>(0, *reqs - waiting);
    return true;
  };
  bool ok = false;
  if (j->is_array()) {
    ok = !j->empty();
    for (const json& rank : *j)
      ok = add_rank(rank) && ok;
  } else {
    ok = add_rank(*j);
  }
  if (!ok) return Error{"/get_load holds no num_reqs per rank"};
  return load;
}

Result<ModelList> read_model_list(std::string_view body) {
  auto j = parse_json(body, "/v1/models");
  if (!j.ok()) return j.error();
  if (!j->is_object() || !j->contains("data") || !(*j)["data"].is_array()) {
    return Error{"/v1/models has no data array"};
  }
  ModelList list;
  for (const json& m : (*j)["data"]) {
    if (!m.is_object()) continue;
    std::optional<std::string> id = string_field(m, "id");
    if (!id || id->empty() || id->size() > 1024) continue;
    if (list.ids.empty()) list.owned_by = string_field(m, "owned_by").value_or("");
    if (const auto context = context_field(m)) {
      list.max_model_len = std::min(list.max_model_len.value_or(*context), *context);
    }
    if (std::find(list.ids.begin(), list.ids.end(), *id) == list.ids.end()) {
      list.ids.push_back(std::move(*id));
    }
    if (list.ids.size() >= 1024) break;
  }
  if (list.ids.empty()) return Error{"/v1/models lists no model"};
  return list;
}

ReplicaKind kind_from_owner(std::string_view owned_by) {
  if (owned_by == "vllm") return ReplicaKind::kVllm;
  if (owned_by == "sglang") return ReplicaKind::kSglang;
  return ReplicaKind::kOpenai;
}

ReplicaKind kind_from_metrics(std::string_view metrics_text) {
  for (const std::string& ns : metric_namespaces(metrics_text)) {
    if (ns == "vllm:") return ReplicaKind::kVllm;
    if (ns == "sglang:") return ReplicaKind::kSglang;
  }
  return ReplicaKind::kOpenai;
}

}  // namespace kvc
