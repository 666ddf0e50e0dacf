// `kvcascade bench rl`: a GRPO-shaped loop through the router. Each step sends G prompts x n
// samples with logprobs and token ids (half of the prompts as one request with n, half as n
// requests sharing a `group` with `group_size`), then updates every replica's weights from the
// next checkpoint folder (POST /router/admin/weights), then runs the next step. Per step: rollout
// seconds, update seconds, tokens/s, cache hits, the versions that answered. Checks that no
// request was lost (every choice generated its tokens, with a logprob for each), that every
// response of step s carries step s's version, and that a fixed greedy probe's tokens change
// with the weights.
//
// Step s runs on checkpoint s mod the number of checkpoints, as version "step-s". Without
// --router it runs its own fleet: a router and `replicas` tiny CPU replicas on 127.0.0.1,
// serving two checkpoints it writes (random weights, two seeds), the first as step-0 from the
// start. With --router it drives a running fleet (GPU replicas) whose replicas load --checkpoints
// from their own disks; whatever version the fleet serves, it first loads the first checkpoint
// as step-0 (timed apart), so that step 0 is checked like the others.
#pragma once

#include <string>
#include <vector>

namespace kvc::bench {

struct RlBenchOptions {
  std::string out;     // JSON results (empty: none)
  std::string router;  // host:port of a running router; empty: an in-process fleet
  std::string model = "tiny";
  std::vector<std::string> checkpoints;  // folders to alternate between (with --router)
  int replicas = 2;                      // the in-process fleet's
  int steps = 4;
  int prompts = 4;  // G
  int samples = 8;  // n
  int prompt_tokens = 256;
  int max_tokens = 32;
  int logprobs = 1;
  std::string strategy = "all-at-once";  // or "rolling"
  std::string mode = "drain";
};

// Returns 0 when every check held, 1 otherwise.
int run_rl_bench(const RlBenchOptions& options);

}  // namespace kvc::bench
