// What the router sends to replicas started with --api-key: on proxied requests, /v1/info and
// /v1/load polls, and KV-event subscriptions.
#pragma once

#include <string>

#include "http/server.h"

namespace kvc {

// {"authorization", "Bearer KEY"}, or nothing when `key` is empty (replicas without a key).
inline http::Headers replica_auth_headers(const std::string& key) {
  if (key.empty()) return {};
  return {{"authorization", "Bearer " + key}};
}

}  // namespace kvc
