// Closed-loop HTTP load for OpenAI-compatible endpoints (`kvcascade loadgen`, and the router
// benchmark): keep-alive connections, each sending its next prepared request as soon as the last
// response is read. Workloads share prompt prefixes the way the serving system expects: `tenants`
// system prompts of `prompt_bytes` bytes, each request one of them plus a unique question, with n
// samples per request (parallel sampling, GRPO-style groups).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvc::bench {

struct Workload {
  std::string host = "127.0.0.1";        // the Host header
  std::string path = "/v1/completions";  // or /v1/chat/completions
  std::string model = "tiny";
  int tenants = 8;
  int prompt_bytes = 2048;
  int n = 1;
  int max_tokens = 16;
  bool stream = false;
  bool ignore_eos = false;  // every sample runs to max_tokens (comparable token counts)
  std::string api_key;      // Bearer token (empty: none)
  int questions = 64;       // distinct questions per tenant
};

// Every request of `w` as bytes on the wire (tenant fastest).
std::vector<std::string> prepare_requests(const Workload& w);

struct Endpoint {
  std::string host;
  uint16_t port = 0;
};

struct LoadStats {
  std::string target;
  int concurrency = 0;
  double seconds = 0;                 // measured window
  int64_t ok = 0;                     // 2xx responses
  int64_t exchanges = 0;              // every response read, warm-up included (for per-request CPU)
  int64_t errors = 0;                 // connection failures, timeouts and non-2xx statuses
  std::map<int, int64_t> statuses;    // by HTTP status (0: no response)
  std::vector<double> latency_ms;     // whole response, of the 2xx ones
  std::vector<double> first_byte_ms;  // first body byte, of the 2xx ones
  int64_t completion_tokens = 0;      // from the responses' usage (non-streaming)
  int64_t stream_events = 0;          // SSE data events other than [DONE] (streaming)

  double rps() const { return seconds > 0 ? static_cast<double>(ok) / seconds : 0.0; }
  static double percentile(std::vector<double> v, double q);
  nlohmann::json to_json() const;
};

// `concurrency` connections, connection i to endpoints[i % size], requests taken round-robin
// (connection i starts at a different one); a warm-up of a tenth of `seconds`, then `seconds`
// measured (a request counts when it both started and finished in the window; req/s is over the
// whole window, so it reads low unless the window spans many request latencies).
// `inspect_bodies`: parse usage / count SSE events (costs the client some CPU). `timeout_s`:
// longest wait for any one read or write of a response (then the request is an error).
LoadStats run_closed_loop(const std::string& target, const std::vector<Endpoint>& endpoints,
                          int concurrency, double seconds, const std::vector<std::string>& requests,
                          bool inspect_bodies, int timeout_s = 30);

// True when a TCP connection to `e` can be opened now.
bool can_connect(const Endpoint& e);

}  // namespace kvc::bench
