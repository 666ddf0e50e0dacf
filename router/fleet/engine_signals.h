// What the router reads from the engines behind it, per kind of engine, as pure functions of the
// bodies they answer (router/fleet/replica_probe.h does the HTTP):
//   kvcascade  /v1/info (identity, hash model, block size), /v1/load, KV events (exact index);
//   vllm       /health, /v1/models, /metrics: vllm:num_requests_running / _waiting,
//              vllm:kv_cache_usage_perc (gpu_cache_usage_perc before v0.10), cache_config_info;
//   sglang     /health, /v1/models, /get_load (per DP rank) or /metrics: sglang:num_running_reqs,
//              sglang:num_queue_reqs, sglang:token_usage, sglang:max_total_num_tokens;
//   openai     /health if present, /v1/models; no load signal (the router counts its own).
// A body that is garbage (bad JSON, wrong types, not Prometheus text) is an Error naming what was
// missing, never an exception.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/chat_template.h"
#include "api/step_model.h"
#include "base/status.h"

namespace kvc {

enum class ReplicaKind { kAuto, kKvcascade, kVllm, kSglang, kOpenai };

std::string_view replica_kind_name(ReplicaKind kind);  // "auto", "kvcascade", "vllm", ...
std::optional<ReplicaKind> parse_replica_kind(std::string_view name);
std::vector<std::string> replica_kind_names();

// kvcascade's /v1/info.
struct KvcascadeInfo {
  // Empty if not given, or not one this router can use (replica_id_error says why): it goes
  // into response headers (x-kvcascade-replica), the decisions file and the route detail, so
  // only 1-128 printable ASCII characters without spaces or ';' are taken. Without one the pool
  // names the replica by its address.
  std::string replica_id;
  std::string replica_id_error;
  std::string model;
  std::string hash_model;  // the chain seed's model name (defaults to model)
  int32_t block_size = 16;
  // The replica's chat template (null: canonical rendering); chat requests are hashed as the
  // replica will tokenize them. A template this router cannot compile: null, and the reason.
  std::shared_ptr<const ChatTemplate> chat_template;
  std::string chat_template_error;
  // What the replica's tokenizer puts around a completion's prompt (BOS): hashed with it.
  std::string completion_prefix, completion_suffix;
  std::string tokenizer;  // its name
  std::string key_space;  // "bytes", "token_ids", "private_token_ids" (api/key_space.h)
  std::optional<int64_t> max_model_len;  // its context, when stated
};
// Error unless the body is a JSON object naming a model (what tells a kvcascade replica apart).
Result<KvcascadeInfo> read_kvcascade_info(std::string_view body, int32_t default_block_size);

// One reading of a replica's load. Counts are requests (sequences for kvcascade).
struct ReplicaLoad {
  int64_t queued_prefill_tokens = 0;  // kvcascade only
  int64_t running = 0;
  int64_t waiting = 0;
  std::optional<double> kv_usage;             // share of the KV cache in use, 0..1
  std::optional<int64_t> kv_capacity_tokens;  // what the KV cache holds in all
  std::string weight_version;                 // kvcascade only: the weights serving now
  // kvcascade only: when an update's weights began to serve there (ms since the epoch, the
  // replica's system clock). nullopt: the weights it started with, or an older replica.
  std::optional<int64_t> weight_loaded_at_ms;
  // kvcascade only: an operator paused admission (POST /v1/admin/pause): requests sent there
  // wait until it resumes.
  bool paused = false;
  // kvcascade only (both or neither): tokens run through the model since the replica started,
  // and the work it has taken on but not done yet (SchedulerCounts::num_work_tokens_queued).
  // Every router reads the same figures: the routed-work signal (replica_pool.h).
  std::optional<int64_t> computed_tokens_total, queued_work_tokens;
  // kvcascade only: the completion tokens it plans per sample of a chat request without
  // max_tokens (replica/core/scheduler.h planned_open_completion).
  std::optional<int64_t> planned_open_completion_tokens;
  // kvcascade only: requests ended since start (their mean work, with computed_tokens_total).
  std::optional<int64_t> finished_requests_total;
  // kvcascade only: seconds the replica spent in steps since start (how busy it is: the pool
  // reads its share of wall time).
  std::optional<double> busy_seconds_total;
  // kvcascade only: steps run since start (the tick's steps_total, else the live `steps`): with
  // the step model's fixed cost per step, how much of the busy time was work that grows with load.
  std::optional<int64_t> steps_total;
  // kvcascade only: the start of the replica's load tick these figures are of (ms since the
  // epoch); nullopt: live figures.
  std::optional<int64_t> tick_at_ms;
  std::optional<StepModel> step_model;  // kvcascade only, once it has one
  // kvcascade only: the last work announcement (KvWork::seq) these figures hold; a router counts
  // the later ones on top of them. nullopt: an older replica (its announcements are ignored).
  std::optional<int64_t> work_seq;
};
Result<ReplicaLoad> read_kvcascade_load(std::string_view body);
Result<ReplicaLoad> read_vllm_metrics(std::string_view text);
Result<ReplicaLoad> read_sglang_metrics(std::string_view text);
// SGLang's /get_load: an array with one object per DP rank ({dp_rank, num_reqs (running and
// waiting), num_waiting_reqs, num_tokens}), or, in older versions, one object.
Result<ReplicaLoad> read_sglang_load(std::string_view body);

// /v1/models: {"object":"list","data":[{"id":..., "owned_by":...}, ...]}.
struct ModelList {
  std::vector<std::string> ids;  // at least one
  std::string owned_by;          // of the first model ("vllm", "sglang", ...); may be empty
  // The smallest max_model_len the models state (vLLM's), if any does.
  std::optional<int64_t> max_model_len;
};
Result<ModelList> read_model_list(std::string_view body);

// The kind a replica's answers point to: owned_by of its models, else the namespace of its
// metrics ("vllm:", "sglang:"); kOpenai when neither says.
ReplicaKind kind_from_owner(std::string_view owned_by);
ReplicaKind kind_from_metrics(std::string_view metrics_text);

}  // namespace kvc
