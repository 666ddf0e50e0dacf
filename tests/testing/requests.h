// A byte prompt as a GenerationRequest: n samples of exactly max_tokens tokens (ignore_eos).
#pragma once

#include <cstdint>
#include <string>

#include "replica/core/engine.h"

namespace kvc::testing {

inline GenerationRequest bytes_request(const std::string& prompt, int32_t n, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt.assign(prompt.begin(), prompt.end());
  r.n = n;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace kvc::testing
