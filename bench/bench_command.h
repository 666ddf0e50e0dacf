// `kvcascade bench ...`: the subcommands' flags and runners. The GPU benchmarks (bench/cuda/:
// kernels, gemm, engine) are linked only into kvcascade-cuda, which passes them in; their option
// structs are CUDA-free, so every binary parses the same flags.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

#include "bench/cuda/engine_bench.h"
#include "bench/cuda/gemm_bench.h"
#include "bench/cuda/kernel_bench.h"

namespace kvc::bench {

struct GpuBenches {
  int (*kernels)(const KernelBenchOptions&) = nullptr;
  int (*gemm)(const GemmBenchOptions&) = nullptr;
  int (*engine)(const EngineBenchOptions&) = nullptr;
};

// Registers `bench` and its subcommands on `app`; returns the function that runs the parsed one.
// A GPU benchmark missing from `gpu` is an error (exit 2) naming the binary that has it.
std::function<int()> add_bench_command(CLI::App& app, const GpuBenches& gpu);

}  // namespace kvc::bench
