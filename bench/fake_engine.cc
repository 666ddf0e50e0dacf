#include "bench/fake_engine.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "http/errors.h"
#include "http/sse.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;

constexpr int64_t kMaxModelLen = 32768;
constexpr int64_t kMaxCompletionTokens = 64;

std::string gauge(const std::string& name, const std::string& labels, double value,
                  const char* help) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + "{" + labels +
         "} " + std::to_string(value) + "\n";
}

// A 404 for an unknown model, in the engine's own error shape.
json unknown_model(ReplicaKind kind, const std::string& model) {
  const std::string message = "The model `" + model + "` does not exist.";
  if (kind == ReplicaKind::kVllm || kind == ReplicaKind::kSglang) {
    return {{"object", "error"},
            {"message", message},
            {"type", "NotFoundError"},
            {"param", nullptr},
            {"code", 404}};
  }
  return json::parse(http::error_body(message, "invalid_request_error"));
}

}  // namespace

FakeEngine::FakeEngine(FakeEngineOptions options) : options_(std::move(options)) {}

FakeEngine::~FakeEngine() {
  stop();
}

Result<uint16_t> FakeEngine::start(uint16_t port) {
  stop();
  server_ = std::make_unique<http::Server>(
      http::ServerLimits{},
      [this](http::Request r, std::shared_ptr<http::Responder> w) { handle(r, *w); }, 1);
  auto bound = server_->listen("127.0.0.1", port != 0 ? port : port_);
  if (bound.ok()) port_ = *bound;
  return bound;
}

void FakeEngine::stop() {
  if (!server_) return;
  server_->stop();
  accepted_before_ += server_->num_accepted();
  server_.reset();
}

void FakeEngine::set_load(FakeLoad load) {
  std::lock_guard lock(mu_);
  load_ = load;
}

void FakeEngine::set_metrics_body(std::optional<std::string> body) {
  std::lock_guard lock(mu_);
  metrics_body_ = std::move(body);
}

size_t FakeEngine::connections_accepted() const {
  return accepted_before_ + (server_ ? server_->num_accepted() : 0);
}

std::vector<std::string> FakeEngine::request_bodies() const {
  std::lock_guard lock(mu_);
  return bodies_;
}

std::string FakeEngine::metrics() const {
  std::lock_guard lock(mu_);
  if (metrics_body_) return *metrics_body_;
  const std::string model = options_.models.front();
  std::string out;
  if (options_.kind == ReplicaKind::kVllm) {
    const std::string labels = options_.legacy_metric_names
                                   ? "model_name=\"" + model + "\""
                                   : "engine=\"0\",model_name=\"" + model + "\"";
    out +=
        "# HELP python_gc_objects_collected_total Objects collected during gc\n"
        "# TYPE python_gc_objects_collected_total counter\n"
        "python_gc_objects_collected_total{generation=\"0\"} 8312.0\n";
    out += gauge("vllm:num_requests_running", labels, static_cast<double>(load_.running),
                 "Number of requests in model execution batches.");
    out += gauge("vllm:num_requests_waiting", labels, static_cast<double>(load_.waiting),
                 "Number of requests waiting to be processed.");
    out += gauge(
        options_.legacy_metric_names ? "vllm:gpu_cache_usage_perc" : "vllm:kv_cache_usage_perc",
        labels, load_.kv_usage, "KV-cache usage. 1 means 100 percent usage.");
    out += gauge("vllm:cache_config_info",
                 "block_size=\"16\",cache_dtype=\"auto\",enable_prefix_caching=\"True\"," + labels +
                     ",gpu_memory_utilization=\"0.9\",num_cpu_blocks=\"None\",num_gpu_blocks=\"" +
                     std::to_string(options_.num_gpu_blocks) + "\"",
                 1.0, "Information of the LLMEngine CacheConfig");
    out +=
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        "vllm:time_to_first_token_seconds_bucket{" +
        labels + ",le=\"+Inf\"} 0.0\nvllm:time_to_first_token_seconds_sum{" + labels + "} 0.0\n";
  } else if (options_.kind == ReplicaKind::kSglang) {
    const std::string labels = "model_name=\"" + model + "\"";
    out += gauge("sglang:num_running_reqs", labels, static_cast<double>(load_.running),
                 "The number of running requests.");
    out += gauge("sglang:num_queue_reqs", labels, static_cast<double>(load_.waiting),
                 "The number of requests in the waiting queue.");
    out += gauge("sglang:token_usage", labels, load_.kv_usage, "The token usage.");
    out += gauge("sglang:max_total_num_tokens", labels,
                 static_cast<double>(options_.max_total_num_tokens),
                 "Maximum total number of tokens in the KV cache pool.");
  }
  return out;
}

void FakeEngine::handle(const http::Request& r, http::Responder& w) {
  const std::string path = r.target.substr(0, r.target.find('?'));
  const ReplicaKind kind = options_.kind;
  const bool foreign = kind != ReplicaKind::kKvcascade;
  if (path == "/v1/completions" || path == "/v1/chat/completions") {
    if (r.method != "POST") return http::send_method_not_allowed(w, r.method, path, "POST");
    return complete(r, w, path == "/v1/chat/completions");
  }
  if (path == "/v1/models") {
    const char* owner = kind == ReplicaKind::kVllm     ? "vllm"
                        : kind == ReplicaKind::kSglang ? "sglang"
                        : kind == ReplicaKind::kOpenai ? "openai"
                                                       : "kvcascade";
    json data = json::array();
    for (const std::string& m : options_.models) {
      data.push_back({{"id", m},
                      {"object", "model"},
                      {"created", 1700000000},
                      {"owned_by", owner},
                      {"root", m},
                      {"parent", nullptr},
                      {"max_model_len", kMaxModelLen}});
    }
    return w.send(200, "application/json", json{{"object", "list"}, {"data", data}}.dump());
  }
  if (path == "/health" && kind != ReplicaKind::kOpenai) return w.send(200, "text/plain", "");
  if (path == "/metrics" &&
      (kind == ReplicaKind::kVllm || (kind == ReplicaKind::kSglang && options_.sglang_metrics))) {
    return w.send(200, "text/plain; version=0.0.4; charset=utf-8", metrics());
  }
  FakeLoad load;
  {
    std::lock_guard lock(mu_);
    load = load_;
  }
  if (kind == ReplicaKind::kSglang && path == "/get_load") {
    const json rank = {
        {"dp_rank", 0},
        {"num_reqs", load.running + load.waiting},
        {"num_waiting_reqs", load.waiting},
        {"num_tokens",
         static_cast<int64_t>(load.kv_usage * static_cast<double>(options_.max_total_num_tokens))}};
    return w.send(200, "application/json", json::array({rank}).dump());
  }
  if (kind == ReplicaKind::kSglang && path == "/get_model_info") {
    const std::string& m = options_.models.front();
    return w.send(200, "application/json",
                  json{{"model_path", m}, {"tokenizer_path", m}, {"is_generation", true}}.dump());
  }
  if (!foreign && path == "/v1/info") {
    return w.send(200, "application/json",
                  json{{"replica_id", options_.id},
                       {"model", options_.models.front()},
                       {"hash_model", options_.models.front()},
                       {"block_size", 16}}
                      .dump());
  }
  if (!foreign && path == "/v1/load") {
    return w.send(200, "application/json",
                  json{{"queued_prefill_tokens", 0},
                       {"running_sequences", load.running},
                       {"waiting_sequences", load.waiting}}
                      .dump());
  }
  // FastAPI's 404 (vLLM, SGLang); the OpenAI-style one otherwise.
  if (foreign) return w.send(404, "application/json", R"({"detail":"Not Found"})");
  http::send_error(w, 404, "no such path: " + path, "not_found_error");
}

void FakeEngine::complete(const http::Request& r, http::Responder& w, bool chat) {
  const json body = json::parse(r.body, nullptr, false);
  if (!body.is_object() || !body.contains("model") || !body["model"].is_string()) {
    return http::send_error(w, 400, "the body must be a JSON object with a model");
  }
  const std::string model = body["model"].get<std::string>();
  if (std::find(options_.models.begin(), options_.models.end(), model) == options_.models.end()) {
    return w.send(404, "application/json", unknown_model(options_.kind, model).dump());
  }
  const int64_t n = completions_.fetch_add(1);
  if (const int status = completion_status_.load(); status != 0) {
    return http::send_error(w, status, "fake engine failure", "server_error");
  }
  if (options_.record_bodies) {
    std::lock_guard lock(mu_);
    bodies_.push_back(r.body);
  }
  // About 4 bytes per token, as a BPE tokenizer of English text: a completion's prompt string,
  // else the body (a chat's messages are most of it). Not the prompt serialised again: at 2 KB
  // prompts that dump was ~5% of `bench router`'s process, CPU the proxies under test lost.
  const auto prompt = body.find("prompt");
  const size_t prompt_bytes = !chat && prompt != body.end() && prompt->is_string()
                                  ? prompt->get_ref<const std::string&>().size()
                                  : r.body.size();
  const int64_t prompt_tokens = static_cast<int64_t>(prompt_bytes / 4) + 1;
  int64_t max_tokens = 16;
  if (auto it = body.find("max_tokens"); it != body.end() && it->is_number_integer()) {
    max_tokens = std::clamp<int64_t>(it->get<int64_t>(), 1, kMaxCompletionTokens);
  }
  const json usage = {{"prompt_tokens", prompt_tokens},
                      {"total_tokens", prompt_tokens + max_tokens},
                      {"completion_tokens", max_tokens},
                      {"prompt_tokens_details", nullptr}};
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + options_.id + "-" + std::to_string(n);
  auto choice = [&](const std::string& text, const json& finish) {
    if (chat) {
      return json{{"index", 0},
                  {"delta", {{"role", "assistant"}, {"content", text}}},
                  {"logprobs", nullptr},
                  {"finish_reason", finish}};
    }
    return json{{"index", 0},
                {"text", text},
                {"logprobs", nullptr},
                {"finish_reason", finish},
                {"stop_reason", nullptr}};
  };
  json reply = {{"id", id},
                {"object", chat ? "chat.completion" : "text_completion"},
                {"created", 1700000000},
                {"model", model}};
  if (!body.value("stream", false)) {
    std::string text;
    for (int64_t i = 0; i < max_tokens; ++i)
      text += " ok";
    json c = choice(text, "length");
    if (chat) {
      c.erase("delta");
      c["message"] = {{"role", "assistant"}, {"content", text}, {"tool_calls", json::array()}};
    }
    reply["choices"] = json::array({c});
    reply["usage"] = usage;
    return w.send(200, "application/json", reply.dump());
  }
  reply["object"] = chat ? "chat.completion.chunk" : "text_completion";
  w.start_stream(200, "text/event-stream; charset=utf-8");
  for (int64_t i = 0; i < max_tokens; ++i) {
    reply["choices"] = json::array({choice(" ok", i + 1 == max_tokens ? json("length") : json())});
    w.write(http::sse_event(reply.dump()));
  }
  if (body.contains("stream_options")) {  // include_usage: a last chunk with no choices
    reply["choices"] = json::array();
    reply["usage"] = usage;
    w.write(http::sse_event(reply.dump()));
  }
  w.write(http::sse_event("[DONE]"));
  w.end();
}

}  // namespace kvc::bench
