// Candidates and requests for the policy tests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "router/policy/policy.h"

namespace kvc::testing {

// Three healthy candidates, replica i named "replica-i", nothing cached or queued.
inline std::vector<Candidate> three() {
  std::vector<Candidate> cs(3);
  for (uint32_t i = 0; i < 3; ++i) {
    cs[i].replica = i;
    cs[i].id = "replica-" + std::to_string(i);
  }
  return cs;
}

inline RouteRequest request(int64_t prompt_bytes, std::string key = "k") {
  RouteRequest r;
  r.prompt_bytes = prompt_bytes;
  r.affinity_key = std::move(key);
  return r;
}

// A random decision among six replicas: a third of them holding a random match, random queues
// and running sequences, half with reported work; a random prompt and completion, half with the
// fleet's mean request.
inline std::pair<std::vector<Candidate>, RouteRequest> random_decision(std::mt19937& rng) {
  std::vector<Candidate> cs = three();
  cs.resize(6);
  for (uint32_t k = 0; k < cs.size(); ++k) {
    cs[k].replica = k;
    cs[k].id = "replica-" + std::to_string(k);
    cs[k].matched_blocks = rng() % 3 == 0 ? rng() % 300 : 0;
    cs[k].queued_prefill_tokens = static_cast<int64_t>(rng() % 20000);
    cs[k].running_sequences = static_cast<int64_t>(rng() % 40);
    if (rng() % 2) cs[k].routed_work = static_cast<double>(rng() % 400000);
  }
  RouteRequest r = request(100 + rng() % 6000, std::to_string(rng() % 50));
  r.max_tokens = rng() % 500;
  if (rng() % 2) r.fleet_request_work = 1000 + rng() % 20000;
  return {std::move(cs), std::move(r)};
}

}  // namespace kvc::testing
