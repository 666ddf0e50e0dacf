#include "replica/server/replica_server.h"

#include <cassert>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <random>

#include <nlohmann/json.hpp>

#include "api/key_space.h"
#include "api/step_model.h"
#include "api/token_table.h"
#include "http/auth.h"
#include "http/errors.h"
#include "http/sse.h"
#include "replica/server/request_state.h"
#include "replica/server/token_json.h"

namespace kvc {
namespace {

using json = nlohmann::json;
using replica_server_detail::dump;
using replica_server_detail::param_or_null;
using replica_server_detail::RequestState;

std::string join_ids(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids)
    s += (s.empty() ? "" : ", ") + std::to_string(id);
  return s;
}

// The model's generation_config.json defaults: what requests that leave a field out get, the ids
// that end sequences (the tokenizer's EOS tokens and the model's end ids applied), and the
// fields it sets that are not applied, each with the reason.
json generation_defaults_json(const Engine& engine) {
  const GenerationDefaults& g = engine.model().generation;
  json j = json::object();
  if (g.temperature) j["temperature"] = *g.temperature;
  if (g.top_p) j["top_p"] = *g.top_p;
  if (g.top_k) j["top_k"] = *g.top_k;
  j["eos_token_ids"] = engine.eos_token_ids();
  json not_applied = json::array();
  json reasons = json::object();
  for (const std::string& u : g.unsupported) {
    not_applied.push_back(u);
    reasons[u] = "the sampler does not implement it";
  }
  if (const std::vector<int32_t> ignored = engine.model_eos_not_applied(); !ignored.empty()) {
    not_applied.push_back("eos_token_id");
    reasons["eos_token_id"] =
        join_ids(ignored) +
        ": ids of the model's own tokenizer, which the byte tokenizer's ids (bytes) do not "
        "name; sequences end on " +
        join_ids(engine.tokenizer().eos_tokens());
  }
  j["not_applied"] = std::move(not_applied);
  j["not_applied_reasons"] = std::move(reasons);
  return j;
}

}  // namespace

ReplicaServer::ReplicaServer(EngineLoop& loop, const Engine& engine, ReplicaServerConfig config,
                             prometheus::Registry* registry, metrics::ReplicaMetrics* metrics)
    : loop_(loop),
      engine_(engine),
      registry_(registry),
      metrics_(metrics),
      config_(std::move(config)) {
  if (config_.served_model_name.empty()) config_.served_model_name = engine_.model().name;
  if (metrics_) metrics_->set_weight_version(config_.weight_version);
  char tag[9];
  std::snprintf(tag, sizeof tag, "%08x", static_cast<unsigned>(std::random_device{}()));
  instance_ = tag;
  if (engine_.key_space() == KeySpace::kTokenIds) {
    const Tokenizer& t = engine_.tokenizer();
    TokenTable table;
    table.bytes.reserve(t.vocab_size());
    for (int32_t id = 0; id < t.vocab_size(); ++id)
      table.bytes.push_back(t.token_bytes(id));
    token_table_ = encode_token_table(table);
  }
}

void ReplicaServer::handle(http::Request request, std::shared_ptr<http::Responder> responder) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  // Health probes (kubelet: /livez, /readyz, /health) stay open; everything else, KV events and
  // metrics included, needs the key when one is configured; the admin endpoints the admin key when
  // there is one.
  const bool probe = path == "/livez" || path == "/readyz" || path == "/health";
  if (path.starts_with("/v1/admin/")) {
    const auto& keys = config_.admin_api_keys.empty() ? config_.api_keys : config_.admin_api_keys;
    if (!http::authorize(request, keys, *responder)) return;
    if (!http::method_allowed(request.method, "POST") || request.method == "HEAD") {
      http::send_method_not_allowed(*responder, request.method, path, "POST");
      return;
    }
    admin(path, request, responder);
    return;
  }
  if (!probe && !http::authorize(request, config_.api_keys, *responder)) return;
  auto only = [&](std::string_view method) {
    if (http::method_allowed(request.method, method)) return true;
    http::send_method_not_allowed(*responder, request.method, path, method);
    return false;
  };
  if (path == "/v1/completions") {
    if (only("POST")) generate(Endpoint::kCompletions, request, responder);
  } else if (path == "/v1/chat/completions") {
    if (only("POST")) generate(Endpoint::kChatCompletions, request, responder);
  } else if (path == "/livez") {
    // The process serves (liveness). Incomplete weights are /readyz's to report: they take the
    // replica out of routing until an update succeeds, with no restart.
    if (only("GET")) responder->send(200, "application/json", R"({"status":"ok"})");
  } else if (path == "/readyz" || path == "/health") {
    // Ready to serve (readiness); /health answers alike.
    if (!only("GET")) return;
    // A weight update that failed while writing leaves no complete weights to serve.
    if (loop_.weight_version().empty()) {
      http::send_error(*responder, 503,
                       "the weights are incomplete after a failed update: POST /v1/admin/weights",
                       "server_error");
      return;
    }
    responder->send(200, "application/json", R"({"status":"ok"})");
  } else if (path == "/v1/models") {
    if (only("GET")) responder->send(200, "application/json", models_json());
  } else if (auto id = http::path_rest_decoded(path, "/v1/models/")) {
    // OpenAI's GET /v1/models/{model} (the SDK's models.retrieve).
    if (!only("GET")) return;
    if (*id != config_.served_model_name) {
      http::send_error(*responder, 404, "model '" + *id + "' is not served here",
                       "invalid_request_error", "model");
      return;
    }
    responder->send(200, "application/json", dump(model_json()));
  } else if (path == "/v1/info") {
    if (only("GET")) responder->send(200, "application/json", info_json());
  } else if (path == "/v1/token_bytes") {
    if (!only("GET")) return;
    if (token_table_.empty()) {
      http::send_error(*responder, 404,
                       std::string("no token table: this replica's key space is ") +
                           key_space_name(engine_.key_space()) +
                           " (token ids are bytes, or its tokens do not give their text back)",
                       "not_found_error");
      return;
    }
    responder->send(200, "application/octet-stream", token_table_);
  } else if (path == "/v1/load") {
    if (only("GET")) responder->send(200, "application/json", load_json());
  } else if (path == "/v1/kv_events") {
    if (!only("GET")) return;
    if (request.method == "HEAD") {
      // No stream to follow: a subscription would outlive the reply.
      responder->send(200, "text/event-stream", "", http::event_stream_headers());
      return;
    }
    kv_events(responder, http::query_param(request.target, "queued") == "1",
              http::query_param(request.target, "work") == "1");
  } else if (path == "/metrics" && registry_) {
    if (only("GET")) responder->send(200, metrics::kContentType, metrics::expose(*registry_));
  } else {
    http::send_error(*responder, 404, "no such path: " + path, "not_found_error");
  }
}

std::optional<ApiError> ReplicaServer::context_refusal(Endpoint endpoint, size_t index,
                                                       const GenerationRequest& g) const {
  const int64_t context = engine_.config().scheduler.max_model_len;
  const auto prompt = static_cast<int64_t>(g.prompt.size());
  // A default max_tokens is lowered to what is left (at least 1 token).
  const int64_t completion = g.max_tokens_is_default ? 1 : g.params.max_tokens;
  if (prompt + completion <= context) return std::nullopt;
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const std::string what = chat ? "messages" : "prompt";
  std::string m = index == std::string::npos ? "" : "prompt[" + std::to_string(index) + "]: ";
  m += "This model's maximum context length is " + std::to_string(context) + " tokens. ";
  if (g.max_tokens_is_default) {
    m += "However, the " + what + (chat ? " have " : " has ") + std::to_string(prompt) +
         " tokens, which leaves no room for a completion. Please reduce the length of the " + what +
         ".";
  } else {
    m += "However, you requested " + std::to_string(prompt + completion) + " tokens (" +
         std::to_string(prompt) + " in the " + what + ", " + std::to_string(completion) +
         " in the completion). Please reduce the length of the " + what + " or the completion.";
  }
  return ApiError{400, std::move(m), what};
}

void ReplicaServer::generate(Endpoint endpoint, const http::Request& request,
                             std::shared_ptr<http::Responder> responder) {
  auto parsed = parse_openai_request(endpoint, request.body, config_.api,
                                     [this](const std::string&) { return config_.chat_template; });
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    http::send_error(*responder, e->status, e->message, "invalid_request_error",
                     param_or_null(e->param));
    return;
  }
  OpenAiRequest req = std::move(std::get<OpenAiRequest>(parsed));
  if (req.model != config_.served_model_name) {
    http::send_error(*responder, 404,
                     "model '" + req.model + "' is not served here (serving '" +
                         config_.served_model_name + "')",
                     "invalid_request_error", "model");
    return;
  }
  const uint64_t number = next_request_++;
  const std::string id = (endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") +
                         config_.replica_id + "-" + instance_ + "-" + std::to_string(number);
  const uint64_t seed = req.seed.value_or(std::random_device{}() ^ (number << 32));
  const Tokenizer& tokenizer = engine_.tokenizer();
  auto state =
      std::make_shared<RequestState>(req, id, config_.served_model_name, responder, metrics_,
                                     engine_.clock(), tokenizer, loop_, config_.stream_interval);
  std::vector<GenerationRequest> groups;
  std::vector<GroupSink> sinks;
  for (size_t p = 0; p < req.prompts.size(); ++p) {
    GenerationRequest g;
    if (p < req.prompt_token_ids.size() && !req.prompt_token_ids[p].empty()) {
      // Token ids go to the model as given (the engine checks them against the vocabulary).
      g.prompt = req.prompt_token_ids[p];
    } else if (endpoint == Endpoint::kChatCompletions) {
      // The client's text in a rendered chat prompt is encoded as plain text (no special tokens).
      g.prompt = tokenizer.encode(req.prompts[p], p < req.literal.size()
                                                      ? std::span<const TextSpan>(req.literal[p])
                                                      : std::span<const TextSpan>());
    } else {
      g.prompt =
          req.add_special_tokens
              ? tokenizer.encode(completion_bytes(tokenizer.completion_prefix(), req.prompts[p],
                                                  tokenizer.completion_suffix()))
              : tokenizer.encode(req.prompts[p]);
    }
    g.n = req.n;
    // A router's id of the send, given back in its work announcement (anything else: ignored).
    if (auto route = request.header("x-kvcascade-route"); route && KvWork::valid_route(*route)) {
      g.route = std::string(*route);
    }
    // What the request leaves out comes from the model's generation_config.json.
    const GenerationDefaults& d = engine_.model().generation;
    g.params.temperature = req.temperature.value_or(d.temperature.value_or(1.0f));
    g.params.top_p = req.top_p.value_or(d.top_p.value_or(1.0f));
    g.params.top_k = req.top_k.value_or(d.top_k.value_or(0));
    // Without max_tokens, as vLLM: a completion's default (16) and a chat reply's (the rest of
    // the context: OpenAI's is unbounded) are lowered to what the context and the KV pool leave.
    g.params.max_tokens =
        req.open_completion() ? engine_.config().scheduler.max_model_len : req.max_tokens;
    g.max_tokens_is_default = !req.max_tokens_given;
    g.open_completion = req.open_completion();
    if (auto e = context_refusal(endpoint, req.prompts.size() > 1 ? p : std::string::npos, g)) {
      http::send_error(*responder, e->status, e->message, "invalid_request_error", e->param,
                       "context_length_exceeded");
      return;
    }
    g.params.stop = req.stop;
    g.params.stop_token_ids = req.stop_token_ids;
    g.params.ignore_eos = req.ignore_eos;
    g.params.include_stop_str = req.include_stop_str_in_output;
    g.params.skip_special_tokens = req.skip_special_tokens;
    g.params.logprobs = req.logprobs;
    g.params.seed = seed + p;
    g.cache_salt = req.cache_salt;
    if (req.group) g.affinity = *req.group;
    g.affinity_size = req.group_size;
    if (req.return_token_ids) state->set_prompt_ids(p, g.prompt);
    GroupSink sink;
    sink.on_output = [state, p](const SequenceOutput& o) { state->on_output(p, o); };
    sink.on_finished = [state, p](const SequenceGroup& g, const std::string& error) {
      state->on_finished(p, g, error);
    };
    groups.push_back(std::move(g));
    sinks.push_back(std::move(sink));
  }
  // Every prompt is validated before any runs, so a refusal is a plain 400 before the first
  // byte. The I/O thread does not wait for the engine's answer.
  const std::string param = req.prompts.size() > 1 ? "prompt" : "";
  // Runs on the engine thread, possibly while the loop stops after this server is gone: it
  // holds the loop, not the server.
  EngineLoop& loop = loop_;
  loop_.submit(std::move(groups), std::move(sinks),
               [&loop, state, responder, param](Result<std::vector<uint64_t>> ids) {
                 if (!ids.ok()) {
                   // Refused by the engine: the request's fault; by a stopped loop: ours.
                   // A prompt the engine cannot take (an invalid token, too long) names it.
                   const std::string& m = ids.error().message;
                   state->fail(loop.stopped() ? 503 : 400, m,
                               m.rfind("prompt", 0) == 0 ? "prompt" : param);
                   return;
                 }
                 state->set_groups(std::move(*ids));
                 // A client gone before the groups were known had nothing to abort.
                 if (responder->client_gone()) {
                   for (uint64_t g : state->groups())
                     loop.abort(g);
                 }
               });
  // A client that goes away frees its groups' KV.
  responder->on_client_gone([this, state] {
    for (uint64_t g : state->groups())
      loop_.abort(g);
  });
}

void ReplicaServer::kv_events(std::shared_ptr<http::Responder> responder, bool queued, bool work) {
  responder->start_stream(200, "text/event-stream", http::event_stream_headers());
  const std::optional<uint64_t> sub = loop_.subscribe_kv_events(
      [responder](const KvEventBatch& batch, std::string_view events_json) {
        responder->write(http::sse_event(
            encode_kv_event_batch(batch.replica, batch.seq, batch.snapshot, events_json)));
      },
      queued, work);
  if (!sub) {
    responder->write(
        http::sse_event(http::error_body("the engine is shutting down", "server_error")));
    responder->end();
    return;
  }
  responder->on_client_gone([this, sub] { loop_.unsubscribe_kv_events(*sub); });
}

void ReplicaServer::admin(const std::string& path, const http::Request& request,
                          std::shared_ptr<http::Responder> responder) {
  auto bad = [&](int status, const std::string& message, const char* param) {
    http::send_error(*responder, status, message, "invalid_request_error",
                     param ? std::optional<std::string_view>(param) : std::nullopt);
  };
  if (path == "/v1/admin/pause" || path == "/v1/admin/resume") {
    const bool paused = path == "/v1/admin/pause";
    loop_.set_paused(paused);
    responder->send(200, "application/json", dump({{"paused", paused}}));
    return;
  }
  if (path != "/v1/admin/weights") {
    http::send_error(*responder, 404, "no such path: " + path, "not_found_error");
    return;
  }
  const json body = json::parse(request.body, nullptr, false);
  if (!body.is_object()) return bad(400, "the body must be a JSON object", nullptr);
  // A misspelt field ("Mode") would silently mean its default (a drain): refused by name.
  for (const auto& [key, value] : body.items()) {
    if (key != "path" && key != "version" && key != "mode") {
      return bad(400, key + ": not a field of a weight update (path, version, mode)", nullptr);
    }
  }
  auto text = [&](const char* key) -> std::optional<std::string> {
    auto it = body.find(key);
    if (it == body.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  const std::optional<std::string> folder = text("path");
  if (!folder || folder->empty()) {
    return bad(400, "path: the Hugging Face folder to load (a string)", "path");
  }
  if (folder->front() != '/') {
    return bad(400, "path: an absolute path (not one relative to the replica's working directory)",
               "path");
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(*folder, ec)) {
    return bad(400, "path: no such folder: " + *folder, "path");
  }
  const std::optional<std::string> version = text("version");
  if (!version || !valid_weight_version(*version)) {
    return bad(400, "version: 1 to 128 printable ASCII characters without spaces", "version");
  }
  const std::string mode = text("mode").value_or("drain");
  if (body.contains("mode") && !body["mode"].is_string()) return bad(400, "mode: a string", "mode");
  if (mode != "drain" && mode != "abort") {
    return bad(400, "mode: \"drain\" (finish what runs, then swap) or \"abort\" (end it now)",
               "mode");
  }
  if (updating_->exchange(true)) {
    return bad(409, "a weight update is already running on this replica", nullptr);
  }
  WeightUpdate u{*folder, *version, mode == "abort"};
  // Runs on the engine thread, maybe after this server is gone: it holds what it needs.
  loop_.update_weights(std::move(u), [responder, updating = updating_, metrics = metrics_, mode](
                                         const WeightUpdateReport* report,
                                         const WeightUpdateFailure* failure) {
    updating->store(false);
    if (failure != nullptr) {
      const bool broken = failure->kind == UpdateError::kBroken;
      if (metrics) {
        metrics->weight_updates_total.Add({{"result", broken ? "broken" : "refused"}}).Increment();
      }
      const int status = failure->kind == UpdateError::kBusy ? 409 : broken ? 500 : 400;
      http::send_error(*responder, status, failure->message,
                       broken ? "server_error" : "invalid_request_error",
                       broken ? std::nullopt : std::optional<std::string_view>("path"));
      return;
    }
    if (metrics) {
      metrics->weight_updates_total.Add({{"result", "ok"}}).Increment();
      auto& seconds = metrics->weight_update_seconds;
      seconds.Add({{"phase", "drain"}}, metrics::seconds_buckets()).Observe(report->drain_seconds);
      seconds.Add({{"phase", "load"}}, metrics::seconds_buckets()).Observe(report->load_seconds);
      metrics->set_weight_version(report->version);
    }
    responder->send(200, "application/json",
                    dump({{"weight_version", report->version},
                          {"previous_weight_version", report->previous_version},
                          {"mode", mode},
                          {"drain_seconds", report->drain_seconds},
                          {"load_seconds", report->load_seconds},
                          {"aborted_groups", report->aborted_groups},
                          {"flushed_blocks", report->flushed_blocks}}),
                    {{"x-kvcascade-weight-version", report->version}});
  });
}

std::string ReplicaServer::info_json() const {
  const ModelConfig& m = engine_.model();
  return dump(
      {{"replica_id", config_.replica_id},
       {"model", config_.served_model_name},
       {"block_size", engine_.pool().block_size()},
       // Block hashes chain from chain_seed(hash_model, cache_salt): routers must agree.
       {"hash_model", engine_.model().name},
       {"tokenizer", engine_.tokenizer().name()},
       // Routers render chat requests with this template (null: the canonical rendering)
       // and hash the bytes; a completion prompt is hashed and tokenized with the tokenizer's
       // prefix (BOS) and suffix around it.
       {"chat_template", config_.chat_template ? config_.chat_template->to_json() : json(nullptr)},
       {"key_space", key_space_name(engine_.key_space())},
       {"completion_prefix", engine_.tokenizer().completion_prefix()},
       {"completion_suffix", engine_.tokenizer().completion_suffix()},
       {"num_kv_blocks", engine_.pool().num_blocks()},
       {"num_host_kv_blocks", engine_.pool().num_host_blocks()},
       {"max_model_len", engine_.config().scheduler.max_model_len},
       {"max_n", config_.api.max_n},
       {"architecture",
        {{"name", m.architecture},
         {"family", model_family_name(m.family)},
         {"layers", m.num_hidden_layers},
         {"hidden_size", m.hidden_size},
         {"num_attention_heads", m.num_attention_heads},
         {"num_key_value_heads", m.num_key_value_heads},
         {"head_dim", m.head_dim}}},
       {"generation_defaults", generation_defaults_json(engine_)},
       {"weight_version", loop_.weight_version()},
       {"weight_loaded_at_ms",
        loop_.weight_loaded_at_ms() > 0 ? json(loop_.weight_loaded_at_ms()) : json(nullptr)},
       {"quantization", engine_.backend().quantization().empty()
                            ? json(nullptr)
                            : json(engine_.backend().quantization())},
       {"kv_cache_dtype", engine_.backend().kv_cache_dtype().empty()
                              ? json("auto")
                              : json(engine_.backend().kv_cache_dtype())},
       {"attention", engine_.config().cascade.enabled ? "cascade" : "flat"}});
}

namespace {

// What the replica plans per sample of a chat request without max_tokens, once it has seen such
// samples end (before: null, so that routers do not average its prior in as a measurement).
json open_plan(const SchedulerCounts& c) {
  return c.num_open_samples_ended > 0 ? json(c.planned_open_completion_tokens) : json(nullptr);
}

}  // namespace

std::string ReplicaServer::load_json() const {
  const LoadSnapshot l = loop_.load();
  json tick = nullptr;
  if (config_.load_tick.count() > 0) {
    const int64_t period = config_.load_tick.count();
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
    LoadSnapshot t;
    {
      std::lock_guard lock(tick_mu_);
      if (now / period != tick_) {
        tick_ = now / period;
        tick_load_ = l;
      }
      t = tick_load_;
    }
    tick = {{"at_ms", now / period * period},
            {"waiting_sequences", t.scheduler.num_seqs_waiting},
            {"running_sequences", t.scheduler.num_seqs_running},
            {"queued_prefill_tokens", t.scheduler.num_prefill_tokens_queued},
            {"queued_work_tokens", t.scheduler.num_work_tokens_queued},
            {"planned_open_completion_tokens", open_plan(t.scheduler)},
            {"computed_tokens_total", t.num_computed_tokens},
            {"finished_requests_total", t.num_finished_requests},
            {"busy_seconds_total", t.busy_seconds},
            {"steps_total", t.num_steps},
            {"work_seq", t.work_seq}};
  }
  return dump({{"replica_id", config_.replica_id},
               {"waiting_groups", l.scheduler.num_groups_waiting},
               {"running_groups", l.scheduler.num_groups_running},
               {"waiting_sequences", l.scheduler.num_seqs_waiting},
               {"running_sequences", l.scheduler.num_seqs_running},
               {"queued_prefill_tokens", l.scheduler.num_prefill_tokens_queued},
               {"queued_work_tokens", l.scheduler.num_work_tokens_queued},
               {"planned_open_completion_tokens", open_plan(l.scheduler)},
               {"computed_tokens_total", l.num_computed_tokens},
               {"finished_requests_total", l.num_finished_requests},
               {"busy_seconds_total", l.busy_seconds},
               {"work_seq", l.work_seq},
               {"kv_blocks",
                {{"total", l.blocks.num_blocks_total},
                 {"used", l.blocks.num_blocks_used},
                 {"cached", l.blocks.num_blocks_cached},
                 {"free", l.blocks.num_blocks_free}}},
               {"steps", l.num_steps},
               {"preemptions", l.num_preemptions},
               {"weight_version", l.weight_version},
               // When an update's weights began to serve (ms since the epoch; null for the
               // start-up weights): routers rank versions by it (router/fleet/replica_pool.h).
               {"weight_loaded_at_ms",
                l.weight_loaded_at_ms > 0 ? json(l.weight_loaded_at_ms) : json(nullptr)},
               {"paused", l.paused},
               {"updating_weights", l.updating},
               {"step_model", l.step_model ? step_model_json(*l.step_model) : json(nullptr)},
               {"tick", tick}});
}

nlohmann::json ReplicaServer::model_json() const {
  return {{"id", config_.served_model_name},
          {"object", "model"},
          {"created", 0},
          {"owned_by", "kvcascade"},
          {"max_model_len", engine_.config().scheduler.max_model_len}};
}

std::string ReplicaServer::models_json() const {
  return dump({{"object", "list"}, {"data", json::array({model_json()})}});
}

}  // namespace kvc
