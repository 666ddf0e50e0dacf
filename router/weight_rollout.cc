#include "router/weight_rollout.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include <nlohmann/json.hpp>

#include "api/openai_request.h"
#include "http/errors.h"
#include "router/fleet/replica_auth.h"

namespace kvc {
namespace {

using json = nlohmann::json;

// The reply's status, from every replica's result (run()). 200: every replica updated. When
// every replica that was called refused the update itself with one status, 400 (its folder,
// version or mode: e.g. a path no replica has) or 409 (an update already running there), that
// status: the client's request is at fault, and no replica changed its weights. Anything else
// is a 502: a replica that failed (5xx), could not be reached or did not answer (status 0),
// refused the router's credentials (401/403: the router's --replica-admin-api-key, not the
// client's request), or outcomes that differ (some updated, or 400 beside 409). Replicas a
// rolling update skipped after the first failure were never called and do not count.
int reply_status(bool all_ok, const json& results) {
  if (all_ok) return 200;
  int refused = 0;
  for (const json& a : results) {
    if (a.value("skipped", false)) continue;
    const int status = a.value("status", 0);
    if ((status != 400 && status != 409) || (refused != 0 && status != refused)) return 502;
    refused = status;
  }
  return refused != 0 ? refused : 502;
}

}  // namespace

WeightRollout::WeightRollout(ReplicaPool& pool, http::Client& client, std::string key)
    : pool_(pool), client_(client), key_(std::move(key)) {}

WeightRollout::~WeightRollout() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(threads_);
  }
  for (std::thread& t : threads)
    t.join();
}

void WeightRollout::handle(const http::Request& request,
                           std::shared_ptr<http::Responder> responder) {
  auto bad = [&](int status, const std::string& message, const char* param) {
    http::send_error(*responder, status, message, "invalid_request_error",
                     param ? std::optional<std::string_view>(param) : std::nullopt);
  };
  const json body = json::parse(request.body, nullptr, false);
  if (!body.is_object()) return bad(400, "the body must be a JSON object", nullptr);
  // A misspelt field ("Mode") would silently mean its default (a drain): refused by name.
  for (const auto& [key, value] : body.items()) {
    static constexpr std::string_view kFields[] = {"path",     "version",      "mode",
                                                   "strategy", "max_parallel", "replicas"};
    if (std::find(std::begin(kFields), std::end(kFields), key) == std::end(kFields)) {
      return bad(400,
                 key +
                     ": not a field of a fleet weight update (path, version, mode, strategy, "
                     "max_parallel, replicas)",
                 nullptr);
    }
  }
  auto text = [&](const char* key, const std::string& otherwise) {
    auto it = body.find(key);
    return it != body.end() && it->is_string() ? it->get<std::string>() : otherwise;
  };
  const std::string path = text("path", "");
  if (path.empty()) return bad(400, "path: the Hugging Face folder to load (a string)", "path");
  if (path.front() != '/') {
    return bad(400, "path: an absolute path (each replica resolves it on its own machine)", "path");
  }
  const std::string version = text("version", "");
  if (!valid_weight_version(version)) {
    return bad(400, "version: 1 to 128 printable ASCII characters without spaces", "version");
  }
  const std::string mode = text("mode", "drain");
  if (mode != "drain" && mode != "abort") return bad(400, "mode: \"drain\" or \"abort\"", "mode");
  const std::string strategy = text("strategy", "rolling");
  if (strategy != "rolling" && strategy != "all-at-once") {
    return bad(400, "strategy: \"rolling\" or \"all-at-once\"", "strategy");
  }
  int max_parallel = 1;
  if (auto it = body.find("max_parallel"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > 1024) {
      return bad(400, "max_parallel: an integer 1 to 1024", "max_parallel");
    }
    max_parallel = static_cast<int>(it->get<int64_t>());
  }
  std::vector<Target> targets;
  const std::vector<ReplicaView> views = pool_.snapshot();
  auto kvcascade = [](const ReplicaView& r) { return r.kind == ReplicaKind::kKvcascade; };
  if (auto it = body.find("replicas"); it != body.end() && !it->is_null()) {
    if (!it->is_array() || it->empty()) return bad(400, "replicas: a list of ids", "replicas");
    for (const json& id : *it) {
      auto v = std::find_if(views.begin(), views.end(), [&](const ReplicaView& r) {
        return id.is_string() && r.replica_id == id.get<std::string>();
      });
      if (v == views.end() || !kvcascade(*v)) {
        return bad(400, "replicas: no kvcascade replica " + id.dump(), "replicas");
      }
      targets.push_back({v->replica_id, v->host, v->port});
    }
  } else {
    for (const ReplicaView& r : views)
      if (kvcascade(r) && r.healthy) targets.push_back({r.replica_id, r.host, r.port});
  }
  if (targets.empty()) return bad(409, "no healthy kvcascade replica to update", nullptr);
  if (strategy == "all-at-once") max_parallel = static_cast<int>(targets.size());
  std::lock_guard lock(mu_);
  if (running_) return bad(409, "a weight rollout is already running", nullptr);
  running_ = true;
  const std::string upstream = json{{"path", path}, {"version", version}, {"mode", mode}}.dump();
  threads_.emplace_back([this, targets = std::move(targets), upstream, max_parallel, responder] {
    run(targets, upstream, max_parallel, responder);
  });
}

void WeightRollout::run(std::vector<Target> targets, std::string body, int max_parallel,
                        std::shared_ptr<http::Responder> responder) {
  json results = json::array();
  bool all_ok = true;
  http::Headers headers = replica_auth_headers(key_);
  headers.emplace_back("content-type", "application/json");
  const auto began = std::chrono::steady_clock::now();
  for (size_t wave = 0; wave < targets.size(); wave += static_cast<size_t>(max_parallel)) {
    const size_t end = std::min(targets.size(), wave + static_cast<size_t>(max_parallel));
    std::vector<json> answers(end - wave);
    std::vector<std::thread> calls;
    for (size_t i = wave; i < end; ++i) {
      calls.emplace_back([&, i] {
        const Target& t = targets[i];
        const auto t0 = std::chrono::steady_clock::now();
        std::atomic<bool> sent{false};
        http::StreamOptions options;
        options.on_written = [&sent] { sent = true; };
        auto r = client_.request(t.host, t.port, "POST", "/v1/admin/weights", body, headers,
                                 std::chrono::minutes(30), std::nullopt, std::move(options));
        json a = {{"replica", t.id},
                  {"seconds",
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
        if (!r.ok()) {
          // Never written to a connection: the update did not reach the replica. Written and
          // not answered (a timeout, a connection lost): the replica may still apply it; its
          // version shows in /router/state once it does.
          a["status"] = 0;
          a["error"] = r.error().message;
          a["outcome"] = sent ? "unknown" : "not_sent";
        } else {
          a["status"] = r->status;
          const json reply = json::parse(r->body, nullptr, false);
          if (r->status == 200 && reply.is_object()) {
            a["weight_version"] = reply.value("weight_version", "");
            a["previous_weight_version"] = reply.value("previous_weight_version", "");
            a["load_seconds"] = reply.value("load_seconds", 0.0);
          } else {
            a["error"] = reply.is_object() && reply.contains("error")
                             ? reply["error"].value("message", r->body)
                             : r->body;
          }
        }
        answers[i - wave] = std::move(a);
      });
    }
    for (std::thread& c : calls)
      c.join();
    for (json& a : answers) {
      all_ok = all_ok && a["status"] == 200;
      results.push_back(std::move(a));
    }
    if (!all_ok) {  // a rolling update stops at the first failure: the rest keep their weights
      for (size_t i = end; i < targets.size(); ++i)
        results.push_back({{"replica", targets[i].id}, {"status", 0}, {"skipped", true}});
      break;
    }
  }
  pool_.poll_now();  // the new versions, for routing and /router/state
  const int status = reply_status(all_ok, results);
  const json reply = {
      {"ok", all_ok},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count()},
      {"replicas", std::move(results)}};
  {
    // Done before the client hears of it: a rollout it starts on the reply is not refused as
    // "already running" (seen in CI: the next POST arrived before this flag was cleared).
    std::lock_guard lock(mu_);
    running_ = false;
  }
  responder->send(status, "application/json",
                  reply.dump(-1, ' ', false, json::error_handler_t::replace));
}

}  // namespace kvc
