// `kvcascade bench kernels`: flat paged decode vs cascade decode on the device, for all 32 layers
// of the Llama-3-8B shape, next to the byte floor (KV bytes / copy bandwidth measured in the same
// run). Prints a table and writes JSON that a later run can be compared with.
#pragma once

#include <string>

namespace kvc::bench {

struct KernelBenchOptions {
  std::string out_json;       // empty: no file
  bool quick = false;         // the worked example, the tree and one sweep point
  int iters = 20;             // timed runs per measurement (median reported)
  int only = -1;              // >= 0: run only this case (index in the printed order)
  bool cascade_only = false;  // time only the cascade (no flat, passes or forced grids): profiling
  bool fp8_kv = false;        // an FP8 KV cache (E4M3 codes, bf16 queries; floors count a byte)
  bool prefix_only = false;   // each case with no private tokens: the cascade is the prefix pass
};

// Returns 0 on success; non-zero (with a message on stderr) without a CUDA device.
int run_kernel_bench(const KernelBenchOptions& options);

}  // namespace kvc::bench
