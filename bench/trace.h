// Request traces for routing evaluation (`kvcascade bench routing`): one JSON object per line,
//   {"arrival_s": 0.25, "prompt": "...", "n": 8, "max_tokens": 32,
//    "tenant": "t3", "session": "s12", "group": "step4-p2", "group_size": 8}
// with "messages" (OpenAI chat messages) instead of "prompt" for chat requests. Only arrival_s and
// one of prompt / messages are required (n: 1, max_tokens: 16). A generator makes synthetic mixes
// (multi-tenant system prompts + documents, multi-turn chat sessions, RL steps of G prompts x n
// samples sent as one request with n or as n requests sharing a `group`, near-miss prompts;
// Poisson or bursty arrivals); a reader takes recorded traces, with the line of any error.
#pragma once

#include <cstdint>
#include <istream>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace kvc::bench {

struct TraceRequest {
  double arrival_s = 0;     // seconds from the start of the replay
  std::string prompt;       // a completion prompt, or
  nlohmann::json messages;  // chat messages (null when `prompt` is used)
  int32_t n = 1;
  int32_t max_tokens = 16;
  std::string tenant, session, group;
  int32_t group_size = 0;  // requests sharing `group` (0: not declared)

  bool is_chat() const { return !messages.is_null(); }
};

// One line (no newline) / the request a line describes, or why it is not one.
std::string trace_line(const TraceRequest& r);
Result<TraceRequest> parse_trace_line(const std::string& line);
// Every non-blank line, sorted by arrival (stable). Errors name `source` and the line number.
Result<std::vector<TraceRequest>> read_trace(std::istream& in, const std::string& source);
void write_trace(std::ostream& out, const std::vector<TraceRequest>& trace);

// A synthetic mix. Request kinds are drawn with the given weights (they need not sum to 1).
struct TraceMix {
  std::string name = "mixed";
  int32_t requests = 5000;
  double rate_per_s = 100;  // mean arrival rate
  bool bursty = false;      // arrivals in bursts (on/off periods) instead of Poisson
  uint64_t seed = 1;
  int32_t tenants = 12;
  int32_t system_prompt_bytes = 1024;
  int32_t documents_per_tenant = 8;
  int32_t document_bytes = 2048;
  int32_t max_tokens = 32;
  double weight_document = 1;   // tenant system prompt + one of its documents + a question
  double weight_chat = 1;       // a turn of a multi-turn session (extends the previous turn)
  double weight_sampling = 0;   // a tenant prompt with n = sampling_n
  double weight_rl = 0;         // an RL step: rl_prompts prompts x rl_samples samples
  double weight_near_miss = 0;  // a tenant prompt with a timestamp near its start
  int32_t sampling_n = 8;
  int32_t rl_prompts = 8;
  int32_t rl_samples = 8;
  double rl_as_group = 0.5;  // share of RL prompts sent as rl_samples requests with a `group`
};

// The named mixes of the evaluation: "chat" (tenants' documents and chat sessions, Poisson at
// 200/s), "rl" (RL steps, bursty, with chat in the background), "mixed" (everything, near-miss
// prompts and n-sampling included, bursty). Error for another name.
Result<TraceMix> trace_mix(const std::string& name);
std::vector<std::string> trace_mix_names();

// Deterministic for a mix (its seed); exactly mix.requests requests (an RL step counts each of
// its requests), sorted by arrival.
std::vector<TraceRequest> generate_trace(const TraceMix& mix);

}  // namespace kvc::bench
