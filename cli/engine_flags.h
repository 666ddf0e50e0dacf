// Flags shared by every command that runs a replica engine (generate, replica, bench): model,
// KV pool, scheduler and cascade settings, parsed once into EngineFlags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "prefix_index/chat_template.h"
#include "prefix_index/clock.h"
#include "prefix_index/status.h"
#include "replica/backend.h"
#include "replica/engine.h"

namespace kvc::cli {

struct EngineFlags {
  std::string preset = "tiny";
  std::string model_dir;  // a Hugging Face folder; overrides the preset
  // A Hugging Face tokenizer folder; empty: model_dir's tokenizer.json if any, else bytes.
  std::string tokenizer_dir;
  uint64_t weights_seed = 1234;
  std::string backend = "cpu";  // or "cuda", "sim"
  int32_t kv_blocks = 0;        // 0: 4096 on the CPU; on the GPU as many as memory allows
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;
  bool decode_gemm = false;
  int32_t block_size = 16;
  std::string attention = "cascade";  // or "flat"
  int64_t group_wait_ms = 2000;       // SchedulerConfig::group_wait
  EngineConfig engine;
  // --backend sim: the model and device (sim_preset), each figure overridable (0: the preset's).
  std::string sim_preset = "h200-llama3-8b";
  double sim_bandwidth_gbps = 0;
  double sim_peak_tflops = 0;
  double sim_step_overhead_ms = -1;  // -1: the preset's
};

void add_engine_flags(CLI::App& cmd, EngineFlags& flags);

// The flags' tokenizer: --tokenizer DIR, else the tokenizer.json next to --model's weights,
// else the byte tokenizer.
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const EngineFlags& flags);

// The chat template of a Hugging Face tokenizer's tokenizer_config.json; null when it has none
// (or the tokenizer is the byte tokenizer): chat requests then render canonically.
Result<std::shared_ptr<const ChatTemplate>> make_chat_template(const Tokenizer& tokenizer);

// The flags' backend (CPU or CUDA) for the flags' model (random-initialised preset or loaded
// weights), or the sim backend (`--backend sim`: the sim preset, waiting on `clock`). A preset's
// vocabulary grows to `tokenizer`'s (random weights for a real tokenizer); loaded weights must
// cover it. The CUDA backend prints what it allocated (weights, workspace, KV) to stderr.
Result<std::unique_ptr<Backend>> make_backend(const EngineFlags& flags, const Tokenizer& tokenizer,
                                              Clock& clock = SteadyClock::instance());

// The engine config with the attention mode applied.
EngineConfig engine_config(const EngineFlags& flags, const Backend& backend);

}  // namespace kvc::cli
