// What `kvcascade bench engine`'s two modes share: the rollout (bench/cuda/engine_bench.cc) and the
// step table (bench/cuda/step_table_bench.cc). Internal to the benchmark.
#pragma once

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cuda/engine_bench.h"
#include "replica/core/engine.h"
#include "replica/model/model_config.h"

namespace kvc::bench {

// Sizes and counts of the model a step's floor is computed from.
struct ModelCost {
  double matmul_params = 0;  // every weight matrix a decode step multiplies (LM head included)
  double lm_head_params = 0;
  double weight_bytes = 0;  // bytes a decode step reads: matrices (and FP8 scales) and norms
  double attn_flops_per_ctx_token = 0;  // per sequence and context token, all layers
  // The layer GEMMs' rate over the bf16 peak the benchmark measures: 2 with FP8 weights (the
  // tensor cores' FP8 rate is twice their bf16 rate on Hopper: the datasheet's ratio, assumed).
  double layer_rate = 1;
  ModelConfig config;
  // FLOPs of `rows` rows through the layer GEMMs, in bf16-peak equivalents (over layer_rate).
  double layer_flops(double rows) const {
    return 2.0 * (matmul_params - lm_head_params) * rows / layer_rate;
  }
};
// fp8: the layer matrices in E4M3 with a float scale per output channel (the LM head, the
// embeddings and the norms bf16), as --quantization fp8 stores them.
ModelCost cost_of(const ModelConfig& c, bool fp8 = false);

// A prompt of `tokens` random letters, greedy, ignore_eos.
GenerationRequest random_request(std::mt19937_64& rng, int tokens, int max_tokens);

// The engine as the benchmark runs it: cascade on or off, the options' step budget.
EngineConfig engine_config(const EngineBenchOptions& o, bool cascade, const ModelConfig& m);

// NAN for an empty vector.
double median(std::vector<double> v);

// Writes `doc` to `path` (nothing when path is empty); false, with a message, when it cannot.
bool write_json(const std::string& path, const nlohmann::json& doc);

// --step-table: warm step times over decode rows x prefill chunks, each next to its floors
// (bandwidth `bw` bytes/s, GEMM `peak` FLOP/s, both measured by the caller); `header` goes into
// the JSON as is. Returns the exit code.
int run_step_table(const EngineBenchOptions& o, const ModelCost& m, double bw, double peak,
                   nlohmann::json header);

}  // namespace kvc::bench
