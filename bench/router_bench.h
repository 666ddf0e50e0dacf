// `kvcascade bench router`: what the router adds to a request, against talking to the replicas
// directly and against nginx (proxy_pass, keep-alive upstreams) on the same machine. Replicas are
// instant fakes (bench/fake_engine.h) answering like kvcascade, vLLM, SGLang or a plain OpenAI
// server (the router detects which), so only the proxies' cost is measured;
// the load is closed-loop over keep-alive connections (DESIGN.md: router p99 added latency <= 1 ms,
// throughput >= 0.7x nginx).
#pragma once

#include <string>

namespace kvc::bench {

struct RouterBenchOptions {
  std::string out;          // JSON results (empty: none)
  double seconds = 3.0;     // per measurement, after a warm-up of a tenth of it
  int concurrency = 16;     // connections of the throughput runs (the latency runs use 1)
  int replicas = 3;         // fake replicas
  int prompt_bytes = 2048;  // shared prefix per tenant (+ a unique question)
  int tenants = 8;          // distinct prefixes
  int router_threads = 1;   // the router's --http-threads (its upstream client shares them)
  std::string replica_kind = "kvcascade";  // what the fakes answer like: kvcascade, vllm, ...
  std::string nginx = "/usr/sbin/nginx";
  // The kvcascade binary run as the router (empty: this one): another build's, to compare two
  // builds' routers under the same load generator and fakes.
  std::string router_binary;
};

// Prints the table (and writes JSON); returns the process exit code (0 unless setup failed).
int run_router_bench(const RouterBenchOptions& options);

}  // namespace kvc::bench
