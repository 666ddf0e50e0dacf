#include "bench/rl_bench.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "base/temp_dir.h"
#include "http/client.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/model/weights.h"
#include "replica/server/local_replica.h"
#include "router/router_stack.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;
using Seconds = std::chrono::duration<double>;

// The in-process fleet: two checkpoints of the tiny model, replicas serving the first, a router.
struct Fleet {
  std::optional<TempDir> dir;
  std::vector<std::string> checkpoints;
  std::vector<std::unique_ptr<LocalReplica>> replicas;
  std::unique_ptr<RouterStack> router;
  std::string address;
};

Result<std::unique_ptr<Fleet>> start_fleet(const RlBenchOptions& o) {
  auto f = std::make_unique<Fleet>();
  Result<TempDir> dir = TempDir::create("bench-rl");
  if (!dir.ok()) return dir.error();
  f->dir.emplace(std::move(dir).value());
  for (int k = 0; k < 2; ++k) {
    const std::string d = f->dir->file("step-" + std::to_string(k));
    std::filesystem::create_directories(d);
    if (Status s = write_hf_checkpoint(random_weights(*preset_config("tiny"), 1 + k), d); !s.ok())
      return Error{s.message()};
    f->checkpoints.push_back(d);
  }
  RouterStackConfig rc;
  rc.pool.poll_interval = std::chrono::milliseconds(100);
  for (int i = 0; i < o.replicas; ++i) {
    auto w = load_hf_weights(f->checkpoints[0]);
    if (!w.ok()) return w.error();
    ReplicaStackConfig c;
    c.engine.scheduler.max_model_len = 4096;
    c.server.served_model_name = o.model;
    c.server.weight_version = "step-0";
    f->replicas.push_back(std::make_unique<LocalReplica>(
        "r" + std::to_string(i), std::make_unique<CpuBackend>(std::move(*w), 2048, 16),
        std::move(c)));
    rc.replicas.push_back(f->replicas.back()->address());
  }
  f->router = std::make_unique<RouterStack>(rc);
  auto port = f->router->start("127.0.0.1", 0);
  if (!port.ok()) return port.error();
  f->address = "127.0.0.1:" + std::to_string(*port);
  return f;
}

struct Reply {
  int status = 0;
  json body;
};

class Driver {
 public:
  explicit Driver(const std::string& address) {
    const auto colon = address.rfind(':');
    host_ = address.substr(0, colon);
    port_ = static_cast<uint16_t>(std::stoi(address.substr(colon + 1)));
    http::ClientLimits limits;
    limits.response_header_timeout = std::chrono::hours(1);
    client_ = std::make_unique<http::Client>(limits);
  }
  Reply post(const std::string& path, const json& body) {
    auto r = client_->request(host_, port_, "POST", path, body.dump(),
                              {{"content-type", "application/json"}}, std::chrono::hours(1));
    if (!r.ok()) return {0, json{{"error", r.error().message}}};
    return {r->status, json::parse(r->body, nullptr, false)};
  }
  json get(const std::string& path) {
    auto r = client_->request(host_, port_, "GET", path, "", {}, std::chrono::seconds(30));
    return r.ok() ? json::parse(r->body, nullptr, false) : json();
  }

 private:
  std::string host_;
  uint16_t port_ = 0;
  std::unique_ptr<http::Client> client_;
};

// A GRPO step's prompt: a shared task text, then the question of prompt g of step s.
std::string prompt_text(const RlBenchOptions& o, int step, int g) {
  std::string p = "Task: solve the problem and show the work. ";
  while (static_cast<int>(p.size()) < o.prompt_tokens)
    p += "Reason step by step, check each line, and give the final answer in a box. ";
  p.resize(o.prompt_tokens);
  return p + " Problem " + std::to_string(step) + "." + std::to_string(g) + ": ";
}

struct StepResult {
  double rollout_seconds = 0, update_seconds = 0;
  int64_t completion_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  int requests = 0, ok = 0;
  std::set<std::string> versions;
  json probe_tokens;
};

// Whole: 200, every choice with max_tokens token ids and a logprob for each.
bool whole(const RlBenchOptions& o, const Reply& r, int choices) {
  if (r.status != 200 || !r.body.is_object()) return false;
  const json& cs = r.body["choices"];
  if (!cs.is_array() || static_cast<int>(cs.size()) != choices) return false;
  for (const json& c : cs) {
    if (c["token_ids"].size() != static_cast<size_t>(o.max_tokens)) return false;
    if (c["logprobs"]["token_logprobs"].size() != static_cast<size_t>(o.max_tokens)) return false;
  }
  return true;
}

StepResult rollout(const RlBenchOptions& o, Driver& d, int step) {
  StepResult s;
  std::vector<std::future<std::pair<Reply, int>>> replies;
  const auto start = std::chrono::steady_clock::now();
  for (int g = 0; g < o.prompts; ++g) {
    json base = {{"model", o.model},           {"prompt", prompt_text(o, step, g)},
                 {"max_tokens", o.max_tokens}, {"temperature", 1.0},
                 {"ignore_eos", true},         {"logprobs", o.logprobs},
                 {"return_token_ids", true}};
    if (g % 2 == 0) {  // one request with n
      json r = base;
      r["n"] = o.samples;
      r["seed"] = step * 1000 + g;
      replies.push_back(std::async(std::launch::async, [&d, r] {
        return std::pair{d.post("/v1/completions", r), 0};
      }));
    } else {  // n requests of one group
      for (int i = 0; i < o.samples; ++i) {
        json r = base;
        r["group"] = "step" + std::to_string(step) + "-prompt" + std::to_string(g);
        r["group_size"] = o.samples;
        r["seed"] = step * 1000 + g * 100 + i;
        replies.push_back(std::async(std::launch::async, [&d, r] {
          return std::pair{d.post("/v1/completions", r), 1};
        }));
      }
    }
  }
  for (auto& f : replies) {
    auto [r, single] = f.get();
    ++s.requests;
    const int choices = single ? 1 : o.samples;
    if (whole(o, r, choices)) ++s.ok;
    if (r.status != 200 || !r.body.is_object()) continue;
    s.versions.insert(r.body.value("weight_version", ""));
    const json& u = r.body["usage"];
    s.completion_tokens += u.value("completion_tokens", 0);
    s.prompt_tokens += u.value("prompt_tokens", 0);
    s.cached_tokens += u["prompt_tokens_details"].value("cached_tokens", 0);
  }
  s.rollout_seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  // The probe: greedy, fixed: its tokens are a function of the weights alone.
  const Reply probe = d.post("/v1/completions", {{"model", o.model},
                                                 {"prompt", prompt_text(o, 0, 0)},
                                                 {"max_tokens", 16},
                                                 {"temperature", 0},
                                                 {"ignore_eos", true},
                                                 {"return_token_ids", true}});
  if (probe.status == 200) s.probe_tokens = probe.body["choices"][0]["token_ids"];
  return s;
}

}  // namespace

int run_rl_bench(const RlBenchOptions& o) {
  std::unique_ptr<Fleet> fleet;
  std::vector<std::string> checkpoints = o.checkpoints;
  std::string address = o.router;
  if (address.empty()) {
    auto f = start_fleet(o);
    if (!f.ok()) {
      std::fprintf(stderr, "bench rl: %s\n", f.error().message.c_str());
      return 1;
    }
    fleet = std::move(f).value();
    checkpoints = fleet->checkpoints;
    address = fleet->address;
    // Wait until the router sees every replica's version.
    Driver probe(address);
    for (int i = 0; i < 100; ++i) {
      const json st = probe.get("/router/state");
      int ready = 0;
      for (const json& r : st.value("replicas", json::array()))
        ready += r.value("weight_version", "") == "step-0" && r.value("healthy", false);
      if (ready == o.replicas) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  if (checkpoints.size() < 2) {
    std::fprintf(stderr, "bench rl: --checkpoints needs two folders to alternate between\n");
    return 1;
  }
  Driver d(address);
  // Step s runs on checkpoints[s % size] as version "step-s": every replica loads it before the
  // step (POST /router/admin/weights). The seconds it took, or why it failed.
  auto load = [&](int step) -> Result<double> {
    const auto t0 = std::chrono::steady_clock::now();
    const Reply u =
        d.post("/router/admin/weights", {{"path", checkpoints[step % checkpoints.size()]},
                                         {"version", "step-" + std::to_string(step)},
                                         {"strategy", o.strategy},
                                         {"mode", o.mode}});
    if (u.status != 200) return Error{std::to_string(u.status) + " " + u.body.dump()};
    return Seconds(std::chrono::steady_clock::now() - t0).count();
  };
  // The in-process fleet starts on step 0's weights. A running fleet may serve anything (another
  // version, other weights): it loads the first checkpoint as step-0 first, so that step 0 is
  // checked like every other step (its version, and outputs that change at step 1).
  double initial_update_seconds = 0;
  if (!fleet) {
    std::set<std::string> served;
    const json state = d.get("/router/state");
    if (state.is_object() && state.contains("replicas") && state["replicas"].is_array()) {
      for (const json& r : state["replicas"])
        if (r.is_object()) served.insert(r.value("weight_version", ""));
    }
    std::string was;
    for (const std::string& v : served)
      was += (was.empty() ? "" : ",") + (v.empty() ? std::string("(none)") : v);
    Result<double> loaded = load(0);
    if (!loaded.ok()) {
      std::fprintf(stderr, "bench rl: loading %s as step-0 failed: %s\n", checkpoints[0].c_str(),
                   loaded.error().message.c_str());
      return 1;
    }
    initial_update_seconds = *loaded;
    std::printf("loaded %s as step-0 in %.3f s (the fleet served %s)\n", checkpoints[0].c_str(),
                initial_update_seconds, was.empty() ? "(no replica)" : was.c_str());
  }
  std::printf(
      "rl loop through %s: %d steps of %d prompts x %d samples (%d-byte prompts, %d "
      "tokens each, top-%d logprobs), updates %s (%s)\n\n",
      address.c_str(), o.steps, o.prompts, o.samples, o.prompt_tokens, o.max_tokens, o.logprobs,
      o.strategy.c_str(), o.mode.c_str());
  std::printf("%4s %10s %9s %10s %10s %8s  %s\n", "step", "rollout s", "update s", "tokens",
              "tokens/s", "cached", "versions");
  json rows = json::array();
  bool lost = false, wrong_version = false, unchanged = false;
  json previous_probe;
  for (int step = 0; step < o.steps; ++step) {
    StepResult s = rollout(o, d, step);
    const std::string want = "step-" + std::to_string(step);
    lost = lost || s.ok != s.requests;
    wrong_version = wrong_version || s.versions != std::set<std::string>{want};
    if (step > 0 && s.probe_tokens == previous_probe) unchanged = true;
    previous_probe = s.probe_tokens;
    // The update to the next step's weights (not after the last step).
    if (step + 1 < o.steps) {
      Result<double> loaded = load(step + 1);
      if (!loaded.ok()) {
        std::fprintf(stderr, "bench rl: update after step %d failed: %s\n", step,
                     loaded.error().message.c_str());
        return 1;
      }
      s.update_seconds = *loaded;
    }
    std::string versions;
    for (const std::string& v : s.versions)
      versions += (versions.empty() ? "" : ",") + v;
    const double tps = s.completion_tokens / std::max(s.rollout_seconds, 1e-9);
    const double hit = s.prompt_tokens ? double(s.cached_tokens) / s.prompt_tokens : 0.0;
    std::printf("%4d %10.3f %9.3f %10lld %10.0f %7.1f%%  %s (%d/%d requests whole)\n", step,
                s.rollout_seconds, s.update_seconds, static_cast<long long>(s.completion_tokens),
                tps, 100 * hit, versions.c_str(), s.ok, s.requests);
    rows.push_back({{"step", step},
                    {"rollout_seconds", s.rollout_seconds},
                    {"update_seconds", s.update_seconds},
                    {"completion_tokens", s.completion_tokens},
                    {"tokens_per_second", tps},
                    {"prompt_tokens", s.prompt_tokens},
                    {"cached_tokens", s.cached_tokens},
                    {"requests", s.requests},
                    {"whole_requests", s.ok},
                    {"versions", s.versions}});
  }
  std::printf(
      "\nno request lost: %s; every response at its step's version: %s; outputs change "
      "with the weights: %s\n",
      lost ? "NO" : "yes", wrong_version ? "NO" : "yes", unchanged ? "NO" : "yes");
  if (!o.out.empty()) {
    std::ofstream(o.out) << json{
        {"steps", rows},
        {"initial_update_seconds", initial_update_seconds},
        {"lost", lost},
        {"wrong_version", wrong_version},
        {"unchanged",
         unchanged}}.dump(2);
  }
  return lost || wrong_version || unchanged ? 1 : 0;
}

}  // namespace kvc::bench
