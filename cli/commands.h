// Subcommands of the `kvcascade` binary. Each registers its flags on the CLI11 app and returns the
// function that runs it once flags are parsed (flags are parsed once, into a config struct).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "bench/bench_command.h"
#include "replica/server/backend_factory.h"

namespace kvc::cli {

using Run = std::function<int()>;

// What only kvcascade-cuda links in (cli/main_cuda.cc): the CUDA backend and the GPU benchmarks.
// kvcascade (cli/main.cc) has neither, so that the router and the CPU replica start where no
// CUDA library is installed; it hands a command that needs them to kvcascade-cuda.
struct CudaEntry {
  CudaBackendMaker backend = nullptr;
  bench::GpuBenches benches;
};

// The whole binary: parses argv, runs the chosen command. With `cuda` empty, a command that needs
// the GPU (--backend cuda, bench kernels/gemm/engine) is run by kvcascade-cuda from the same
// folder (exec, same arguments) when it is there.
int run_kvcascade(int argc, char** argv, const CudaEntry& cuda);

Run add_plan_command(CLI::App& app);
Run add_demo_command(CLI::App& app);
Run add_generate_command(CLI::App& app, const CudaEntry& cuda);
Run add_replica_command(CLI::App& app, const CudaEntry& cuda);
Run add_router_command(CLI::App& app);
Run add_loadgen_command(CLI::App& app);
Run add_tokenize_command(CLI::App& app);

}  // namespace kvc::cli
