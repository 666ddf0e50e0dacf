// Subcommands of the `kvcascade` binary. Each registers its flags on the CLI11 app and returns the
// function that runs it once flags are parsed (flags are parsed once, into a config struct).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace kvc::cli {

using Run = std::function<int()>;

Run add_plan_command(CLI::App& app);
Run add_demo_command(CLI::App& app);
Run add_generate_command(CLI::App& app);
Run add_bench_command(CLI::App& app);  // defined in bench/ (kvc_bench_command)
Run add_replica_command(CLI::App& app);
Run add_router_command(CLI::App& app);
Run add_loadgen_command(CLI::App& app);
Run add_tokenize_command(CLI::App& app);

}  // namespace kvc::cli
