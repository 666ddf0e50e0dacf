#include "bench/routing_bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "api/chat_render.h"
#include "bench/loadgen.h"
#include "bench/routing_plot.h"
#include "http/client.h"
#include "prefix_index/block_hash.h"
#include "replica/backend/sim/sim_backend.h"
#include "replica/server/local_replica.h"
#include "router/policy/policy.h"
#include "router/router_stack.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;
using Steady = std::chrono::steady_clock;
constexpr size_t kBlock = kRoutingBlock;
constexpr int32_t kMaxTokensPerStep = 2048;  // each sim replica's step budget
constexpr size_t kRouterMaxConnections = 4096;

double ms_since(Steady::time_point t0, Steady::time_point t) {
  return std::chrono::duration<double, std::milli>(t - t0).count();
}

std::string request_body(const TraceRequest& r, const std::string& model) {
  json j = {{"model", model},     {"n", r.n},       {"max_tokens", r.max_tokens},
            {"ignore_eos", true}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (r.is_chat()) {
    j["messages"] = r.messages;
  } else {
    j["prompt"] = r.prompt;
  }
  if (!r.group.empty()) j["group"] = r.group;
  if (r.group_size > 0) j["group_size"] = r.group_size;
  return j.dump();
}

// One replayed request: filled on the client's I/O thread, read after `done`.
struct Exchange {
  Steady::time_point sent;
  std::optional<Steady::time_point> first_token;
  std::optional<Steady::time_point> finished;  // unset: its exchange never ended
  int status = 0;
  std::string replica;
  std::string reason;   // the router's x-kvcascade-route-reason
  std::string matched;  // x-kvcascade-matched-bytes: the prompt bytes the chosen replica held
  std::string detail;   // x-kvcascade-route-detail: the policy's view of every replica
  std::string pending;  // SSE bytes not yet split into events
  json usage;
  std::string error;
};

// True when an SSE data event carries generated text (not just a role or the usage).
bool has_text(std::string_view event) {
  for (std::string_view key :
       {std::string_view("\"text\":\""), std::string_view("\"content\":\"")}) {
    const size_t at = event.find(key);
    if (at != std::string_view::npos && at + key.size() < event.size() &&
        event[at + key.size()] != '"') {
      return true;
    }
  }
  return false;
}

void on_body(Exchange& x, std::string_view bytes) {
  x.pending.append(bytes);
  size_t end;
  while ((end = x.pending.find("\n\n")) != std::string::npos) {
    const std::string event = x.pending.substr(0, end);
    x.pending.erase(0, end + 2);
    if (event.rfind("data: {", 0) != 0) continue;
    if (!x.first_token && has_text(event)) x.first_token = Steady::now();
    if (event.find("\"usage\":{") != std::string::npos) {
      json j = json::parse(event.substr(6), nullptr, false);
      if (!j.is_discarded() && j.contains("usage")) x.usage = j["usage"];
    }
    if (event.find("\"error\"") != std::string::npos && x.error.empty()) x.error = event.substr(6);
  }
}

struct Fleet {
  std::vector<std::unique_ptr<LocalReplica>> replicas;
  std::map<std::string, size_t> index_of;  // replica id -> index
  int64_t kv_blocks = 0;                   // of all replicas' pools (kBlock tokens each)
  int64_t host_blocks = 0;                 // of their host tiers
};

Result<Fleet> start_fleet(const RoutingBenchOptions& o) {
  Fleet f;
  if (o.backend == "cpu") {
    if (o.kv_host_memory_gb > 0) return Error{"--kv-host-memory-gb: sim replicas only"};
    for (int32_t i = 0; i < o.replicas; ++i) {
      const std::string id = "cpu" + std::to_string(i);
      ReplicaStackConfig config;
      config.server.stream_interval = o.stream_interval;
      config.engine.cold_reuse_rate = o.kv_cold_reuse_rate;
      const int32_t blocks = o.kv_blocks > 0 ? o.kv_blocks : 4096;
      f.replicas.push_back(std::make_unique<LocalReplica>(id, blocks, std::move(config)));
      f.kv_blocks += blocks;
      if (f.replicas.back()->port() == 0) return Error{"cpu replica " + id + " could not listen"};
      f.index_of[id] = static_cast<size_t>(i);
    }
    return f;
  }
  for (int32_t i = 0; i < o.replicas; ++i) {
    Result<SimPreset> preset =
        sim_preset(o.sim_presets[static_cast<size_t>(i) % o.sim_presets.size()]);
    if (!preset.ok()) return Error{preset.error().message};
    const int32_t blocks = o.kv_blocks > 0 ? o.kv_blocks : sim_kv_blocks(*preset, 0.9, kBlock);
    const int32_t host = sim_host_blocks(*preset, o.kv_host_memory_gb, kBlock);
    f.kv_blocks += blocks;
    f.host_blocks += host;
    auto backend = std::make_unique<SimBackend>(std::move(preset).value(), blocks, kBlock,
                                                SteadyClock::instance(), host);
    ReplicaStackConfig config;
    config.engine.scheduler.max_model_len = 32768;
    config.engine.scheduler.max_tokens_per_step = kMaxTokensPerStep;
    config.engine.cold_reuse_rate = o.kv_cold_reuse_rate;
    config.server.stream_interval = o.stream_interval;
    const std::string id = "sim" + std::to_string(i);
    f.replicas.push_back(std::make_unique<LocalReplica>(id, std::move(backend), std::move(config)));
    if (f.replicas.back()->port() == 0) return Error{"sim replica " + id + " could not listen"};
    f.index_of[id] = static_cast<size_t>(i);
  }
  return f;
}

// Waits (bounded) until the router sees every replica healthy and subscribed to KV events.
bool wait_ready(RouterStack& router, size_t replicas) {
  for (int i = 0; i < 200; ++i) {
    const auto views = router.pool().snapshot();
    const auto ready = std::count_if(views.begin(), views.end(),
                                     [](const ReplicaView& v) { return v.healthy && v.exact; });
    if (static_cast<size_t>(ready) == replicas) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace

Result<RoutingResult> run_routing(const std::vector<TraceRequest>& trace, const std::string& mix,
                                  const std::string& policy, const RoutingBenchOptions& o,
                                  int32_t num_routers) {
  Result<Fleet> fleet = start_fleet(o);
  if (!fleet.ok()) return fleet.error();
  RouterStackConfig rc;
  rc.router.policy = policy;
  // Open-loop bursts hold many requests at once (an RL step is up to 64 requests at one instant,
  // and queued ones keep their connections): the default 1,024 refused some with 503.
  rc.limits.max_connections = kRouterMaxConnections;
  rc.pool.poll_interval = std::chrono::milliseconds(o.router_poll_ms);
  rc.routed_ttl = std::chrono::milliseconds(o.routed_ttl_ms);
  // The matched bytes and the policy's view of the replicas at each decision.
  rc.router.debug_headers = !o.decisions.empty();
  for (const auto& r : fleet->replicas)
    rc.replicas.push_back(r->address());
  std::vector<std::unique_ptr<RouterStack>> routers;
  std::vector<uint16_t> ports;
  for (int32_t i = 0; i < std::max(num_routers, 1); ++i) {
    routers.push_back(std::make_unique<RouterStack>(rc));
    Result<uint16_t> port = routers.back()->start("127.0.0.1", 0);
    if (!port.ok()) return port.error();
    ports.push_back(*port);
  }
  for (auto& router : routers) {
    if (!wait_ready(*router, fleet->replicas.size())) {
      return Error{"a router did not see every sim replica healthy and subscribed within 10 s"};
    }
  }
  const std::string model = fleet->replicas[0]->engine().model().name;

  std::vector<std::shared_ptr<Exchange>> xs(trace.size());
  std::mutex mu;
  std::condition_variable cv;  // a request finished
  std::mutex tick_mu;
  std::condition_variable tick;  // the replay ended (wakes the progress thread)
  size_t done = 0;
  std::atomic<size_t> sent{0};
  // Declared after what its callbacks touch: its destructor ends them first.
  http::ClientLimits limits;
  limits.max_idle_per_host = 256;
  http::Client client(limits);
  std::atomic<bool> replaying{true};
  const Steady::time_point t0 = Steady::now();
  std::thread progress([&] {
    while (o.progress) {
      std::unique_lock lock(tick_mu);
      if (tick.wait_for(lock, std::chrono::seconds(1), [&] { return !replaying; })) break;
      size_t finished;
      {
        std::lock_guard done_lock(mu);
        finished = done;
      }
      std::fprintf(stderr, "  [%s / %s] %5.1f s: sent %zu / %zu, done %zu\n", mix.c_str(),
                   policy.c_str(), ms_since(t0, Steady::now()) / 1e3, sent.load(), trace.size(),
                   finished);
    }
  });
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.request_timeout_s * 1e3));
  for (size_t i = 0; i < trace.size(); ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Steady::duration>(
                                           std::chrono::duration<double>(trace[i].arrival_s)));
    auto x = std::make_shared<Exchange>();
    xs[i] = x;
    x->sent = Steady::now();
    http::StreamOptions so;
    so.response_header_timeout = timeout;
    so.body_idle_timeout = timeout;
    client.stream(
        "127.0.0.1", ports[i % ports.size()], "POST",
        trace[i].is_chat() ? "/v1/chat/completions" : "/v1/completions",
        request_body(trace[i], model), {{"content-type", "application/json"}},
        [x](int status, const http::Headers& headers) {
          x->status = status;
          for (const auto& [k, v] : headers) {
            if (k == "x-kvcascade-replica") x->replica = v;
            if (k == "x-kvcascade-route-reason") x->reason = v;
            if (k == "x-kvcascade-matched-bytes") x->matched = v;
            if (k == "x-kvcascade-route-detail") x->detail = v;
          }
        },
        [x](std::string_view bytes) {
          on_body(*x, bytes);
          return true;
        },
        [x, &mu, &cv, &done](Status s) {
          x->finished = Steady::now();
          if (!s.ok() && x->error.empty()) x->error = s.message();
          std::lock_guard lock(mu);
          ++done;
          cv.notify_all();
        },
        so);
    ++sent;
  }
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, timeout + std::chrono::seconds(5), [&] { return done == trace.size(); });
  }
  RoutingResult res;
  res.seconds = ms_since(t0, Steady::now()) / 1e3;
  {
    std::lock_guard lock(tick_mu);
    replaying = false;
  }
  tick.notify_all();
  progress.join();
  client.shutdown();  // anything still in flight ends (counted as an error below)...
  {
    std::unique_lock lock(mu);  // ...once its on_done ran: nothing writes an Exchange after this
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return done == trace.size(); });
  }

  res.mix = mix;
  res.policy = policy;
  res.routers = static_cast<int32_t>(routers.size());
  res.ttft_slo_ms = o.ttft_slo_ms;
  res.requests = static_cast<int64_t>(trace.size());
  res.replica_work.assign(fleet->replicas.size(), 0);
  // Per request for the --decisions file, summed for the hit ratio.
  const std::vector<int64_t> oracle = oracle_cached_per_request(trace);
  res.oracle_cached_tokens = std::accumulate(oracle.begin(), oracle.end(), int64_t{0});
  res.fleet_kv_tokens = fleet->kv_blocks * kBlock;
  res.fleet_host_kv_tokens = fleet->host_blocks * kBlock;
  // The references pool every block the fleet can keep, its host tiers' too (a tier is
  // inclusive and loads need pool blocks, so the LRU reference flatters a tiered fleet more).
  const int64_t pooled = fleet->kv_blocks + fleet->host_blocks;
  const std::vector<int64_t> lru = fleet_lru_cached_per_request(trace, pooled);
  res.fleet_lru_cached_tokens = std::accumulate(lru.begin(), lru.end(), int64_t{0});
  // LRU <= MIN <= the oracle where every prompt fits the fleet's memory (a prompt a replica
  // cannot hold is refused anyway): where LRU serves everything, so does MIN.
  res.fleet_min_cached_tokens = res.fleet_lru_cached_tokens == res.oracle_cached_tokens
                                    ? res.oracle_cached_tokens
                                    : fleet_min_cached_tokens(trace, pooled);
  // block hash -> the replicas that computed it (cross_replica_prefill_tokens)
  std::unordered_map<uint64_t, std::vector<size_t>> computed_on;
  const BlockHash seed = chain_seed("oracle");
  for (size_t i = 0; i < xs.size(); ++i) {
    const Exchange& x = *xs[i];
    const bool ok =
        x.status == 200 && x.error.empty() && x.usage.is_object() && x.first_token && x.finished;
    if (!ok) {
      ++res.errors;
      std::string why = x.status != 200 ? "status " + std::to_string(x.status) + ": " : "";
      // A refused request's body is a JSON error, not SSE: it stays in `pending`.
      why += !x.error.empty()                   ? x.error
             : x.status != 200 && x.status != 0 ? x.pending
             : !x.first_token                   ? "no token"
             : !x.finished                      ? "not finished"
                                                : "no usage";
      ++res.error_reasons[why.substr(0, 160)];
      continue;
    }
    const int64_t prompt = x.usage.value("prompt_tokens", int64_t{0});
    const int64_t cached = x.usage["prompt_tokens_details"].value("cached_tokens", int64_t{0});
    const int64_t completion = x.usage.value("completion_tokens", int64_t{0});
    res.prompt_tokens += prompt;
    res.cached_tokens += cached;
    auto it = fleet->index_of.find(x.replica);
    if (it != fleet->index_of.end()) {
      res.replica_work[it->second] += prompt - cached + completion;
      // The sim replicas tokenize bytes: the blocks past the cached ones were computed there.
      const std::vector<BlockHash> blocks = hash_blocks(seed, prompt_bytes(trace[i]), kBlock);
      for (size_t b = static_cast<size_t>(cached) / kBlock; b < blocks.size(); ++b) {
        std::vector<size_t>& on = computed_on[blocks[b].value];
        if (std::find(on.begin(), on.end(), it->second) != on.end()) continue;
        if (!on.empty()) res.cross_replica_prefill_tokens += static_cast<int64_t>(kBlock);
        on.push_back(it->second);
      }
    }
    res.ttft_ms.push_back(ms_since(x.sent, *x.first_token));
    res.e2e_ms.push_back(ms_since(x.sent, *x.finished));
  }
  std::map<std::string, std::set<std::string>> group_replicas;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (trace[i].group.empty() || trace[i].group_size <= 1 || xs[i]->replica.empty()) continue;
    group_replicas[trace[i].group].insert(xs[i]->replica);
  }
  res.groups = static_cast<int64_t>(group_replicas.size());
  for (const auto& [group, on] : group_replicas)
    res.split_groups += on.size() > 1;
  if (!o.decisions.empty()) {
    std::string file = mix + "-" + policy + "-routers" + std::to_string(res.routers) + ".tsv";
    std::replace(file.begin(), file.end(), '/', '_');
    std::ofstream out(o.decisions + "/" + file);
    out << "request\tarrival_s\trouter\tgroup\tn\tprompt_bytes\treplica\treason\tmatched\tcached"
           "\toracle\tttft_ms\tsent_s\te2e_ms\tdetail\n";
    for (size_t i = 0; i < xs.size(); ++i) {
      const Exchange& x = *xs[i];
      const int64_t cached =
          x.usage.is_object() && x.usage.contains("prompt_tokens_details")
              ? x.usage["prompt_tokens_details"].value("cached_tokens", int64_t{0})
              : -1;
      out << i << "\t" << std::fixed << std::setprecision(6) << trace[i].arrival_s
          << std::defaultfloat << "\t" << (i % routers.size()) << "\t" << trace[i].group << "\t"
          << trace[i].n << "\t" << prompt_bytes(trace[i]).size() << "\t" << x.replica << "\t"
          << x.reason << "\t" << x.matched << "\t" << cached << "\t" << oracle[i] << "\t"
          << (x.first_token ? ms_since(x.sent, *x.first_token) : -1.0);
      // When it was sent (the replay may fall behind the trace's arrivals, seconds since the
      // replay's start) and how long it took (-1: it failed or never ended): when its prompt's
      // blocks were held (bench/results/runs/2026-12-06-s18-mooncake-pools).
      const bool ended = x.finished && x.status == 200 && x.error.empty();
      out << "\t" << std::fixed << ms_since(t0, x.sent) / 1e3 << std::defaultfloat << "\t"
          << (ended ? ms_since(x.sent, *x.finished) : -1.0) << "\t" << x.detail << "\n";
    }
  }
  double busy_s = 0;
  for (const auto& r : fleet->replicas) {
    const LoadSnapshot load = r->loop().load();
    res.replica_computed_tokens.push_back(load.num_computed_tokens);
    res.replica_preemptions.push_back(load.num_preemptions);
    if (const auto* sim = dynamic_cast<const SimBackend*>(&r->backend())) {
      const double s = std::chrono::duration<double>(sim->busy()).count();
      busy_s += s;
      res.replica_busy.push_back(res.seconds > 0 ? s / res.seconds : 0);
    }
  }
  res.busy =
      res.seconds > 0 ? busy_s / (res.seconds * static_cast<double>(fleet->replicas.size())) : 0;
  for (auto& router : routers)
    router->stop();
  return res;
}

namespace {

// 200 -> "200", 12.5 -> "12.5".
std::string rate_label(double rate) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", rate);
  return buf;
}

int write_plot(const json& doc, const std::string& path) {
  Result<std::string> svg = routing_plot_svg(doc);
  if (!svg.ok()) {
    std::fprintf(stderr, "kvcascade bench routing: %s\n", svg.error().message.c_str());
    return 1;
  }
  std::ofstream out(path);
  out << *svg;
  if (!out) {
    std::fprintf(stderr, "kvcascade bench routing: cannot write %s\n", path.c_str());
    return 1;
  }
  std::fprintf(stderr, "kvcascade bench routing: plot written to %s\n", path.c_str());
  return 0;
}

}  // namespace

int run_routing_bench(const RoutingBenchOptions& o) {
  if (!o.replot.empty()) {
    if (o.plot.empty()) {
      std::fprintf(stderr, "kvcascade bench routing: --replot needs --plot FILE.svg\n");
      return 2;
    }
    std::ifstream in(o.replot);
    json doc = json::parse(in, nullptr, false);
    if (!in.is_open() || doc.is_discarded()) {
      std::fprintf(stderr, "kvcascade bench routing: cannot read %s as JSON\n", o.replot.c_str());
      return 2;
    }
    return write_plot(doc, o.plot);
  }
  const std::vector<std::string> known = policy_names();
  for (const std::string& p : o.policies) {
    if (std::find(known.begin(), known.end(), p) == known.end()) {
      std::fprintf(stderr, "kvcascade bench routing: unknown policy '%s'\n", p.c_str());
      return 2;
    }
  }
  if (o.routers.empty()) {
    std::fprintf(stderr, "kvcascade bench routing: --routers needs a count\n");
    return 2;
  }
  if (o.sim_presets.empty()) {
    std::fprintf(stderr, "kvcascade bench routing: --sim-preset needs a preset\n");
    return 2;
  }
  for (const std::string& name : o.sim_presets) {
    if (Result<SimPreset> p = sim_preset(name); !p.ok()) {
      std::fprintf(stderr, "kvcascade bench routing: %s\n", p.error().message.c_str());
      return 2;
    }
  }
  if (o.save_only && (o.save_traces.empty() || !o.trace.empty())) {
    std::fprintf(stderr,
                 "kvcascade bench routing: --save-only needs --save-traces DIR and --mix\n");
    return 2;
  }
  std::vector<std::pair<std::string, std::vector<TraceRequest>>> traces;
  if (!o.trace.empty() && !o.rates.empty()) {
    std::fprintf(stderr,
                 "kvcascade bench routing: --rate applies to synthetic mixes, not to a --trace "
                 "(its arrival times are replayed as recorded)\n");
    return 2;
  }
  if (!o.trace.empty()) {
    std::ifstream in(o.trace);
    if (!in) {
      std::fprintf(stderr, "kvcascade bench routing: cannot open %s\n", o.trace.c_str());
      return 2;
    }
    Result<std::vector<TraceRequest>> t = read_trace(in, o.trace);
    if (!t.ok()) {
      std::fprintf(stderr, "kvcascade bench routing: %s\n", t.error().message.c_str());
      return 2;
    }
    traces.emplace_back(o.trace, std::move(t).value());
  } else {
    for (const std::string& name : o.mixes) {
      Result<TraceMix> mix = trace_mix(name);
      if (!mix.ok()) {
        std::fprintf(stderr, "kvcascade bench routing: %s\n", mix.error().message.c_str());
        return 2;
      }
      mix->requests = o.requests;
      mix->seed = o.seed;
      if (o.rates.empty()) {
        traces.emplace_back(name, generate_trace(*mix));
        continue;
      }
      std::vector<std::string> labels;  // a rate given twice is replayed once
      for (double rate : o.rates) {
        if (std::find(labels.begin(), labels.end(), rate_label(rate)) != labels.end()) continue;
        labels.push_back(rate_label(rate));
        mix->rate_per_s = rate;
        traces.emplace_back(name + "@" + rate_label(rate) + "/s", generate_trace(*mix));
      }
    }
  }
  if (!o.save_traces.empty() && o.trace.empty()) {
    for (const auto& [name, trace] : traces) {
      std::string file = name;
      std::replace(file.begin(), file.end(), '/', '_');  // "chat@200/s" -> "chat@200_s"
      const std::string path =
          o.save_traces + "/" + file + "-seed" + std::to_string(o.seed) + ".jsonl";
      std::ofstream out(path);
      write_trace(out, trace);
      if (!out) {
        std::fprintf(stderr, "kvcascade bench routing: cannot write %s\n", path.c_str());
        return 1;
      }
      std::fprintf(stderr, "kvcascade bench routing: %zu requests written to %s\n", trace.size(),
                   path.c_str());
    }
  }
  if (o.save_only) return 0;
  json results = json::array();
  std::vector<RoutingResult> rows;
  // Per trace: TTFT with no queueing, on a replica holding what the oracle holds.
  std::map<std::string, std::vector<double>> floors;
  Result<SimPreset> preset = sim_preset(o.sim_presets.front());  // checked above
  json floor_json = json::object();
  if (o.backend == "sim") {  // the floor is the sim device's: none for real replicas
    for (const auto& [mix, trace] : traces) {
      floors[mix] = ttft_floor_ms(trace, *preset, kMaxTokensPerStep);
      const std::vector<double>& f = floors[mix];
      floor_json[mix] = {{"p50", LoadStats::percentile(f, 0.5)},
                         {"p90", LoadStats::percentile(f, 0.9)},
                         {"p99", LoadStats::percentile(f, 0.99)}};
    }
  }
  for (const auto& [mix, trace] : traces) {
    for (const std::string& policy : o.policies) {
      for (const int32_t n : o.routers) {
        std::string tier;
        if (o.kv_host_memory_gb > 0) {
          tier = ", a host tier of " + json(o.kv_host_memory_gb).dump() + " GB each";
        }
        std::fprintf(stderr,
                     "kvcascade bench routing: %s, %zu requests, policy %s, %d router(s), %d %s "
                     "replicas%s\n",
                     mix.c_str(), trace.size(), policy.c_str(), n, o.replicas, o.backend.c_str(),
                     tier.c_str());
        Result<RoutingResult> r = run_routing(trace, mix, policy, o, n);
        if (!r.ok()) {
          std::fprintf(stderr, "kvcascade bench routing: %s\n", r.error().message.c_str());
          return 1;
        }
        results.push_back(r->to_json());
        rows.push_back(std::move(r).value());
      }
    }
  }
  const bool several = o.routers.size() > 1 || o.routers.front() > 1;
  std::printf("%-10s %-20s %7s %8s %9s %8s %8s %8s %9s %9s %9s %9s %8s %6s %5s %5s\n", "mix",
              "policy", "routers", "requests", "hit/orcl", "x-replica", "max/mean", "p99/mean",
              "ttft p50", "ttft p90", "ttft p99", "e2e p50", "goodput", "errors", "busy", "bmax");
  auto pct = [](const std::vector<double>& v, double q) { return LoadStats::percentile(v, q); };
  for (size_t i = 0; i < rows.size(); ++i) {
    const RoutingResult& r = rows[i];
    std::printf(
        "%-10s %-20s %7d %8lld %8.1f%% %8.1f%% %8.2f %8.2f %9.1f %9.1f %9.1f %9.1f %7.1f%% %6lld "
        "%4.0f%% %4.0f%%\n",
        r.mix.c_str(), r.policy.c_str(), r.routers, static_cast<long long>(r.requests),
        100 * r.hit_ratio(), 100 * r.cross_replica_share(), r.max_over_mean_work(),
        r.p99_over_mean_work(), pct(r.ttft_ms, 0.5), pct(r.ttft_ms, 0.9), pct(r.ttft_ms, 0.99),
        pct(r.e2e_ms, 0.5), 100 * r.goodput(), static_cast<long long>(r.errors), 100 * r.busy,
        r.replica_busy.empty()
            ? 0.0
            : 100 * *std::max_element(r.replica_busy.begin(), r.replica_busy.end()));
    if ((i + 1 == rows.size() || rows[i + 1].mix != r.mix) && floors.count(r.mix) > 0) {
      const std::vector<double>& f = floors[r.mix];
      std::printf("%-10s %-20s %7s %8s %9s %9s %8s %8s %9.1f %9.1f %9.1f\n", r.mix.c_str(),
                  "(floor)", "", "", "", "", "", "", pct(f, 0.5), pct(f, 0.9), pct(f, 0.99));
    }
    if (i + 1 == rows.size() || rows[i + 1].mix != r.mix) {
      std::printf("%-10s %-20s %7s %8s %8.1f%%\n", r.mix.c_str(), "(fleet LRU)", "", "",
                  r.oracle_cached_tokens > 0
                      ? 100.0 * static_cast<double>(r.fleet_lru_cached_tokens) /
                            static_cast<double>(r.oracle_cached_tokens)
                      : 100.0);
      std::printf("%-10s %-20s %7s %8s %8.1f%%\n", r.mix.c_str(), "(fleet MIN)", "", "",
                  100 * r.fleet_min_ratio());
    }
  }
  if (several) {
    // Against the one-router run of the same mix and policy: what disagreeing routers cost.
    for (const RoutingResult& r : rows) {
      if (r.routers == 1) continue;
      for (const RoutingResult& one : rows) {
        if (one.routers != 1 || one.mix != r.mix || one.policy != r.policy) continue;
        std::printf(
            "%s / %s, %d routers against 1: hits %+.1f points, prefill on another replica too "
            "%+.1f%% of the oracle\n",
            r.mix.c_str(), r.policy.c_str(), r.routers, 100 * (r.hit_ratio() - one.hit_ratio()),
            100 * (r.cross_replica_share() - one.cross_replica_share()));
      }
    }
  }
  for (const RoutingResult& r : rows) {
    if (r.fleet_lru_cached_tokens < r.oracle_cached_tokens) {
      std::printf(
          "%s / %s: hits %.1f%% of what the fleet's %lld tokens of KV as one LRU cache serve; "
          "no routing over that memory serves more than %.1f%% of the oracle (fleet MIN)\n",
          r.mix.c_str(), r.policy.c_str(), 100 * r.hit_ratio_vs_fleet_lru(),
          static_cast<long long>(r.fleet_kv_tokens), 100 * r.fleet_min_ratio());
    }
  }
  std::printf(
      "(latencies in ms; hit/orcl: prompt tokens served from cache / an infinite single "
      "cache's; (fleet LRU): what one LRU cache of the fleet's KV blocks would serve, of the "
      "same; (fleet MIN): the most any routing and eviction over those blocks could serve "
      "with the requests in arrival order (Belady's MIN on one pooled cache), of the same; "
      "x-replica: prompt blocks computed on a "
      "second (third, ...) replica too, in "
      "tokens / the oracle's cached tokens; work: uncached prompt + completion tokens per replica; "
      "goodput: TTFT <= "
      "%.0f ms; busy: mean share of the replay a replica's simulated device was stepping, bmax: "
      "the busiest replica's; (floor): "
      "TTFT with no queueing on a replica holding what that cache holds)\n",
      o.ttft_slo_ms);
  const json doc{{"replicas", o.replicas},
                 {"routers", o.routers},
                 {"backend", o.backend},
                 {"sim_preset", o.backend == "sim" ? json(o.sim_presets.front()) : json(nullptr)},
                 {"sim_presets", o.backend == "sim" ? json(o.sim_presets) : json(nullptr)},
                 {"kv_host_memory_gb", o.kv_host_memory_gb},
                 {"results", results},
                 {"ttft_floor_ms", floor_json}};
  if (!o.out.empty()) {
    std::ofstream out(o.out);
    out << doc.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "kvcascade bench routing: cannot write %s\n", o.out.c_str());
      return 1;
    }
  }
  return o.plot.empty() ? 0 : write_plot(doc, o.plot);
}

}  // namespace kvc::bench
