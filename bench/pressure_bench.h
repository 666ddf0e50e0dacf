// `kvcascade bench pressure`: progress under KV memory pressure (issue: the scheduler thrashed).
// One in-process replica (the tiny model on the CPU backend) with a small KV pool gets `groups`
// long requests (n siblings, ignore_eos, max_tokens each) at once, after the same requests were
// sent one at a time to a fresh replica of the same size. Prints both wall times, their ratio
// (target <= 1.3x), steps and preemptions.
#pragma once

#include <string>

namespace kvc::bench {

struct PressureBenchOptions {
  std::string out;  // JSON results (empty: none)
  int kv_blocks = 512;
  int groups = 5;
  int n = 4;
  int max_tokens = 1500;
};

// Returns the process exit code: 0 when every request finished whole, 1 otherwise.
int run_pressure_bench(const PressureBenchOptions& options);

}  // namespace kvc::bench
