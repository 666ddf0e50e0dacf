#include "router/server.h"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "http/auth.h"
#include "http/errors.h"
#include "router/replica_auth.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kvc {

using json = nlohmann::json;

constexpr size_t kMaxBufferedBody = size_t{8} << 20;

// One client request on its way to a replica, possibly over several tries.
struct RouterServer::Attempt {
  http::Request request;
  std::shared_ptr<http::Responder> responder;
  bool stream = false;
  std::vector<BlockHash> hashes;
  std::string sibling_key;
  std::vector<uint32_t> tried;
  uint32_t replica = 0;
  std::string replica_id, reason;
  size_t matched_bytes = 0;
  bool debug_headers = false;  // RouterConfig::debug_headers
  bool sent_anything = false;  // bytes reached the client: no more retries
  int status = 0;
  // A non-streaming request's response is buffered and sent whole (one hand-off to the client's
  // session instead of one per piece, and a replica failing mid-body can still be retried); past
  // kMaxBufferedBody it is streamed through.
  std::string content_type;
  std::string body;
  Clock::TimePoint start{};
  size_t prompt_bytes = 0;
  // Shared with the client-gone callback, which may run on another thread.
  std::mutex mu;
  bool abandoned = false;                            // the client left: no more tries
  std::shared_ptr<http::Cancellation> cancellation;  // ends the try in flight
};

namespace {

// What the router tells the client about the route it took. The matched length only on request:
// without tenant isolation it says how much of this prompt somebody else has cached.
http::Headers client_headers(const RouterServer::Attempt& a) {
  http::Headers h = {{"x-kvcascade-replica", a.replica_id}, {"x-kvcascade-route-reason", a.reason}};
  if (a.debug_headers) h.emplace_back("x-kvcascade-matched-bytes", std::to_string(a.matched_bytes));
  return h;
}

// The request body with its cache_salt replaced; nullopt if it is not a JSON object (it was
// parsed once already, so this does not happen). Strings were valid UTF-8 when parsed, so the
// prompt's bytes survive the round trip and the replica hashes what the router hashed.
std::optional<std::string> with_cache_salt(const std::string& body, const std::string& salt) {
  json j = json::parse(body, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  j["cache_salt"] = salt;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Starts the client's response as a stream (a streaming request, or a body too large to buffer).
void start_client_stream(RouterServer::Attempt& a) {
  a.responder->start_stream(a.status, a.content_type, client_headers(a));
  a.sent_anything = true;
}

}  // namespace

RouterServer::RouterServer(ReplicaPool& pool, RadixIndex& index, RadixIndex& approx,
                           std::mutex& index_mu, http::Client& client, const Clock& clock,
                           RouterConfig config, prometheus::Registry* registry,
                           metrics::RouterMetrics* metrics)
    : pool_(pool),
      index_(index),
      approx_(approx),
      index_mu_(index_mu),
      client_(client),
      config_(std::move(config)),
      policy_(make_policy(config_.policy)),
      siblings_(clock, config_.siblings),
      registry_(registry),
      metrics_(metrics),
      clock_(clock) {
  if (metrics_) retries_counter_ = &metrics_->router_retries_total.Add({});
}

void RouterServer::note_retry() {
  ++stats_.retries;
  if (retries_counter_ != nullptr) retries_counter_->Increment();
}

void RouterServer::handle(http::Request request, std::shared_ptr<http::Responder> responder) {
  const std::string path = request.target.substr(0, request.target.find('?'));
  const bool probe = path == "/livez" || path == "/readyz" || path == "/health";
  if (!probe && !http::authorize(request, config_.api_keys, *responder)) return;
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
      std::lock_guard lock(index_mu_);
      for (const ReplicaView& r : views) {
        metrics_->router_index_blocks.Add({{"replica", r.replica_id}})
            .Set(static_cast<double>(index_.num_blocks(r.index) + approx_.num_blocks(r.index)));
      }
    }
    responder->send(200, metrics::kContentType, metrics::expose(*registry_));
  } else if (path == "/router/state") {
    if (only("GET")) responder->send(200, "application/json", state_json());
  } else {
    http::send_error(*responder, 404, "no such path: " + path, "not_found_error");
  }
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

void RouterServer::route(Endpoint endpoint, http::Request request,
                         std::shared_ptr<http::Responder> responder) {
  ++stats_.requests;
  // Chat requests are rendered with the template of a replica serving the model.
  auto template_for = [this](const std::string& model) -> std::shared_ptr<const ChatTemplate> {
    for (const ReplicaView& r : pool_.snapshot()) {
      if (r.chat_template && std::find(r.models.begin(), r.models.end(), model) != r.models.end())
        return r.chat_template;
    }
    return nullptr;
  };
  auto parsed = parse_openai_request(
      endpoint, request.body, config_.api,
      endpoint == Endpoint::kChatCompletions ? ChatTemplateFor(template_for) : ChatTemplateFor());
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
  std::vector<ReplicaView> replicas;
  for (ReplicaView& r : pool_.snapshot()) {
    if (std::find(r.models.begin(), r.models.end(), req.model) != r.models.end()) {
      replicas.push_back(std::move(r));
    }
  }
  if (replicas.empty()) {
    http::send_error(*responder, 404, "model '" + req.model + "' is not served by any replica",
                     "invalid_request_error", "model");
    return;
  }
  auto attempt = std::make_shared<Attempt>();
  // A client that leaves ends the exchange in flight at once: the replica sees the connection
  // close and frees the group. (A non-streaming reply sends no byte before the generation is done,
  // so waiting for one to find the client gone would let the replica generate to the end.)
  responder->on_client_gone([weak = std::weak_ptr<Attempt>(attempt)] {
    auto a = weak.lock();
    if (!a) return;
    std::shared_ptr<http::Cancellation> in_flight;
    {
      std::lock_guard lock(a->mu);
      a->abandoned = true;
      in_flight = a->cancellation;
    }
    if (in_flight) in_flight->cancel("the client went away");
  });
  attempt->stream = req.stream;
  attempt->start = clock_.now();
  attempt->prompt_bytes = req.prompts.front().size();
  // Route by the first prompt: a batch's prompts usually share their prefix. A completion is
  // hashed with the special tokens the replica's tokenizer puts around it (BOS).
  const ReplicaView& any = replicas.front();
  const bool wrapped = endpoint == Endpoint::kCompletions &&
                       (!any.completion_prefix.empty() || !any.completion_suffix.empty());
  const std::string wrapped_prompt =
      wrapped ? any.completion_prefix + req.prompts.front() + any.completion_suffix : std::string();
  const std::string& prompt = wrapped ? wrapped_prompt : req.prompts.front();
  attempt->hashes = hash_blocks(chain_seed(any.hash_model, cache_salt), prompt, any.block_size);
  const uint64_t prompt_hash = XXH3_64bits_withSeed(
      prompt.data(), prompt.size(), XXH3_64bits(cache_salt.data(), cache_salt.size()));
  attempt->sibling_key = SiblingTracker::key_for(group, prompt_hash);
  attempt->debug_headers = config_.debug_headers;
  attempt->request = std::move(request);
  attempt->responder = responder;

  MatchResult exact, guessed;
  {
    std::lock_guard lock(index_mu_);
    exact = index_.match(attempt->hashes);
    guessed = approx_.match(attempt->hashes);
  }
  if (exact.near_miss() || guessed.near_miss()) {
    ++stats_.near_misses;
    if (metrics_) metrics_->router_near_miss_prefixes_total.Add({}).Increment();
  }

  std::vector<Candidate> candidates;
  for (const ReplicaView& r : replicas) {
    Candidate c;
    c.replica = r.index;
    c.id = r.replica_id;
    c.healthy = r.healthy;
    c.matched_blocks = std::max(exact.blocks_for(r.index), guessed.blocks_for(r.index));
    c.queued_prefill_tokens = r.queued_prefill_tokens;
    c.running_sequences = r.running_sequences;
    c.waiting_sequences = r.waiting_sequences;
    c.in_flight_requests = r.in_flight;
    {
      std::lock_guard lock(index_mu_);
      c.index_blocks = index_.num_blocks(r.index) + approx_.num_blocks(r.index);
    }
    candidates.push_back(std::move(c));
  }
  RouteRequest rr;
  rr.blocks = attempt->hashes;
  rr.prompt_tokens = static_cast<int64_t>(prompt.size());
  rr.block_size = any.block_size;
  rr.n = req.n * static_cast<int32_t>(req.prompts.size());
  rr.group = group;
  rr.affinity_key = prompt.substr(0, static_cast<size_t>(any.block_size) * 4);

  // Everything below chooses among the candidates still untried; a retry calls back here.
  auto choose = [this, attempt, candidates, rr]() mutable -> bool {
    std::vector<ReplicaView> now;
    if (!attempt->tried.empty()) now = pool_.snapshot();  // a retry: health may have changed
    for (Candidate& c : candidates) {
      if (std::find(attempt->tried.begin(), attempt->tried.end(), c.replica) !=
          attempt->tried.end()) {
        c.healthy = false;
      }
      if (!now.empty()) {
        auto it =
            std::find_if(now.begin(), now.end(), [&](auto& v) { return v.index == c.replica; });
        c.healthy = c.healthy && it != now.end() && it->healthy;
      }
    }
    if (std::none_of(candidates.begin(), candidates.end(), [](auto& c) { return c.healthy; })) {
      return false;
    }
    RouteDecision d;
    bool pinned = false;
    if (config_.policy == "kvcascade") {
      std::lock_guard lock(policy_mu_);
      if (auto p = siblings_.lookup(attempt->sibling_key)) {
        for (const Candidate& c : candidates) {
          if (c.replica == *p && c.healthy) {
            d = {c.replica, "sibling_pinned"};
            pinned = true;
          }
        }
      }
    }
    if (!pinned) {
      std::lock_guard lock(policy_mu_);
      d = policy_->choose(rr, candidates);
      if (config_.policy == "kvcascade") siblings_.record(attempt->sibling_key, d.replica);
    }
    if (!attempt->tried.empty()) d.reason = "retry";
    attempt->replica = d.replica;
    attempt->reason = d.reason;
    for (const Candidate& c : candidates) {
      if (c.replica == d.replica) {
        attempt->replica_id = c.id;
        attempt->matched_bytes = c.matched_blocks * static_cast<size_t>(rr.block_size);
      }
    }
    attempt->tried.push_back(d.replica);
    return true;
  };
  if (!choose()) {
    http::send_error(*responder, 503, "no healthy replica serves model '" + req.model + "'",
                     "server_error");
    return;
  }
  // Keep the chooser for retries.
  auto chooser = std::make_shared<std::function<bool()>>(std::move(choose));
  auto run = std::make_shared<std::function<void()>>();
  // The function holds itself weakly (no cycle); each in-flight callback holds it strongly.
  std::weak_ptr<std::function<void()>> weak_run = run;
  *run = [this, attempt, chooser, weak_run] {
    auto run = weak_run.lock();
    // Made before the exchange starts, so that the client leaving at any moment ends it.
    auto cancellation = std::make_shared<http::Cancellation>();
    {
      std::lock_guard lock(attempt->mu);
      if (attempt->abandoned) return;  // the client left between two tries
      attempt->cancellation = cancellation;
    }
    auto view = pool_.get(attempt->replica);
    if (view && !view->exact) {
      // Approximate mode: this replica publishes no KV events; remember what we sent it.
      std::lock_guard lock(index_mu_);
      (void)approx_.insert(attempt->replica, attempt->hashes);
    }
    prometheus::Counter* routed_counter = nullptr;
    {
      std::lock_guard lock(stats_.mu);
      const std::pair<std::string, std::string> key{attempt->replica_id, attempt->reason};
      ++stats_.routed[key];
      if (metrics_) {
        // Looked up once per (replica, reason): Family::Add builds and hashes a label map.
        prometheus::Counter*& c = routed_counters_[key];
        if (c == nullptr) {
          c = &metrics_->router_requests_total.Add(
              {{"replica", attempt->replica_id}, {"reason", attempt->reason}});
        }
        routed_counter = c;
      }
    }
    if (routed_counter != nullptr) routed_counter->Increment();
    if (metrics_ && attempt->tried.size() == 1 && attempt->prompt_bytes > 0) {
      metrics_->router_prefix_match_ratio_all.Observe(
          std::min(1.0, static_cast<double>(attempt->matched_bytes) /
                            static_cast<double>(attempt->prompt_bytes)));
    }
    pool_.begin_request(attempt->replica, cancellation);  // ended if the replica is found dead
    http::Headers headers;
    for (const auto& [k, v] : attempt->request.headers) {
      std::string lower = k;
      std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
      if (lower == "content-type" || lower == "accept") headers.emplace_back(k, v);
    }
    for (auto& h : replica_auth_headers(config_.replica_api_key))
      headers.push_back(std::move(h));
    if (!view) {
      pool_.end_request(attempt->replica, false, cancellation);
      if (!(*chooser)()) {
        http::send_error(*attempt->responder, 503, "no healthy replica left", "server_error");
      } else {
        note_retry();
        (*run)();
      }
      return;
    }
    attempt->status = 0;  // this try's (a retry must not see the last one's)
    attempt->body.clear();
    http::StreamOptions options;
    options.response_header_timeout =
        attempt->stream ? config_.first_byte_timeout : config_.upstream_timeout;
    options.body_idle_timeout = config_.idle_timeout;
    options.cancellation = cancellation;
    client_.stream(
        view->host, view->port, attempt->request.method, attempt->request.target,
        attempt->request.body, headers,
        [attempt](int status, const http::Headers& upstream) {
          attempt->status = status;
          if (status >= 500) return;  // may be retried: nothing sent yet
          attempt->content_type = "application/json";
          for (const auto& [k, v] : upstream) {
            std::string lower = k;
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            if (lower == "content-type") attempt->content_type = v;
          }
          if (attempt->stream) start_client_stream(*attempt);
        },
        [attempt](std::string_view bytes) {
          if (attempt->status >= 500) return true;  // drain the error body, then retry
          if (!attempt->sent_anything) {
            if (attempt->body.size() + bytes.size() <= kMaxBufferedBody) {
              attempt->body.append(bytes);
              return !attempt->responder->client_gone();
            }
            start_client_stream(*attempt);  // too large to buffer: stream it through
            attempt->responder->write(std::move(attempt->body));
            attempt->body.clear();
          }
          attempt->responder->write(std::string(bytes));
          return !attempt->responder->client_gone();
        },
        [this, attempt, chooser, run, cancellation](Status s) {
          const bool failed = !s.ok() || attempt->status >= 500;
          const bool client_gone = attempt->responder->client_gone();
          pool_.end_request(attempt->replica, !failed || client_gone, cancellation);
          if (client_gone) return;  // nobody to answer; the replica did nothing wrong
          if (!failed) {
            if (attempt->sent_anything) {
              attempt->responder->end();
            } else {
              attempt->responder->send(attempt->status, attempt->content_type,
                                       std::move(attempt->body), client_headers(*attempt));
            }
            if (metrics_) {
              metrics_->router_request_seconds_all.Observe(
                  std::chrono::duration<double>(clock_.now() - attempt->start).count());
            }
            return;
          }
          ++stats_.upstream_errors;
          if (metrics_) {
            // Headers below 500 arrived (the reply may still be buffered here): mid-stream.
            const char* kind =
                attempt->sent_anything || (attempt->status > 0 && attempt->status < 500)
                    ? "midstream"
                : attempt->status >= 500 ? "status"
                                         : "connect";
            metrics_->router_upstream_errors_total
                .Add({{"replica", attempt->replica_id}, {"kind", kind}})
                .Increment();
          }
          if (!attempt->sent_anything) {
            if (static_cast<int32_t>(attempt->tried.size()) < config_.max_attempts &&
                (*chooser)()) {
              note_retry();
              (*run)();
              return;
            }
            http::send_error(
                *attempt->responder, 502,
                "upstream replica failed: " +
                    (s.ok() ? "status " + std::to_string(attempt->status) : s.message()),
                "server_error");
            return;
          }
          // Mid-stream: end cleanly with an error event the client can see.
          if (attempt->stream) {
            attempt->responder->write(
                "data: " +
                http::error_body(
                    "upstream replica " + attempt->replica_id + " failed mid-stream: " +
                        (s.ok() ? "status " + std::to_string(attempt->status) : s.message()),
                    "server_error") +
                "\n\n");
          }
          attempt->responder->end();
        },
        std::move(options));
  };
  (*run)();
}

std::string RouterServer::state_json() {
  json replicas = json::array();
  const std::vector<ReplicaView> views = pool_.snapshot();  // before the index lock (lock order)
  std::lock_guard index_lock(index_mu_);
  for (const ReplicaView& r : views) {
    replicas.push_back({{"index", r.index},
                        {"replica_id", r.replica_id},
                        {"address", r.host + ":" + std::to_string(r.port)},
                        {"healthy", r.healthy},
                        {"exact", r.exact},
                        {"block_size", r.block_size},
                        {"in_flight", r.in_flight},
                        {"index_blocks", index_.num_blocks(r.index)},
                        {"approx_blocks", approx_.num_blocks(r.index)}});
  }
  json routed = json::array();
  {
    std::lock_guard lock(stats_.mu);
    for (const auto& [key, n] : stats_.routed) {
      routed.push_back({{"replica", key.first}, {"reason", key.second}, {"count", n}});
    }
  }
  return json{{"policy", config_.policy},
              {"replicas", replicas},
              {"requests", stats_.requests.load()},
              {"retries", stats_.retries.load()},
              {"upstream_errors", stats_.upstream_errors.load()},
              {"near_misses", stats_.near_misses.load()},
              {"routed", routed}}
      .dump();
}

}  // namespace kvc
