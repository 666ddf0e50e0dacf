// `kvcascade bench gemm`: the decode step's GEMMs (Llama-3-8B's qkv, o, gate/up, down and LM head
// at the rows of a decode batch) through cuBLASLt and through the Hopper decode GEMM, each next to
// its byte floor (weights + activations + output / streaming-read bandwidth measured in the same
// run). Each GEMM is timed as a CUDA graph of launches over rotating weight copies (together
// several times L2), as the engine replays them. Prints a table, writes JSON.
#pragma once

#include <string>

namespace kvc::bench {

struct GemmBenchOptions {
  std::string out_json;  // empty: no file
  int rows = 128;        // activation rows (sequences in the decode batch)
  int iters = 20;        // graph replays per measurement (median reported)
  int splits = 0;        // > 0: force the decode GEMM's K split
  std::string only;      // non-empty: this GEMM only (qkv, o, gate_up, down, lm_head)
};

// Returns 0 on success; non-zero (with a message on stderr) without a CUDA device.
int run_gemm_bench(const GemmBenchOptions& options);

}  // namespace kvc::bench
