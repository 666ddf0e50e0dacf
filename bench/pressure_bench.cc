#include "bench/pressure_bench.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "http/client.h"
#include "replica/server/local_replica.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;
using Seconds = std::chrono::duration<double>;

// One group of the memory-pressure probe: "group K " + 30 bytes, n siblings, ignore_eos.
std::string request_body(const PressureBenchOptions& o, int g) {
  return json{{"model", "tiny"},
              {"prompt", "group " + std::to_string(g) + " " + std::string(30, 'a' + g % 26)},
              {"n", o.n},
              {"max_tokens", o.max_tokens},
              {"ignore_eos", true},
              {"seed", g}}
      .dump();
}

// True when the reply is a 200 whose every choice generated max_tokens tokens.
bool whole(const PressureBenchOptions& o, const Result<http::ClientResponse>& r) {
  if (!r.ok() || r->status != 200) return false;
  const json j = json::parse(r->body, nullptr, false);
  return !j.is_discarded() && j["choices"].size() == static_cast<size_t>(o.n) &&
         j["usage"]["completion_tokens"] == o.n * o.max_tokens;
}

struct Phase {
  double seconds = 0;
  int ok = 0;
  json load;  // the replica's /v1/load afterwards (steps, preemptions)
};

Phase run_phase(const PressureBenchOptions& o, bool at_once) {
  LocalReplica replica("pressure", o.kv_blocks);
  const uint16_t port = replica.port();
  auto send = [&o, port](int g) {
    // Non-streaming: the reply's headers come only when the whole group is done.
    http::ClientLimits limits;
    limits.response_header_timeout = std::chrono::seconds(3600);
    http::Client client(limits);
    return client.request("127.0.0.1", port, "POST", "/v1/completions", request_body(o, g),
                          {{"content-type", "application/json"}}, std::chrono::seconds(3600));
  };
  Phase p;
  const auto start = std::chrono::steady_clock::now();
  if (at_once) {
    std::vector<std::future<Result<http::ClientResponse>>> replies;
    for (int g = 0; g < o.groups; ++g)
      replies.push_back(std::async(std::launch::async, send, g));
    for (auto& f : replies)
      p.ok += whole(o, f.get()) ? 1 : 0;
  } else {
    for (int g = 0; g < o.groups; ++g)
      p.ok += whole(o, send(g)) ? 1 : 0;
  }
  p.seconds = Seconds(std::chrono::steady_clock::now() - start).count();
  http::Client client;
  auto load =
      client.request("127.0.0.1", port, "GET", "/v1/load", "", {}, std::chrono::seconds(10));
  if (load.ok()) p.load = json::parse(load->body, nullptr, false);
  return p;
}

}  // namespace

int run_pressure_bench(const PressureBenchOptions& o) {
  std::printf("kv pool %d blocks of 16 tokens; %d groups x n=%d x %d tokens (ignore_eos)\n",
              o.kv_blocks, o.groups, o.n, o.max_tokens);
  const Phase alone = run_phase(o, /*at_once=*/false);
  std::printf("one at a time: %8.2f s  %d/%d whole  steps %s  preemptions %s\n", alone.seconds,
              alone.ok, o.groups, alone.load.value("steps", json()).dump().c_str(),
              alone.load.value("preemptions", json()).dump().c_str());
  std::fflush(stdout);
  const Phase together = run_phase(o, /*at_once=*/true);
  std::printf("all at once:   %8.2f s  %d/%d whole  steps %s  preemptions %s\n", together.seconds,
              together.ok, o.groups, together.load.value("steps", json()).dump().c_str(),
              together.load.value("preemptions", json()).dump().c_str());
  const double ratio = together.seconds / alone.seconds;
  const bool met = ratio <= 1.3 && together.ok == o.groups;
  std::printf("ratio %.3f (target <= 1.3: %s)\n", ratio, met ? "met" : "MISSED");
  if (!o.out.empty()) {
    const json j{
        {"kv_blocks", o.kv_blocks},
        {"groups", o.groups},
        {"n", o.n},
        {"max_tokens", o.max_tokens},
        {"one_at_a_time", {{"seconds", alone.seconds}, {"whole", alone.ok}, {"load", alone.load}}},
        {"all_at_once",
         {{"seconds", together.seconds}, {"whole", together.ok}, {"load", together.load}}},
        {"ratio", ratio},
        {"target", 1.3}};
    std::ofstream(o.out) << j.dump(2) << "\n";
  }
  return alone.ok == o.groups && together.ok == o.groups ? 0 : 1;
}

}  // namespace kvc::bench
