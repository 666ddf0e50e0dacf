// `kvcascade bench kernels`: the device benchmark of flat vs cascade decode (bench/kernel_bench.h).
#include <cstdio>
#include <string>

#include "cli/commands.h"
#if KVCASCADE_HAVE_CUDA
#include "bench/kernel_bench.h"
#endif

namespace kvc::cli {
namespace {

struct BenchFlags {
  std::string out;
  bool quick = false;
  int iters = 20;
  int only = -1;
};

int run_bench_kernels(const BenchFlags& f) {
#if KVCASCADE_HAVE_CUDA
  return bench::run_kernel_bench({f.out, f.quick, f.iters, f.only});
#else
  (void)f;
  std::fprintf(stderr,
               "kvcascade bench kernels: this binary was built without CUDA "
               "(configure with -DKVCASCADE_CUDA=ON)\n");
  return 2;
#endif
}

}  // namespace

Run add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* kernels = bench->add_subcommand(
      "kernels", "flat vs cascade decode attention on the GPU, next to the byte floor");
  kernels->add_option("--out", f->out, "write the results as JSON to this file");
  kernels->add_flag("--quick", f->quick, "the worked example and the tree only");
  kernels->add_option("--iters", f->iters, "timed runs per measurement (median reported)")
      ->check(CLI::Range(3, 1000));
  kernels->add_option("--only", f->only, "run only this case (its row number in the table, from 0)")
      ->check(CLI::Range(0, 1000));
  return [f] { return run_bench_kernels(*f); };
}

}  // namespace kvc::cli
