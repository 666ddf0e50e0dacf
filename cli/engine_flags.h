// Flags shared by every command that runs a replica engine (generate, replica, bench): model,
// KV pool, scheduler and cascade settings, parsed once into EngineFlags; the backend factory
// (replica/server/backend_factory.h) builds what they name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "replica/backend/backend.h"
#include "replica/backend/backend_options.h"
#include "replica/core/engine.h"
#include "replica/server/backend_factory.h"

namespace kvc::cli {

struct EngineFlags {
  BackendOptions backend;             // the model, tokenizer and backend flags
  std::string attention = "cascade";  // or "flat"
  std::string logprobs_mode = "raw";  // or "processed"
  int64_t group_wait_ms = 2000;       // SchedulerConfig::affinity_wait
  int64_t group_idle_ms = 250;        // SchedulerConfig::affinity_idle
  EngineConfig engine;
};

void add_engine_flags(CLI::App& cmd, EngineFlags& flags);

// The backend options with the scheduler's limits the CUDA backend sizes its workspace by.
BackendOptions backend_options(const EngineFlags& flags);

// The engine config with the attention mode and group wait applied, fitted to the backend.
EngineConfig engine_config(const EngineFlags& flags, const Backend& backend);

}  // namespace kvc::cli
