#include "router/proxy.h"

#include <algorithm>
#include <map>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "api/key_space.h"
#include "api/step_model.h"
#include "http/auth.h"
#include "http/errors.h"
#include "http/sse.h"
#include "router/fleet/replica_auth.h"
#include "router/proxied_request.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvc {

using json = nlohmann::json;

// The policy counts steps per request in the reference step's work tokens; the replicas' step
// models are compared at the same step.
static_assert(kReferenceStepWorkTokens == kReferencePrefillTokens + kReferenceDecodeSeqs);

namespace {

// The request body with its cache_salt replaced; nullopt if it is not a JSON object (it was
// parsed once already, so this does not happen). Strings were valid UTF-8 when parsed, so the
// prompt's bytes survive the round trip and the replica hashes what the router hashed.
std::optional<std::string> with_cache_salt(const std::string& body, const std::string& salt) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  j["cache_salt"] = salt;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

RouterServer::RouterServer(ReplicaPool& pool, FleetIndexes& indexes, http::Client& client,
                           const Clock& clock, RouterConfig config, prometheus::Registry* registry,
                           metrics::RouterMetrics* metrics)
    : pool_(pool),
      indexes_(indexes),
      client_(client),
      config_(std::move(config)),
      policy_(make_policy(config_.policy)),
      siblings_(clock, config_.siblings),
      registry_(registry),
      metrics_(metrics),
      stats_(metrics),
      clock_(clock),
      rollout_(std::make_unique<WeightRollout>(pool_, client_,
                                               config_.replica_admin_api_key.empty()
                                                   ? config_.replica_api_key
                                                   : config_.replica_admin_api_key)) {}

void RouterServer::handle(http::Request request, std::shared_ptr<http::Responder> responder) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool probe = path == "/livez" || path == "/readyz" || path == "/health";
  if (path.starts_with("/router/admin/")) {
    if (!authorize_admin(request, *responder)) return;  // the admin key, never a client's
  } else if (!probe && !http::authorize(request, config_.api_keys, *responder)) {
    return;
  }
  auto only = [&](std::string_view method) {
    if (http::method_allowed(request.method, method)) return true;
    http::send_method_not_allowed(*responder, request.method, path, method);
    return false;
  };
  if (path == "/v1/completions") {
    if (only("POST")) route(Endpoint::kCompletions, std::move(request), responder);
  } else if (path == "/v1/chat/completions") {
    if (only("POST")) route(Endpoint::kChatCompletions, std::move(request), responder);
  } else if (path == "/livez") {
    // The process serves: a liveness probe must not restart routers during a replica outage.
    if (only("GET")) responder->send(200, "application/json", R"({"status":"ok"})");
  } else if (path == "/readyz" || path == "/health") {
    if (only("GET")) send_readiness(*responder);
  } else if (path == "/v1/models" || path.starts_with("/v1/models/")) {
    if (!only("GET")) return;
    // Each model served by a healthy replica, with the smallest context its replicas state
    // (vLLM's max_model_len; a replica that states none is not counted).
    std::map<std::string, std::optional<int64_t>> names;
    for (const ReplicaView& r : pool_.snapshot()) {
      if (!r.healthy) continue;
      for (const std::string& m : r.models) {
        std::optional<int64_t>& context = names[m];
        if (r.max_model_len)
          context = std::min(context.value_or(*r.max_model_len), *r.max_model_len);
      }
    }
    auto model = [&names](const std::string& n) {
      json m = {{"id", n}, {"object", "model"}, {"created", 0}, {"owned_by", "kvcascade"}};
      if (const auto context = names.at(n)) m["max_model_len"] = *context;
      return m;
    };
    if (path != "/v1/models") {  // OpenAI's GET /v1/models/{model} (the SDK's models.retrieve)
      const std::optional<std::string> id = http::path_rest_decoded(path, "/v1/models/");
      if (!id || !names.contains(*id)) {
        http::send_error(*responder, 404,
                         "model '" + id.value_or("") + "' is not served by any healthy replica",
                         "invalid_request_error", "model");
        return;
      }
      responder->send(200, "application/json", model(*id).dump());
      return;
    }
    json data = json::array();
    for (const auto& [n, context] : names)
      data.push_back(model(n));
    responder->send(200, "application/json", json{{"object", "list"}, {"data", data}}.dump());
  } else if (path == "/metrics" && registry_) {
    if (!only("GET")) return;
    if (metrics_) {
      const std::vector<ReplicaView> views = pool_.snapshot();
      std::lock_guard lock(indexes_.mu);
      for (const ReplicaView& r : views) {
        metrics_->router_index_blocks.Add({{"replica", r.replica_id}})
            .Set(static_cast<double>(indexes_.num_blocks_locked(r.index)));
        // Once its id is known (before, the id is its address: a series that would stay).
        if (r.kind != ReplicaKind::kAuto) stats_.add_upstream_error_series(r.replica_id);
      }
    }
    responder->send(200, metrics::kContentType, metrics::expose(*registry_));
  } else if (path == "/router/admin/weights") {
    if (only("POST")) rollout_->handle(request, responder);
  } else if (path == "/router/state") {
    if (only("GET")) responder->send(200, "application/json", state_json());
  } else {
    http::send_error(*responder, 404, "no such path: " + path, "not_found_error");
  }
}

bool RouterServer::authorize_admin(const http::Request& request, http::Responder& responder) {
  if (!config_.admin_disabled()) {
    return http::authorize(request, config_.admin_api_keys, responder,
                           "admin API key (Authorization: Bearer KEY of the router's "
                           "--admin-api-key)");
  }
  http::send_error(responder, 403,
                   "the router's admin endpoints are disabled: this router has client API keys or "
                   "tenant isolation, and a client key may not administer the fleet; start it "
                   "with --admin-api-key (or --admin-api-key-file) and send that key",
                   "permission_error");
  return false;
}

void RouterServer::send_readiness(http::Responder& responder) {
  size_t healthy = 0;
  for (const ReplicaView& r : pool_.snapshot())
    healthy += r.healthy;
  responder.send(
      healthy ? 200 : 503, "application/json",
      json{{"status", healthy ? "ok" : "no healthy replica"}, {"healthy_replicas", healthy}}
          .dump());
}

namespace {

bool serves(const ReplicaView& r, const std::string& model) {
  return std::find(r.models.begin(), r.models.end(), model) != r.models.end();
}

// The replicas serving `model` (in place), counting in `unreached` those dropped that have no
// models known yet (not reached since they joined).
std::vector<ReplicaView> serving(std::vector<ReplicaView> all, const std::string& model,
                                 size_t& unreached) {
  unreached = 0;
  std::erase_if(all, [&](const ReplicaView& r) {
    unreached += r.models.empty() ? 1 : 0;
    return !serves(r, model);
  });
  return all;
}

// The request as the router routes it. A body a kvcascade replica would refuse may still suit
// another engine (token ids of a real tokenizer, image parts, logprobs): when a foreign replica
// serves its model it is parsed for routing only, and that engine judges the rest.
// Chat requests are rendered with the template of a kvcascade replica serving the model, so they
// are hashed as that replica will tokenize them.
std::variant<OpenAiRequest, ApiError> parse_for_routing(Endpoint endpoint, JsonBody body,
                                                        const ApiLimits& limits,
                                                        const std::vector<ReplicaView>& all) {
  ChatTemplateFor template_for;
  if (endpoint == Endpoint::kChatCompletions) {
    template_for = [&all](const std::string& model) -> std::shared_ptr<const ChatTemplate> {
      for (const ReplicaView& r : all) {
        if (r.chat_template && serves(r, model)) return r.chat_template;
      }
      return nullptr;
    };
  }
  auto full = parse_openai_request(endpoint, body, limits, template_for);
  if (std::holds_alternative<OpenAiRequest>(full)) return full;
  auto loose = parse_openai_request(endpoint, body, limits, template_for, ParseMode::kRouting);
  const auto* req = std::get_if<OpenAiRequest>(&loose);
  if (req == nullptr) return full;
  const bool foreign = std::any_of(all.begin(), all.end(), [&](const ReplicaView& r) {
    return r.kind != ReplicaKind::kKvcascade && serves(r, req->model);
  });
  return foreign ? loose : full;
}

}  // namespace

void RouterServer::route(Endpoint endpoint, http::Request request,
                         std::shared_ptr<http::Responder> responder) {
  stats_.note_request();
  std::vector<ReplicaView> pool = pool_.snapshot();
  auto parsed = parse_for_routing(endpoint, request.body, config_.api, pool);
  if (auto* e = std::get_if<ApiError>(&parsed)) {
    http::send_error(*responder, e->status, e->message, "invalid_request_error",
                     e->param.empty() ? std::nullopt : std::optional<std::string_view>(e->param));
    return;
  }
  const OpenAiRequest& req = std::get<OpenAiRequest>(parsed);
  // The salt the prompt is hashed with here and at the replica, and the group that pins siblings.
  std::string cache_salt = req.cache_salt;
  std::optional<std::string> group = req.group;
  if (config_.tenant_isolation != TenantIsolation::kOff) {
    const bool by_key = config_.tenant_isolation == TenantIsolation::kApiKey;
    const std::optional<std::string> tenant =
        by_key ? http::bearer_token(request) : request.header(config_.tenant_header);
    if (!tenant || tenant->empty()) {
      if (by_key) {
        http::send_error(*responder, 401,
                         "tenant isolation needs an API key (Authorization: Bearer ...)",
                         "authentication_error");
      } else {
        http::send_error(*responder, 400, "missing tenant header " + config_.tenant_header);
      }
      return;
    }
    cache_salt = tenant_cache_salt(config_.tenant_isolation, *tenant, req.cache_salt);
    if (group) group = cache_salt + "/" + *group;  // a group id pins only within its tenant
    std::optional<std::string> body = with_cache_salt(request.body, cache_salt);
    if (!body) {
      http::send_error(*responder, 400, "the body must be a JSON object");
      return;
    }
    request.body = std::move(*body);
  }
  size_t unknown = 0;
  const std::vector<ReplicaView> replicas = serving(std::move(pool), req.model, unknown);
  if (replicas.empty()) {
    // A replica not reached yet (none of its models known) may serve it: a 503, which clients
    // retry, not a 404 (a router started before its replicas answered 404 to everything).
    if (unknown > 0) {
      http::send_error(*responder, 503,
                       "no replica serving model '" + req.model + "' is reachable (" +
                           std::to_string(unknown) + " replica(s) not reached yet)",
                       "server_error");
    } else {
      http::send_error(*responder, 404, "model '" + req.model + "' is not served by any replica",
                       "invalid_request_error", "model");
    }
    return;
  }
  auto attempt = std::make_shared<ProxiedRequest>(*this);
  attempt->responder = responder;
  attempt->watch_client();
  attempt->stream = req.stream;
  attempt->begun = clock_.now();
  attempt->prompt_bytes = req.prompts.front().size();
  // Route by the first prompt: a batch is one exchange with one replica (docs/architecture.md).
  // Hashed as a kvcascade replica of the model hashes it (its KV events are in that key space);
  // the router's own entries for foreign replicas can use any seed, so they use the same one.
  auto seed_from = std::find_if(replicas.begin(), replicas.end(), [](const ReplicaView& r) {
    return r.kind == ReplicaKind::kKvcascade && !r.hash_model.empty();
  });
  const ReplicaView& any = seed_from != replicas.end() ? *seed_from : replicas.front();
  // A prompt given as token ids is fed to the model as is: hashed as the bytes its tokens stand
  // for, from the replica's token table (kTokenIds; with the byte tokenizer the ids are bytes).
  const std::vector<int32_t>* ids = req.prompt_token_ids.empty() || req.prompt_token_ids[0].empty()
                                        ? nullptr
                                        : &req.prompt_token_ids[0];
  std::optional<std::string> id_bytes;
  if (ids != nullptr && any.token_table) id_bytes = any.token_table->prompt_bytes(*ids);
  // A completion is hashed with the special tokens the replica's tokenizer puts around it (BOS).
  const bool wrapped = ids == nullptr && endpoint == Endpoint::kCompletions &&
                       req.add_special_tokens &&
                       (!any.completion_prefix.empty() || !any.completion_suffix.empty());
  const std::string wrapped_prompt =
      wrapped ? completion_bytes(any.completion_prefix, req.prompts.front(), any.completion_suffix)
              : std::string();
  const std::string& prompt = id_bytes ? *id_bytes : wrapped ? wrapped_prompt : req.prompts.front();
  const std::string& hash_model = seed_from != replicas.end() ? any.hash_model : req.model;
  const BlockHash seed = chain_seed(hash_model, cache_salt);
  attempt->hashes = hash_blocks(seed, prompt, any.block_size);
  // The whole prompt's identity, for the sibling tracker, from the chain already computed (it
  // covers the model and the salt): the last full block's hash seeds the bytes after it.
  const size_t tail = prompt.size() % static_cast<size_t>(any.block_size);
  const uint64_t prompt_hash =
      XXH3_64bits_withSeed(prompt.data() + prompt.size() - tail, tail,
                           (attempt->hashes.empty() ? seed : attempt->hashes.back()).value);
  attempt->sibling_key = SiblingTracker::key_for(group, prompt_hash);
  attempt->debug_headers = config_.debug_headers;
  attempt->routing_key = request.header(config_.routing_key_header);
  if (!attempt->routing_key) attempt->routing_key = request.header("x-smg-routing-key");
  const std::optional<std::string> pinned_version = request.header("x-kvcascade-weight-version");
  attempt->upstream_body = std::move(request.body);
  attempt->request = std::move(request);

  MatchResult exact, guessed, routed;
  std::vector<size_t> index_blocks(replicas.size());  // each replica's, by its place in replicas
  {
    std::lock_guard lock(indexes_.mu);
    exact = indexes_.exact.match(attempt->hashes);
    guessed = indexes_.approx.match(attempt->hashes);
    routed = indexes_.routed.match(attempt->hashes);
    for (size_t i = 0; i < replicas.size(); ++i)
      index_blocks[i] = indexes_.num_blocks_locked(replicas[i].index);
  }
  if (exact.near_miss() || guessed.near_miss()) {
    stats_.note_near_miss();
  }
  // Weight versions: a pinned version takes only its replicas; "latest" takes only replicas at the
  // newest version among the healthy ones (the one last loaded anywhere, as the replicas report:
  // ReplicaView::weight_version_order), except the replica a group already went to (a group is
  // never split across versions). Replicas without a version (other engines) always qualify.
  uint64_t newest = 0;
  for (const ReplicaView& r : replicas)
    if (r.healthy) newest = std::max(newest, r.weight_version_order);
  std::optional<uint32_t> group_home;
  if (group && !pinned_version && config_.weight_version_policy == "latest") {
    std::lock_guard lock(policy_mu_);
    group_home = siblings_.lookup(attempt->sibling_key);
  }
  auto version_ok = [&](const ReplicaView& r) {
    if (pinned_version) return r.weight_version == *pinned_version;
    if (config_.weight_version_policy != "latest" || r.weight_version_order == 0) return true;
    return r.weight_version_order >= newest || (group_home && *group_home == r.index);
  };
  attempt->candidates.reserve(replicas.size());
  for (size_t i = 0; i < replicas.size(); ++i) {
    const ReplicaView& r = replicas[i];
    if (!version_ok(r)) continue;
    if (r.paused) attempt->paused.push_back(r.index);
    Candidate c;
    c.replica = r.index;
    c.id = r.replica_id;
    c.healthy = r.healthy;
    c.matched_blocks = std::max(
        {exact.blocks_for(r.index), guessed.blocks_for(r.index), routed.blocks_for(r.index)});
    // Without a load report (a plain OpenAI server, or metrics that failed) the prompt tokens
    // this router has in flight there stand in for its queue.
    c.queued_prefill_tokens = r.load_reported ? r.queued_prefill_tokens : r.in_flight_prompt_bytes;
    c.running_sequences = r.running_sequences;
    c.waiting_sequences = r.waiting_sequences;
    c.in_flight_requests = r.in_flight;
    c.kv_usage = r.kv_usage.value_or(0.0);
    c.routed_work = r.routed_work;
    c.unacked_work = r.unacked_work;
    c.unacked_sequences = r.unacked_sequences;
    c.busy = r.busy;
    c.load_busy = r.load_busy;
    if (r.step_model) {
      c.seconds_per_token = seconds_per_work_token(*r.step_model);
      if (!c.seconds_per_token) {
        c.uncertain_seconds_per_token = uncertain_seconds_per_work_token(*r.step_model);
      }
    }
    c.index_blocks = index_blocks[i];
    attempt->candidates.push_back(std::move(c));
  }
  if (attempt->candidates.empty() && pinned_version) {
    std::string have;
    for (const ReplicaView& r : replicas)
      if (!r.weight_version.empty()) have += (have.empty() ? "" : ", ") + r.weight_version;
    http::send_error(*responder, 409,
                     "no replica serves model '" + req.model + "' at weight version '" +
                         *pinned_version + "' (serving: " + (have.empty() ? "none" : have) + ")",
                     "invalid_request_error");
    return;
  }
  RouteRequest& rr = attempt->route;
  rr.blocks = attempt->hashes;
  rr.prompt_bytes = static_cast<int64_t>(prompt.size());
  rr.block_size = any.block_size;
  rr.n = req.n * static_cast<int32_t>(req.prompts.size());
  // A chat request without max_tokens is bounded by the context only: the fleet's plan for one,
  // within what this router lets a request ask for.
  rr.max_tokens = req.open_completion()
                      ? std::min<int64_t>(planned_open_completion(replicas), config_.api.max_tokens)
                      : req.max_tokens;
  rr.group_size = req.group_size;
  rr.group = group;
  rr.fleet_request_work = pool_.fleet_request_work();
  rr.explain = config_.debug_headers;
  rr.affinity_key = prompt.substr(
      0, static_cast<size_t>(any.block_size) * static_cast<size_t>(config_.affinity_key_blocks));
  if (!attempt->start()) {
    http::send_error(*responder, 503, "no healthy replica serves model '" + req.model + "'",
                     "server_error");
  }
}

std::string RouterServer::state_json() {
  json replicas = json::array();
  const std::vector<ReplicaView> views = pool_.snapshot();  // before the index lock (lock order)
  const std::optional<double> mean_request = pool_.fleet_request_work();
  std::lock_guard index_lock(indexes_.mu);
  for (const ReplicaView& r : views) {
    json load = {{"reported", r.load_reported},
                 {"running", r.running_sequences},
                 {"waiting", r.waiting_sequences},
                 {"queued_prefill_tokens", r.queued_prefill_tokens},
                 {"in_flight_prompt_bytes", r.in_flight_prompt_bytes},
                 {"pending_prefill_tokens", r.pending_prefill_tokens}};
    if (r.kv_usage) load["kv_usage"] = *r.kv_usage;
    if (r.routed_work) load["routed_work_tokens"] = *r.routed_work;
    if (r.busy) load["busy"] = *r.busy;
    if (r.load_busy) load["load_busy"] = *r.load_busy;
    if (r.step_model) load["step_model"] = step_model_json(*r.step_model);
    if (r.kv_capacity_tokens) load["kv_capacity_tokens"] = *r.kv_capacity_tokens;
    if (!r.load_error.empty()) load["error"] = r.load_error;
    // A replica that went down keeps its last report (nothing routes to it): say it is old.
    if (!r.healthy) load["stale"] = true;
    json replica = {{"index", r.index},
                    {"replica_id", r.replica_id},
                    {"address", r.host + ":" + std::to_string(r.port)},
                    {"kind", replica_kind_name(r.kind)},
                    {"models", r.models},
                    {"healthy", r.healthy},
                    {"exact", r.exact},
                    {"kv_event_resyncs", r.kv_event_resyncs},
                    {"block_size", r.block_size},
                    {"in_flight", r.in_flight},
                    {"weight_version", r.weight_version},
                    {"paused", r.paused},
                    {"load", std::move(load)},
                    {"index_blocks", indexes_.exact.num_blocks(r.index)},
                    {"approx_blocks", indexes_.approx.num_blocks(r.index)}};
    if (!r.error.empty()) replica["error"] = r.error;
    if (r.weight_loaded_at_ms) replica["weight_loaded_at_ms"] = *r.weight_loaded_at_ms;
    replicas.push_back(std::move(replica));
  }
  json state{{"policy", config_.policy},
             {"weight_version_policy", config_.weight_version_policy},
             {"replicas", replicas}};
  if (mean_request) state["fleet_request_work_tokens"] = *mean_request;
  state["planned_open_completion_tokens"] = planned_open_completion(views);
  stats_.to_json(state);
  return state.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvc
