#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>

#include "cli/commands.h"

namespace kvc::cli {
namespace {

// Whether the parsed command needs what only kvcascade-cuda has.
bool needs_cuda(CLI::App& app, const CudaEntry& cuda) {
  for (CLI::App* sub : app.get_subcommands()) {
    const std::string name = sub->get_name();
    if (name == "replica" || name == "generate") {
      // --check-config only validates flags: every binary can.
      if (name == "replica" && sub->get_option("--check-config")->as<bool>()) return false;
      return cuda.backend == nullptr && sub->get_option("--backend")->as<std::string>() == "cuda";
    }
    if (name == "bench") {
      for (CLI::App* b : sub->get_subcommands()) {
        const std::string what = b->get_name();
        if ((what == "kernels" && !cuda.benches.kernels) ||
            (what == "gemm" && !cuda.benches.gemm) || (what == "engine" && !cuda.benches.engine))
          return true;
      }
    }
  }
  return false;
}

// Replaces this process with kvcascade-cuda from this binary's folder, same arguments; returns
// (exit code 2) only if that fails.
int exec_kvcascade_cuda(char** argv) {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path cuda =
      (ec ? std::filesystem::path(argv[0]) : self).parent_path() / "kvcascade-cuda";
  if (!std::filesystem::exists(cuda)) {
    std::fprintf(stderr,
                 "kvcascade: this command needs the GPU, and this binary has no CUDA code; "
                 "kvcascade-cuda (built where nvcc is found) is not in %s\n",
                 cuda.parent_path().c_str());
    return 2;
  }
  ::execv(cuda.c_str(), argv);
  std::fprintf(stderr, "kvcascade: cannot run %s: %s\n", cuda.c_str(), std::strerror(errno));
  return 2;
}

}  // namespace

int run_kvcascade(int argc, char** argv, const CudaEntry& cuda) {
  CLI::App app{"kvcascade: prefix-aware routing and cascade decode for shared-prefix LLM serving"};
  app.require_subcommand(1);
  std::map<std::string, Run> runs;
  runs["plan"] = add_plan_command(app);
  runs["demo"] = add_demo_command(app);
  runs["generate"] = add_generate_command(app, cuda);
  runs["bench"] = bench::add_bench_command(app, cuda.benches);
  runs["replica"] = add_replica_command(app, cuda);
  runs["router"] = add_router_command(app);
  runs["loadgen"] = add_loadgen_command(app);
  runs["tokenize"] = add_tokenize_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // app.exit prints the message (or the help) and gives CLI11's code: 0 for --help, else one
    // of its own (105 a value out of range, 106 a missing flag, 109 an unknown one, ...). Every
    // command-line error exits 2, as the commands' own checks do, so that scripts see one code.
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (needs_cuda(app, cuda)) return exec_kvcascade_cuda(argv);
  for (CLI::App* sub : app.get_subcommands())
    return runs.at(sub->get_name())();
  return 2;
}

}  // namespace kvc::cli
