// `kvcascade bench engine`: the seed's RL-rollout example through the real engine on the GPU
// (scheduler + cascade planner + CUDA backend + device sampling): G prompts x N siblings after a
// P-token prefix, greedy, ignore_eos, `gen` tokens each. Per attention mode: decode steps at
// S = 16 / 256 / 1024 generated tokens next to their floors (bytes / streaming-read bandwidth and
// FLOPs / cuBLASLt bf16 peak, both measured in the same run), where the step's time goes (host
// work, wait, device), the prefill of one prompt, the whole rollout; then cascade vs flat tokens
// (every first difference checked to be a near-tie of the flat run's logits), the same rollouts
// with and without CUDA graphs, and, when given, the PyTorch anchor's rows from the same run.
// With step_table: warm step times of mixed prefill + decode steps instead (a grid of shapes).
#pragma once

#include <string>

namespace kvc::bench {

struct EngineBenchOptions {
  std::string out_json;
  std::string anchor_json;  // $OUT/anchor.json of ../shared/bench/torch_cascade_anchor.py
  std::string preset = "llama3-8b";
  int groups = 2;
  int siblings = 64;
  int prefix = 4096;
  int gen = 1024;
  std::string attention = "both";   // cascade | flat | both
  std::string graphs = "both";      // on | off | both: decode steps as CUDA graph replays
  int window = 20;                  // decode steps around each S point (median)
  int max_tokens_per_step = 4096;   // one prompt's prefill fits one step
  bool check_agreement = true;      // with both: cascade vs flat tokens, near-ties proven
  bool profile = true;              // one more rollout per mode with per-operation device times
  bool decode_gemm = false;         // the Hopper decode GEMM (off: cuBLASLt for every GEMM)
  bool gemm_tuning = true;          // cuBLASLt's candidates timed per decode shape (gemm.h)
  std::string quantization;         // "fp8": --quantization fp8 (llama.h fp8_weights)
  bool fp8_kv = false;              // --kv-cache-dtype fp8 (llama.h fp8_kv): KV bytes halved
  bool fp8_scales_in_gemm = false;  // llama.h set_fp8_scales_in_readers(false)
  bool fp8_attention_quantize_pass = false;  // llama.h set_fp8_attention_rows_in_merge(false)
  int logprobs = -1;  // >= 0: every sibling asks for its tokens' top-k logprobs
  // > 0: the model split over that many GPUs (CudaTensorParallelBackend; 1: the split's path on
  // one GPU, NCCL and all); the floors are per GPU (a rank reads 1/N of the weights and KV).
  int tensor_parallel_size = 0;
  // Instead of the rollout: warm step times over a grid of decode rows (separate requests with
  // `step_table_context`-token prompts) x prefill chunk (a fresh prompt of that many tokens in
  // the same step): the shapes a serving replica's steps take, for the sim backend's model.
  bool step_table = false;
  int step_table_context = 1024;
  // Each prefill prompt starts with this many tokens already cached (one shared prefix, prefilled
  // before the table): chunks that start past a cache hit, as most routed prompts do.
  int step_table_cached = 0;
};

// Returns 0 on success; 1 without a device or when a run fails.
int run_engine_bench(const EngineBenchOptions& options);

}  // namespace kvc::bench
