// `kvcascade demo` (what `make demo` runs): the seed's arithmetic, then the serving stack on
// loopback - 2 replicas (tiny random-weight model, CPU) behind the router - driven by a built-in
// workload (a system prompt shared by all, documents, n=8 sampling groups, a GRPO-style burst,
// a multi-turn chat, one near-miss prompt with a timestamp inside its system prompt), then a
// summary read back from the servers' /metrics and /router/state. --keep-running leaves it up.
#include <algorithm>
#include <cstdio>
#include <future>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/prometheus_process.h"
#include "cli/server_flags.h"
#include "http/client.h"
#include "replica/model/bandwidth_model.h"
#include "replica/server/local_replica.h"
#include "router/router_stack.h"

namespace kvc::cli {
namespace {

using json = nlohmann::json;

struct DemoFlags {
  bool keep_running = false;
  int32_t replicas = 2;
  std::string host = "127.0.0.1";
  std::string prometheus = "/usr/bin/prometheus";
  std::string prometheus_config = "deploy/prometheus/prometheus.yml";
};

struct Sample {
  std::string name, labels;
  double value;
};

// Sample lines of a Prometheus text exposition.
std::vector<Sample> parse_metrics(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    const size_t brace = line.find('{');
    Sample s;
    s.name = line.substr(0, std::min(brace, sp));
    s.labels = brace < sp ? line.substr(brace, sp - brace) : "";
    s.value = std::strtod(line.c_str() + sp + 1, nullptr);
    out.push_back(std::move(s));
  }
  return out;
}

double total(const std::vector<Sample>& samples, const std::string& name,
             const std::string& label_part = "") {
  double sum = 0;
  for (const Sample& s : samples) {
    if (s.name == name && s.labels.find(label_part) != std::string::npos) sum += s.value;
  }
  return sum;
}

std::string system_prompt(const std::string& date) {
  std::string s = "You are the finance team's assistant. Today is " + date + ". ";
  for (int i = 0; i < 16; ++i)
    s += "Rule " + std::to_string(i) + ": cite sources, be precise. ";
  return s;
}

json completion(const std::string& prompt, int n, int max_tokens, uint64_t seed) {
  return {{"model", "tiny"},          {"prompt", prompt}, {"n", n},
          {"max_tokens", max_tokens}, {"seed", seed},     {"ignore_eos", true}};
}

class Workload {
 public:
  Workload(std::string host, uint16_t port) : host_(std::move(host)), port_(port) {}

  std::string post(const std::string& path, const json& body) {
    auto r = client_.request(host_, port_, "POST", path, body.dump(),
                             {{"content-type", "application/json"}}, std::chrono::seconds(120));
    if (!r.ok() || r->status != 200) {
      ++failures_;
      return r.ok() ? "HTTP " + std::to_string(r->status) : r.error().message;
    }
    return r->header("x-kvcascade-replica").value_or("?") + " (" +
           r->header("x-kvcascade-route-reason").value_or("?") + ", " +
           r->header("x-kvcascade-matched-bytes").value_or("0") + " bytes cached)";
  }
  int failures() const { return failures_; }

 private:
  http::Client client_;
  std::string host_;
  uint16_t port_;
  int failures_ = 0;
};

void run_workload(Workload& w) {
  const std::string system = system_prompt("2026-11-29");
  const char* docs[] = {"Document A: Q3 revenue rose 4% on services. ",
                        "Document B: operating costs fell 2% after the move. ",
                        "Document C: the audit found no material weakness. "};
  std::printf("  [1/5] warm the shared system prompt ........ %s\n",
              w.post("/v1/completions", completion(system + "Hello.", 1, 4, 1)).c_str());
  for (int d = 0; d < 3; ++d) {
    std::printf("  [2/5] document %c, n=8 samples .............. %s\n", 'A' + d,
                w.post("/v1/completions",
                       completion(system + docs[d] + "Summarise the document.", 8, 16, 10 + d))
                    .c_str());
  }
  // A GRPO-style client sends its 8 rollouts as 8 identical requests at once.
  const json rollout =
      completion(system + docs[0] + "Solve: what grew, and by how much?", 1, 16, 7);
  std::vector<std::future<std::string>> burst;
  for (int i = 0; i < 8; ++i) {
    burst.push_back(std::async(std::launch::async,
                               [&w, rollout] { return w.post("/v1/completions", rollout); }));
  }
  std::map<std::string, int> where;
  for (auto& f : burst) {
    const std::string reply = f.get();
    ++where[reply.substr(0, reply.find(' '))];
  }
  std::printf("  [3/5] GRPO burst of 8 identical requests ... ");
  for (const auto& [replica, n] : where)
    std::printf("%s x%d ", replica.c_str(), n);
  std::printf("\n");
  json chat = {{"model", "tiny"}, {"max_tokens", 8}, {"seed", 3}, {"ignore_eos", true}};
  chat["messages"] = json::array({{{"role", "system"}, {"content", system}},
                                  {{"role", "user"}, {"content", "What changed in Q3?"}}});
  std::printf("  [4/5] chat turn 1 ........................... %s\n",
              w.post("/v1/chat/completions", chat).c_str());
  chat["messages"].push_back({{"role", "assistant"}, {"content", "Revenue rose."}});
  chat["messages"].push_back({{"role", "user"}, {"content", "And costs?"}});
  std::printf("  [4/5] chat turn 2 (extends turn 1) .......... %s\n",
              w.post("/v1/chat/completions", chat).c_str());
  std::printf("  [5/5] near miss: timestamp in the system prompt %s\n",
              w.post("/v1/completions",
                     completion(system_prompt("2026-11-30") + docs[1] + "Summarise.", 1, 4, 5))
                  .c_str());
}

using Cumulative = std::map<double, double>;  // le -> cumulative count (+Inf as 1e300)

Cumulative histogram_from_samples(const std::vector<Sample>& all, const std::string& name) {
  Cumulative cumulative;  // summed over replicas
  for (const Sample& s : all) {
    if (s.name != name + "_bucket") continue;
    const size_t q = s.labels.find("le=\"");
    const std::string le = s.labels.substr(q + 4, s.labels.find('"', q + 4) - q - 4);
    cumulative[le == "+Inf" ? 1e300 : std::stod(le)] += s.value;
  }
  return cumulative;
}

// The part of the summary both sources share: the two distributions, cascade share, bytes.
void print_sharing(const Cumulative& shared, const Cumulative& siblings, double kept, double flat,
                   double read, double saved) {
  auto print = [](const char* title, const Cumulative& c) {
    std::printf("  %s:\n", title);
    double prev = 0;
    for (const auto& [le, count] : c) {
      if (count - prev > 0 && le < 1e300) std::printf("      <= %-8.0f %6.0f\n", le, count - prev);
      prev = count;
    }
  };
  // Every candidate level, kept as a cascade level or run flat: the decisions below say which.
  print("shared-prefix tokens per candidate level (cascade or flat) and decode step", shared);
  print("siblings per candidate level (cascade or flat) and decode step", siblings);
  std::printf("  cascade share of level decisions: %.0f%% (%.0f cascade, %.0f flat)\n",
              kept + flat > 0 ? 100 * kept / (kept + flat) : 0.0, kept, flat);
  std::printf(
      "  KV bytes read by decode attention: %.1f MiB; saved versus flat: %.1f MiB (%.1fx)\n",
      read / 1048576, saved / 1048576, read > 0 ? (read + saved) / read : 0.0);
}

void print_summary(const std::string& host, uint16_t router_port,
                   const std::vector<std::unique_ptr<LocalReplica>>& replicas) {
  http::Client client;
  auto state = client.request(host, router_port, "GET", "/router/state");
  if (state.ok()) {
    const json s = json::parse(state->body, nullptr, false);
    std::printf("\n  requests by replica and route reason (router):\n");
    for (const auto& r : s["routed"]) {
      std::printf("    %-10s %-16s %3d\n", r["replica"].get<std::string>().c_str(),
                  r["reason"].get<std::string>().c_str(), r["count"].get<int>());
    }
    std::printf("  near-miss prefixes: %d\n", s["near_misses"].get<int>());
  }
  std::vector<Sample> all;
  for (const auto& r : replicas) {
    auto m = client.request(host, r->port(), "GET", "/metrics");
    if (!m.ok()) continue;
    const auto samples = parse_metrics(m->body);
    const double q = total(samples, "kvcascade_prefix_cache_query_tokens_total");
    const double h = total(samples, "kvcascade_prefix_cache_hit_tokens_total");
    std::printf("  %s (%s): prefix-cache hit rate %.0f%% (%.0f of %.0f prompt tokens)\n",
                r->id().c_str(), r->address().c_str(), q > 0 ? 100 * h / q : 0.0, h, q);
    all.insert(all.end(), samples.begin(), samples.end());
  }
  print_sharing(histogram_from_samples(all, "kvcascade_decode_batch_shared_prefix_tokens"),
                histogram_from_samples(all, "kvcascade_decode_batch_sibling_count"),
                total(all, "kvcascade_cascade_decisions_total", "decision=\"cascade\""),
                total(all, "kvcascade_cascade_decisions_total", "decision=\"flat\""),
                total(all, "kvcascade_kv_bytes_read_total"),
                total(all, "kvcascade_kv_bytes_saved_total"));
}

double scalar(const PrometheusProcess& prom, const std::string& q) {
  auto r = prom.query(q);
  if (!r.ok() || r->empty()) return 0;
  return std::stod((*r)[0]["value"][1].get<std::string>());
}

Cumulative histogram_from_prometheus(const PrometheusProcess& prom, const std::string& name) {
  Cumulative cumulative;
  auto r = prom.query("sum by (le) (" + name + "_bucket)");
  if (!r.ok()) return cumulative;
  for (const auto& row : *r) {
    const std::string le = row["metric"].value("le", "+Inf");
    cumulative[le == "+Inf" ? 1e300 : std::stod(le)] =
        std::stod(row["value"][1].get<std::string>());
  }
  return cumulative;
}

// The same summary, read back from Prometheus (what the Grafana dashboard shows).
// names: scrape address -> replica id (the router's series carry the id already).
void print_prometheus_summary(const PrometheusProcess& prom,
                              const std::map<std::string, std::string>& names) {
  std::printf("\n  (read back from Prometheus at http://127.0.0.1:%u)\n", prom.port());
  std::printf("  requests by replica and route reason:\n");
  if (auto r = prom.query("sum by (replica, reason) (kvcascade_router_requests_total)"); r.ok()) {
    for (const auto& row : *r) {
      std::printf("    %-10s %-16s %3.0f\n", row["metric"].value("replica", "").c_str(),
                  row["metric"].value("reason", "").c_str(),
                  std::stod(row["value"][1].get<std::string>()));
    }
  }
  std::printf("  near-miss prefixes: %.0f\n",
              scalar(prom, "sum(kvcascade_router_near_miss_prefixes_total)"));
  if (auto r = prom.query("sum by (instance) (kvcascade_prefix_cache_hit_tokens_total) / "
                          "sum by (instance) (kvcascade_prefix_cache_query_tokens_total)");
      r.ok()) {
    for (const auto& row : *r) {
      const std::string instance = row["metric"].value("instance", "");
      const auto name = names.find(instance);
      std::printf("  %s (%s): prefix-cache hit rate %.0f%%\n",
                  name != names.end() ? name->second.c_str() : "?", instance.c_str(),
                  100 * std::stod(row["value"][1].get<std::string>()));
    }
  }
  print_sharing(histogram_from_prometheus(prom, "kvcascade_decode_batch_shared_prefix_tokens"),
                histogram_from_prometheus(prom, "kvcascade_decode_batch_sibling_count"),
                scalar(prom, "sum(kvcascade_cascade_decisions_total{decision=\"cascade\"})"),
                scalar(prom, "sum(kvcascade_cascade_decisions_total{decision=\"flat\"})"),
                scalar(prom, "sum(kvcascade_kv_bytes_read_total)"),
                scalar(prom, "sum(kvcascade_kv_bytes_saved_total)"));
}

int run_demo(const DemoFlags& f) {
  std::cout << "== the seed's worked example: 2 prompts x 64 rollouts, 4096-token prefix, "
               "1024-token completions, Llama-3-8B shape\n";
  const ModelConfig model = *preset_config("llama3-8b");
  const DecodeWorkload work{2, 64, 4096, 1024};
  std::cout << format_report(model, work, Hardware{}, plan_decode_step(model, work, Hardware{}));

  if (f.keep_running) block_shutdown_signals();
  std::cout << "\n== router + " << f.replicas << " CPU replicas (tiny model) on " << f.host << "\n";
  std::vector<std::unique_ptr<LocalReplica>> replicas;
  RouterStackConfig rc;
  for (int i = 0; i < f.replicas; ++i) {
    replicas.push_back(
        std::make_unique<LocalReplica>("replica-" + std::to_string(i), 2048, f.host));
    if (replicas.back()->port() == 0) {
      std::fprintf(stderr, "demo: replica %d could not listen\n", i);
      return 1;
    }
    rc.replicas.push_back(replicas.back()->address());
    std::printf("  replica-%d  http://%s\n", i, replicas.back()->address().c_str());
  }
  rc.pool.poll_interval = std::chrono::milliseconds(200);
  rc.router.debug_headers = true;  // the walkthrough prints how many bytes each route matched
  RouterStack router(rc);
  auto port = router.start(f.host, 0);
  if (!port.ok()) {
    std::fprintf(stderr, "demo: router: %s\n", port.error().message.c_str());
    return 1;
  }
  std::printf("  router     http://%s:%u\n", f.host.c_str(), *port);
  // Let the router see every replica and subscribe to its KV events (bounded wait).
  for (int i = 0; i < 100; ++i) {
    auto s = router.pool().snapshot();
    if (std::all_of(s.begin(), s.end(), [](auto& r) { return r.healthy && r.exact; })) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<ScrapeTarget> targets{{f.host + ":" + std::to_string(*port), "router"}};
  for (const auto& r : replicas)
    targets.push_back({r->address(), "replica"});
  auto prom = PrometheusProcess::start(f.prometheus, f.prometheus_config, targets);
  if (prom.ok()) {
    std::printf("  prometheus http://127.0.0.1:%u\n\n", (*prom)->port());
  } else {
    std::printf("  prometheus: not started (%s); the summary reads /metrics directly\n\n",
                prom.error().message.c_str());
  }
  Workload w(f.host, *port);
  run_workload(w);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // last KV events and metrics
  if (prom.ok()) {
    (*prom)->wait_for_fresh_scrapes(targets.size());
    std::map<std::string, std::string> names;
    for (const auto& r : replicas)
      names[r->address()] = r->id();
    print_prometheus_summary(**prom, names);
  } else {
    print_summary(f.host, *port, replicas);
  }
  if (w.failures() > 0) {
    std::fprintf(stderr, "demo: %d requests failed\n", w.failures());
    return 1;
  }
  if (f.keep_running) {
    std::printf(
        "\nrunning; try: curl -s http://%s:%u/v1/completions -d "
        "'{\"model\":\"tiny\",\"prompt\":\"Hello\",\"n\":4,\"max_tokens\":16}'\n"
        "metrics: http://%s:%u/metrics   (Ctrl-C stops everything)\n",
        f.host.c_str(), *port, f.host.c_str(), *port);
    std::fflush(stdout);
    wait_for_shutdown_signal();
  }
  router.stop();
  return 0;
}

}  // namespace

Run add_demo_command(CLI::App& app) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand("demo", "run the router + CPU replicas demo");
  cmd->add_flag("--keep-running", flags->keep_running, "leave the servers up and print the URLs");
  cmd->add_option("--replicas", flags->replicas, "CPU replicas to start")->check(CLI::Range(1, 8));
  cmd->add_option("--prometheus", flags->prometheus,
                  "Prometheus server binary (skipped if absent)");
  cmd->add_option("--prometheus-config", flags->prometheus_config,
                  "scrape configuration (its targets are written for the ports in use)");
  return [flags] { return run_demo(*flags); };
}

}  // namespace kvc::cli
