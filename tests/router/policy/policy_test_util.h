// Candidates and requests for the policy tests.
#pragma once

#include <cstdint>
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
}  // namespace kvc::testing
