// Flags shared by every command that runs a replica engine (generate, replica, bench): model,
// KV pool, scheduler and cascade settings, parsed once into EngineFlags.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "prefix_index/clock.h"
#include "prefix_index/status.h"
#include "replica/backend.h"
#include "replica/engine.h"

namespace kvc::cli {

struct EngineFlags {
  std::string preset = "tiny";
  std::string model_dir;  // a Hugging Face folder; overrides the preset
  uint64_t weights_seed = 1234;
  std::string backend = "cpu";  // or "cuda", "sim"
  int32_t kv_blocks = 0;        // 0: 4096 on the CPU; on the GPU as many as memory allows
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;
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

// The flags' backend (CPU or CUDA) for the flags' model (random-initialised preset or loaded
// weights), or the sim backend for the sim preset, waiting on `clock`. The CUDA backend prints
// what it allocated (weights, workspace, KV) to stderr.
Result<std::unique_ptr<Backend>> make_backend(const EngineFlags& flags,
                                              Clock& clock = SteadyClock::instance());

// The engine config with the attention mode applied.
EngineConfig engine_config(const EngineFlags& flags, const Backend& backend);

}  // namespace kvc::cli
