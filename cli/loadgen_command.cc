// `kvcascade loadgen`: closed-loop load against a router or a replica (bench/loadgen.h).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "bench/loadgen.h"
#include "cli/commands.h"
#include "http/client.h"

namespace kvc::cli {

using bench::can_connect;
using bench::Endpoint;
using bench::LoadStats;
using bench::prepare_requests;
using bench::run_closed_loop;
using bench::Workload;
namespace {

struct LoadgenFlags {
  std::string url = "http://127.0.0.1:8080";
  bool chat = false;
  Workload workload;
  int concurrency = 8;
  double seconds = 10.0;
  int timeout_s = 600;
  std::string out;
};

int run_loadgen(LoadgenFlags f) {
  Endpoint e;
  if (f.url.rfind("http://", 0) != 0 || !http::parse_host_port(f.url, e.host, e.port)) {
    std::fprintf(stderr, "kvcascade loadgen: --url must be http://HOST:PORT, got '%s'\n",
                 f.url.c_str());
    return 2;
  }
  if (!f.out.empty()) {
    // Before any load: a path that cannot be written would otherwise be found only after the
    // whole measured run. Opened for appending, so that an existing file is not emptied here
    // (it is replaced once the results are in).
    errno = 0;
    std::ofstream probe(f.out, std::ios::app);
    if (!probe) {
      std::fprintf(stderr, "kvcascade loadgen: cannot write --out %s: %s\n", f.out.c_str(),
                   errno != 0 ? std::strerror(errno) : "cannot open it");
      return 2;
    }
  }
  if (!can_connect(e)) {
    std::fprintf(stderr, "kvcascade loadgen: cannot connect to %s:%u\n", e.host.c_str(), e.port);
    return 1;
  }
  Workload& w = f.workload;
  const bool ipv6 = e.host.find(':') != std::string::npos;
  w.host = (ipv6 ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port);
  w.path = f.chat ? "/v1/chat/completions" : "/v1/completions";
  const auto requests = prepare_requests(w);
  std::printf(
      "kvcascade loadgen: %s%s, model %s, %d tenants x %d-byte prompt prefixes, n=%d, "
      "max_tokens %d%s, %d connections, %.1f s\n",
      f.url.c_str(), w.path.c_str(), w.model.c_str(), w.tenants, w.prompt_bytes, w.n, w.max_tokens,
      w.stream ? ", streaming" : "", f.concurrency, f.seconds);
  std::fflush(stdout);
  const LoadStats s =
      run_closed_loop(f.url, {e}, f.concurrency, f.seconds, requests, true, f.timeout_s);
  std::printf("requests: %lld ok (%.1f/s), %lld errors; statuses:", static_cast<long long>(s.ok),
              s.rps(), static_cast<long long>(s.errors));
  for (const auto& [status, n] : s.statuses)
    std::printf(" %d x %lld", status, static_cast<long long>(n));
  std::printf(" (0: no response)\n");
  std::printf("latency ms: p50 %.1f, p90 %.1f, p99 %.1f; first body byte ms: p50 %.1f, p99 %.1f\n",
              LoadStats::percentile(s.latency_ms, 0.5), LoadStats::percentile(s.latency_ms, 0.9),
              LoadStats::percentile(s.latency_ms, 0.99),
              LoadStats::percentile(s.first_byte_ms, 0.5),
              LoadStats::percentile(s.first_byte_ms, 0.99));
  if (w.stream) {
    std::printf("stream events: %lld (%.1f/s)\n", static_cast<long long>(s.stream_events),
                s.stream_events / f.seconds);
  } else {
    std::printf("completion tokens: %lld (%.1f/s)\n", static_cast<long long>(s.completion_tokens),
                s.completion_tokens / f.seconds);
  }
  if (!f.out.empty()) {
    std::ofstream file(f.out);
    file << s.to_json().dump(1) << "\n";
    if (!file) {
      std::fprintf(stderr, "kvcascade loadgen: cannot write %s\n", f.out.c_str());
      return 2;
    }
  }
  if (s.ok == 0 && s.errors == 0) {
    std::printf(
        "no request both started and finished within the measured window: raise --seconds "
        "well above one request's latency\n");
  }
  return s.ok > 0 ? 0 : 1;
}

}  // namespace

Run add_loadgen_command(CLI::App& app) {
  auto f = std::make_shared<LoadgenFlags>();
  CLI::App* cmd = app.add_subcommand(
      "loadgen", "closed-loop load with shared prompt prefixes against a router or replica");
  cmd->add_option("--url", f->url, "http://HOST:PORT of the router or replica");
  cmd->add_flag("--chat", f->chat, "use /v1/chat/completions (system prompt = the prefix)");
  cmd->add_option("--model", f->workload.model, "model name to request");
  cmd->add_option("--tenants", f->workload.tenants, "distinct shared prompt prefixes")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--prompt-bytes", f->workload.prompt_bytes, "bytes of each shared prefix")
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_option("-n", f->workload.n, "samples per request (siblings)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--max-tokens", f->workload.max_tokens, "max_tokens of each request")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--stream", f->workload.stream, "stream the responses (SSE)");
  cmd->add_flag("--ignore-eos", f->workload.ignore_eos, "ask for max_tokens tokens per sample");
  cmd->add_option("--api-key", f->workload.api_key, "send Authorization: Bearer KEY");
  cmd->add_option("--concurrency", f->concurrency, "connections, each one request at a time")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--seconds", f->seconds, "measured seconds (after a tenth of it as warm-up)")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--timeout", f->timeout_s, "seconds a response may stall before it is an error")
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--out", f->out, "write the results as JSON to this file");
  return [f] { return run_loadgen(*f); };
}

}  // namespace kvc::cli
