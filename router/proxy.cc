#include "router/proxy.h"

#include <algorithm>
#include <set>
#include <span>

#include <nlohmann/json.hpp>

#include "api/key_space.h"
#include "api/step_model.h"
#include "http/auth.h"
#include "http/errors.h"
#include "http/sse.h"
#include "router/fleet/replica_auth.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvc {

using json = nlohmann::json;

constexpr size_t kMaxBufferedBody = size_t{8} << 20;

// One client request on its way to a replica, possibly over several tries: choose a replica
// (do_choose), send it there (do_try), relay its answer (on_headers, on_chunk) and, when it ends
// (on_done), finish, retry on another replica or end with an error. Callbacks hold it by
// shared_ptr; it holds nothing that holds it.
class RouterServer::ProxiedRequest : public std::enable_shared_from_this<ProxiedRequest> {
 public:
  explicit ProxiedRequest(RouterServer& server) : s_(server) {}

  // Ends the exchange in flight as soon as the client leaves.
  void watch_client();
  // Chooses the first replica and sends; false: none is healthy (nothing was sent).
  bool start();

  http::Request request;     // its body moved to upstream_body
  http::Body upstream_body;  // the client's body, shared by every try (never copied)
  std::shared_ptr<http::Responder> responder;
  bool stream = false;
  std::vector<BlockHash> hashes;
  std::string sibling_key;
  std::vector<Candidate> candidates;
  // Candidates whose admission an operator paused (ReplicaView::paused): left out while another
  // can take the request (do_choose).
  std::vector<uint32_t> paused;
  RouteRequest route;  // its blocks view `hashes`
  std::vector<uint32_t> tried;
  uint32_t replica = 0;
  std::string replica_id, reason;
  size_t matched_bytes = 0;
  bool debug_headers = false;  // RouterConfig::debug_headers
  bool sent_anything = false;  // bytes reached the client: no more retries
  int status = 0;
  // This try's answer was late: no response header, or a body gone silent, within its timeout
  // after the request was written (http::StreamOptions::on_timeout).
  bool timed_out = false;
  // A non-streaming request's response is buffered and sent whole (one hand-off to the client's
  // session instead of one per piece, and a replica failing mid-body can still be retried); past
  // kMaxBufferedBody it is streamed through.
  std::string content_type;
  std::optional<std::string> weight_version;  // the replica's x-kvcascade-weight-version
  std::string body;
  Clock::TimePoint begun{};
  size_t prompt_bytes = 0;
  std::optional<std::string> routing_key;  // RouterConfig::routing_key_header
  // This try's uncached prompt tokens, pending at the replica until its answer starts
  // (ReplicaView::pending_prefill_tokens); 0 once handed back.
  int64_t pending_prefill = 0;
  // The work the policy counted for this try (Policy::record), in the replica's routed work
  // until a load report has it (ReplicaPool::note_routed_work); its id there (0: none).
  double counted_work = 0;
  uint64_t counted_work_id = 0;

 private:
  bool do_choose();
  void do_try();
  void on_headers(int upstream_status, const http::Headers& upstream);
  bool on_chunk(std::string_view bytes);
  void on_done(const Status& s, const std::shared_ptr<http::Cancellation>& cancellation,
               int64_t prompt_size);
  void prefill_started();
  void count_route();
  void start_client_stream();
  http::Headers client_headers() const;

  RouterServer& s_;
  // Shared with the client-gone callback, which may run on another thread.
  std::mutex mu_;
  bool abandoned_ = false;                            // the client left: no more tries
  std::shared_ptr<http::Cancellation> cancellation_;  // ends the try in flight
};

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
  } else if (path == "/v1/models") {
    if (!only("GET")) return;
    std::set<std::string> names;
    for (const ReplicaView& r : pool_.snapshot())
      if (r.healthy) names.insert(r.models.begin(), r.models.end());
    json data = json::array();
    for (const std::string& n : names) {
      data.push_back({{"id", n}, {"object", "model"}, {"created", 0}, {"owned_by", "kvcascade"}});
    }
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
  if (!config_.admin_api_keys.empty()) {
    const std::optional<std::string> token = http::bearer_token(request);
    if (token && http::key_matches(*token, config_.admin_api_keys)) return true;
    http::send_error(responder, 401,
                     "missing or wrong admin API key (Authorization: Bearer KEY of the router's "
                     "--admin-api-key)",
                     "authentication_error");
    return false;
  }
  // No admin key: open only where nobody is told apart (no client keys, no tenants); otherwise
  // any client, every tenant included, could swap or abort the whole fleet's weights.
  if (config_.api_keys.empty() && config_.tenant_isolation == TenantIsolation::kOff) return true;
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

// The replicas serving `model`.
std::vector<ReplicaView> serving(std::vector<ReplicaView> all, const std::string& model) {
  std::erase_if(all, [&](const ReplicaView& r) {
    return std::find(r.models.begin(), r.models.end(), model) == r.models.end();
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
        if (r.chat_template &&
            std::find(r.models.begin(), r.models.end(), model) != r.models.end()) {
          return r.chat_template;
        }
      }
      return nullptr;
    };
  }
  auto full = parse_openai_request(endpoint, body, limits, template_for);
  if (std::holds_alternative<OpenAiRequest>(full)) return full;
  auto loose = parse_openai_request(endpoint, body, limits, template_for, ParseMode::kRouting);
  const auto* req = std::get_if<OpenAiRequest>(&loose);
  if (req == nullptr) return full;
  const std::vector<ReplicaView> replicas = serving(all, req->model);
  const bool foreign = std::any_of(replicas.begin(), replicas.end(), [](const ReplicaView& r) {
    return r.kind != ReplicaKind::kKvcascade;
  });
  return foreign ? loose : full;
}

}  // namespace

void RouterServer::route(Endpoint endpoint, http::Request request,
                         std::shared_ptr<http::Responder> responder) {
  stats_.note_request();
  const std::vector<ReplicaView> pool = pool_.snapshot();
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
  const std::vector<ReplicaView> replicas = serving(pool, req.model);
  if (replicas.empty()) {
    http::send_error(*responder, 404, "model '" + req.model + "' is not served by any replica",
                     "invalid_request_error", "model");
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
  {
    std::lock_guard lock(indexes_.mu);
    exact = indexes_.exact.match(attempt->hashes);
    guessed = indexes_.approx.match(attempt->hashes);
    routed = indexes_.routed.match(attempt->hashes);
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
  for (const ReplicaView& r : replicas) {
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
    if (r.step_model) c.seconds_per_token = seconds_per_work_token(*r.step_model);
    {
      std::lock_guard lock(indexes_.mu);
      c.index_blocks = indexes_.num_blocks_locked(r.index);
    }
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
  rr.max_tokens = req.max_tokens;
  rr.group_size = req.group_size;
  rr.group = group;
  rr.fleet_request_work = pool_.fleet_request_work();
  rr.affinity_key = prompt.substr(
      0, static_cast<size_t>(any.block_size) * static_cast<size_t>(config_.affinity_key_blocks));
  if (!attempt->start()) {
    http::send_error(*responder, 503, "no healthy replica serves model '" + req.model + "'",
                     "server_error");
  }
}

void RouterServer::ProxiedRequest::watch_client() {
  // A client that leaves ends the exchange in flight at once: the replica sees the connection
  // close and frees the group. (A non-streaming reply sends no byte before the generation is done,
  // so waiting for one to find the client gone would let the replica generate to the end.)
  responder->on_client_gone([weak = weak_from_this()] {
    auto a = weak.lock();
    if (!a) return;
    std::shared_ptr<http::Cancellation> in_flight;
    {
      std::lock_guard lock(a->mu_);
      a->abandoned_ = true;
      in_flight = a->cancellation_;
    }
    if (in_flight) in_flight->cancel("the client went away");
  });
}

bool RouterServer::ProxiedRequest::start() {
  if (!do_choose()) return false;
  do_try();
  return true;
}

// Chooses among the candidates not tried yet (health re-read on a retry): an explicit routing
// key first, then a sibling pin (policies that keep siblings together), then the policy.
// A paused replica (POST /v1/admin/pause: it admits nothing until resumed) is left out while
// another candidate can take the request, which would otherwise wait there; the replica a group
// was placed on stays eligible (its members start together, on one version). With every healthy
// candidate paused the request goes to one and waits there, as it always did.
bool RouterServer::ProxiedRequest::do_choose() {
  std::vector<ReplicaView> now;
  if (!tried.empty()) now = s_.pool_.snapshot();  // a retry: health may have changed
  for (Candidate& c : candidates) {
    if (std::find(tried.begin(), tried.end(), c.replica) != tried.end()) c.healthy = false;
    if (!now.empty()) {
      auto it = std::find_if(now.begin(), now.end(), [&](auto& v) { return v.index == c.replica; });
      c.healthy = c.healthy && it != now.end() && it->healthy;
    }
  }
  if (std::none_of(candidates.begin(), candidates.end(), [](auto& c) { return c.healthy; })) {
    return false;
  }
  if (!now.empty()) {  // a retry: pauses may have changed too
    paused.clear();
    for (const ReplicaView& v : now)
      if (v.paused) paused.push_back(v.index);
  }
  auto is_paused = [&](const Candidate& c) {
    return std::find(paused.begin(), paused.end(), c.replica) != paused.end();
  };
  // What this choice may take: the candidates, less the paused ones while others can serve
  // (then a copy: a retry decides again; none is made while nothing is paused).
  std::vector<Candidate> unpaused_copy;
  std::span<const Candidate> open = candidates;
  RouteDecision d;
  const Candidate* chosen = nullptr;  // in `open`
  {
    std::lock_guard lock(s_.policy_mu_);  // the policy's state and the sibling tracker
    const bool pins = s_.policy_->pins_siblings();
    const std::optional<uint32_t> pin =
        !routing_key && pins ? s_.siblings_.lookup(sibling_key) : std::nullopt;
    const bool unpaused = !paused.empty() && std::any_of(candidates.begin(), candidates.end(),
                                                         [&](const Candidate& c) {
                                                           return c.healthy && !is_paused(c);
                                                         });
    if (unpaused) {
      unpaused_copy = candidates;
      for (Candidate& c : unpaused_copy) {
        const bool group_home = route.group && pin && *pin == c.replica;
        if (is_paused(c) && !group_home) c.healthy = false;
      }
      open = unpaused_copy;
    }
    bool decided = false;
    if (routing_key) {
      d = route_by_key(*routing_key, open);
      decided = true;
    } else if (pin) {
      for (const Candidate& c : open) {
        if (c.replica == *pin && c.healthy) {
          d = {c.replica, "sibling_pinned"};
          decided = true;
        }
      }
    }
    if (!decided) {
      d = s_.policy_->choose(route, open);
      if (pins) s_.siblings_.record(sibling_key, d.replica);
    }
    const Candidate* previous = nullptr;  // a retry: the replica whose try failed
    for (const Candidate& c : open) {
      if (c.replica == d.replica) chosen = &c;
      if (!tried.empty() && c.replica == tried.back()) previous = &c;
    }
    if (previous != nullptr) {
      counted_work = s_.policy_->retried(route, *previous, *chosen);
    } else {
      counted_work = s_.policy_->record(route, *chosen);
    }
  }
  if (!tried.empty()) d.reason = "retry";
  replica = d.replica;
  reason = d.reason;
  replica_id = chosen->id;
  matched_bytes = chosen->matched_blocks * static_cast<size_t>(route.block_size);
  tried.push_back(d.replica);
  return true;
}

void RouterServer::ProxiedRequest::count_route() {
  s_.stats_.note_routed(replica_id, reason);
  if (s_.metrics_ && tried.size() == 1 && prompt_bytes > 0) {
    s_.metrics_->router_prefix_match_ratio_all.Observe(
        std::min(1.0, static_cast<double>(matched_bytes) / static_cast<double>(prompt_bytes)));
  }
}

// Sends the request to the chosen replica.
void RouterServer::ProxiedRequest::do_try() {
  // Made before the exchange starts, so that the client leaving at any moment ends it.
  auto cancellation = std::make_shared<http::Cancellation>();
  {
    std::lock_guard lock(mu_);
    if (abandoned_) return;  // the client left between two tries
    cancellation_ = cancellation;
  }
  auto view = s_.pool_.get(replica);
  if (view) {
    // Approximate mode (a replica that publishes no KV events): remember what we sent it. Exact
    // mode: until its KV events say so (FleetIndexes::routed).
    std::lock_guard lock(s_.indexes_.mu);
    (void)(view->exact ? s_.indexes_.routed : s_.indexes_.approx).insert(replica, hashes);
  }
  count_route();
  const auto prompt_size = static_cast<int64_t>(prompt_bytes);
  pending_prefill = std::max<int64_t>(0, prompt_size - static_cast<int64_t>(matched_bytes));
  // Ended if the replica is found dead.
  s_.pool_.begin_request(replica, cancellation, prompt_size, pending_prefill);
  counted_work_id = s_.pool_.note_routed_work(replica, counted_work, route.n);
  if (!view) {
    s_.pool_.forget_routed_work(replica, counted_work_id);
    s_.pool_.end_request(replica, false, cancellation, prompt_size, pending_prefill);
    pending_prefill = 0;
    if (!do_choose()) {
      http::send_error(*responder, 503, "no healthy replica left", "server_error");
    } else {
      s_.stats_.note_retry();
      do_try();
    }
    return;
  }
  http::Headers headers;
  for (const char* name : {"content-type", "accept"}) {
    if (auto v = request.header(name)) headers.emplace_back(name, *v);
  }
  for (auto& h : replica_auth_headers(s_.config_.replica_api_key))
    headers.push_back(std::move(h));
  status = 0;  // this try's (a retry must not see the last one's)
  timed_out = false;
  body.clear();
  auto self = shared_from_this();
  http::StreamOptions options;
  options.response_header_timeout =
      stream ? s_.config_.first_byte_timeout : s_.config_.upstream_timeout;
  options.body_idle_timeout = s_.config_.idle_timeout;
  options.cancellation = cancellation;
  options.on_timeout = [self] { self->timed_out = true; };  // before on_done, on its thread
  s_.client_.stream(
      view->host, view->port, request.method, request.target, upstream_body, headers,
      [self](int st, const http::Headers& upstream) { self->on_headers(st, upstream); },
      [self](std::string_view bytes) { return self->on_chunk(bytes); },
      [self, cancellation, prompt_size](Status st) {
        self->on_done(st, cancellation, prompt_size);
      },
      std::move(options));
}

void RouterServer::ProxiedRequest::prefill_started() {
  if (pending_prefill == 0) return;
  s_.pool_.prefill_started(replica, pending_prefill);
  pending_prefill = 0;
}

void RouterServer::ProxiedRequest::on_headers(int upstream_status, const http::Headers& upstream) {
  status = upstream_status;
  if (status >= 500) return;  // may be retried: nothing sent yet
  content_type = http::find_header(upstream, "content-type").value_or("application/json");
  weight_version = http::find_header(upstream, "x-kvcascade-weight-version");
  if (stream) start_client_stream();
}

bool RouterServer::ProxiedRequest::on_chunk(std::string_view bytes) {
  if (status >= 500) return true;  // drain the error body, then retry
  prefill_started();               // the answer's first bytes: its prefill is done
  if (!sent_anything) {
    if (body.size() + bytes.size() <= kMaxBufferedBody) {
      body.append(bytes);
      return !responder->client_gone();
    }
    start_client_stream();  // too large to buffer: stream it through
    responder->write(std::move(body));
    body.clear();
  }
  responder->write(std::string(bytes));
  return !responder->client_gone();
}

void RouterServer::ProxiedRequest::on_done(const Status& s,
                                           const std::shared_ptr<http::Cancellation>& cancellation,
                                           int64_t prompt_size) {
  const bool failed = !s.ok() || status >= 500;
  const bool client_gone = responder->client_gone();
  // A try that failed before its answer started never became the replica's work.
  if (failed && !sent_anything && !client_gone)
    s_.pool_.forget_routed_work(replica, counted_work_id);
  s_.pool_.end_request(replica, !failed || client_gone, cancellation, prompt_size, pending_prefill);
  pending_prefill = 0;
  if (client_gone) return;  // nobody to answer; the replica did nothing wrong
  if (!failed) {
    if (sent_anything) {
      responder->end();
    } else {
      responder->send(status, content_type, std::move(body), client_headers());
    }
    if (s_.metrics_) {
      s_.metrics_->router_request_seconds_all.Observe(
          std::chrono::duration<double>(s_.clock_.now() - begun).count());
    }
    return;
  }
  // Headers below 500 arrived (the reply may still be buffered here): mid-stream.
  s_.stats_.note_upstream_error(replica_id, sent_anything || (status > 0 && status < 500)
                                                ? "midstream"
                                            : status >= 500 ? "status"
                                            : timed_out     ? "timeout"
                                                            : "connect");
  const std::string why = s.ok() ? "status " + std::to_string(status) : s.message();
  if (!sent_anything) {
    // Retried (nothing reached the client): a replica that could not be reached, answered a
    // 5xx, was found dead or broke the connection, a reply that stalled mid-body, and a stream
    // whose first byte did not come within first_byte_timeout (queueing and prefill: another
    // replica may start it at once; README "Raise the first-byte timeout"). Not retried: a
    // non-streamed request whose reply did not come within upstream_timeout, which bounds the
    // whole generation. The replica was most likely computing it (the router's reset ends
    // that) and another would take as long again: a retry would only double the work wasted
    // before the same error.
    const bool generation_too_long = timed_out && status == 0 && !stream;
    if (!generation_too_long && static_cast<int32_t>(tried.size()) < s_.config_.max_attempts &&
        do_choose()) {
      s_.stats_.note_retry();
      do_try();
      return;
    }
    // The last try's answer was late (and no 5xx said it failed): a gateway timeout.
    if (timed_out && status < 500) {
      http::send_error(*responder, 504, "upstream replica timed out: " + why, "server_error");
    } else {
      http::send_error(*responder, 502, "upstream replica failed: " + why, "server_error");
    }
    return;
  }
  // Mid-stream: a stream ends cleanly with an error event the client can see; a plain body
  // passed through (too large to buffer) cannot say it failed, so its connection is cut without
  // the terminal chunk: a truncated body, never one that looks complete.
  if (!stream) {
    responder->abort();
    return;
  }
  responder->write(http::sse_event(http::error_body(
      "upstream replica " + replica_id + " failed mid-stream: " + why, "server_error")));
  responder->end();
}

// What the router tells the client about the route it took. The matched length only on request:
// without tenant isolation it says how much of this prompt somebody else has cached.
http::Headers RouterServer::ProxiedRequest::client_headers() const {
  http::Headers h = {{"x-kvcascade-replica", replica_id}, {"x-kvcascade-route-reason", reason}};
  if (weight_version) h.emplace_back("x-kvcascade-weight-version", *weight_version);
  if (debug_headers) h.emplace_back("x-kvcascade-matched-bytes", std::to_string(matched_bytes));
  return h;
}

// Starts the client's response as a stream (a streaming request, or a body too large to buffer).
void RouterServer::ProxiedRequest::start_client_stream() {
  responder->start_stream(status, content_type, client_headers());
  sent_anything = true;
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
  stats_.to_json(state);
  return state.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kvc
