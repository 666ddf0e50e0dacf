// The seed's bandwidth arithmetic of a decode step (shared-prefix-kv-caching.txt, "The arithmetic
// of a decode step"): decode is memory-bound, so a step costs the bytes it must move. Used by
// `kvcascade plan` and `kvcascade demo` (the seed's table), and by the sim backend's step model
// (step_seconds). The cascade planner and the kv_bytes metrics count bytes on their own, from the
// step's CascadePlan.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "replica/model/model_config.h"

namespace kvc {

// A decode batch of `groups` sibling groups of `siblings` sequences each; every sequence holds the
// group's `prefix_tokens` shared prompt and `suffix_tokens` private tokens.
struct DecodeWorkload {
  int64_t groups = 1;
  int64_t siblings = 1;
  int64_t prefix_tokens = 0;
  int64_t suffix_tokens = 0;
  int64_t batch() const { return groups * siblings; }
};

struct Hardware {
  double bandwidth_bytes_per_s = 3.35e12;  // the seed's H100 figure
  int kv_bytes_per_element = 2;            // fp16 / bf16 KV
  int weight_bytes_per_element = 2;        // bf16 weights
  // Used by step_seconds (the sim backend), not by plan_decode_step.
  double peak_flops = 989e12;  // bf16 tensor-core FLOP/s of the GEMMs (the sim: the rate reached)
  double attention_flops_per_s = 0;  // prefill attention's FLOP/s (0: peak_flops)
  // What a real step costs beyond its GEMMs and KV reads: latency-bound small kernels, launches,
  // the engine's own host work; a little more per decode row (sampling, the decode attention
  // plan), and more for a step with prefill chunks (launched eagerly, not a graph replay) and
  // again when it also decodes (both attention paths and the merge).
  double step_overhead_s = 0;
  double decode_row_overhead_s = 0;
  double prefill_step_overhead_s = 0;
  double mixed_step_overhead_s = 0;
  // A step with a prefill chunk that starts after cached tokens (a prefix-cache hit, or a long
  // prompt's later chunk): its attention takes the paged path over the cached context.
  double cached_prefill_overhead_s = 0;
  // Copies between host memory and the device (the host tier's transfers), bytes/s.
  double host_link_bytes_per_s = 25e9;
};

// What one forward pass moves and computes; step_work_of (replica/backend/sim/sim_backend.h) counts
// it from a ForwardBatch.
struct StepWork {
  int64_t rows = 0;             // tokens through the model: prefill tokens + decode sequences
  int64_t decode_rows = 0;      // of which decode sequences
  int64_t logit_rows = 0;       // rows through the LM head
  int64_t kv_bytes_read = 0;    // attention's KV reads (a cascade plan's shared nodes once)
  int64_t kv_bytes_copied = 0;  // copy-on-write block copies (read + write)
  int64_t kv_bytes_host_transferred = 0;  // host tier transfers, either way (over the link)
  double attention_flops = 0;             // QK^T and PV, 2 FLOPs per multiply-add
  double prefill_attention_flops = 0;     // of which the prefill chunks' (compute-bound)
  int64_t cached_start_chunks = 0;        // prefill chunks that start after cached tokens
  bool empty() const { return rows == 0 && kv_bytes_copied == 0 && kv_bytes_host_transferred == 0; }
};

// Weight bytes one step reads: every weight but the input embedding (a gather of `rows` rows).
int64_t weight_bytes_read_per_step(const ModelConfig& model, const Hardware& hw);
// The step's floor, max(bytes / bandwidth, FLOPs / peak) (the engine benchmark's floor); 0 for an
// empty step.
double step_floor_seconds(const ModelConfig& model, const StepWork& work, const Hardware& hw);
// What the step takes (the sim backend's model, fitted to the H200's measured steps:
// bench/results/sim-h200-validation.md): the GEMMs, max(weights read / bandwidth, GEMM FLOPs /
// peak_flops); then attention, its KV reads / bandwidth (decode is memory-bound) + the prefill
// chunks' attention FLOPs / attention_flops_per_s; then the overheads of Hardware; then the host
// tier's transfers over the link, not overlapped with the rest (a replica that loads a prefix
// waits for it). 0 for an empty step.
double step_seconds(const ModelConfig& model, const StepWork& work, const Hardware& hw);

struct StepReport {
  int64_t kv_bytes_per_token = 0;
  int64_t prefix_bytes = 0;          // one copy of one group's prefix
  int64_t flat_prefix_bytes = 0;     // per-sequence attention: prefix read batch times
  int64_t cascade_prefix_bytes = 0;  // cascade: once per group
  int64_t suffix_bytes = 0;          // private KV, the same either way
  int64_t weight_bytes = 0;
  double flat_attention_ms = 0, cascade_attention_ms = 0, weights_ms = 0;
  double flat_step_ms = 0, cascade_step_ms = 0, step_gain = 0;
  // Mean gain over a whole generation, suffix growing 1..suffix_tokens (early steps gain more).
  double mean_gain_over_generation = 0;
  // Redundant prefix traffic (what cascade removes) relative to the weight traffic: the seed's
  // test of whether cascade is worth it ("if the prefix term is not comparable to the weights,
  // stop here").
  double redundant_prefix_to_weights = 0;
  bool prefix_term_comparable_to_weights = false;

  int64_t flat_kv_bytes() const { return flat_prefix_bytes + suffix_bytes; }
  int64_t cascade_kv_bytes() const { return cascade_prefix_bytes + suffix_bytes; }
};

StepReport plan_decode_step(const ModelConfig& model, const DecodeWorkload& work,
                            const Hardware& hw);

nlohmann::json to_json(const ModelConfig& model, const DecodeWorkload& work, const Hardware& hw,
                       const StepReport& report);
std::string format_report(const ModelConfig& model, const DecodeWorkload& work, const Hardware& hw,
                          const StepReport& report);

}  // namespace kvc
