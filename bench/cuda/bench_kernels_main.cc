// bench_kernels --out FILE [--quick] [--iters N] [--only CASE] [--cascade-only] [--prefix-only]
// [--kv-cache-dtype fp8]: the kernel benchmark without the kvcascade CLI (--cascade-only: just the
// cascade, e.g. under a profiler; --prefix-only: each case's tree with no private tokens, so the
// cascade launch is the prefix pass alone).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bench/cuda/kernel_bench.h"

int main(int argc, char** argv) {
  kvc::bench::KernelBenchOptions opt;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      opt.out_json = argv[++i];
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      opt.quick = true;
    } else if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      opt.iters = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      opt.only = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cascade-only") == 0) {
      opt.cascade_only = true;
    } else if (std::strcmp(argv[i], "--prefix-only") == 0) {
      opt.prefix_only = true;
    } else if (std::strcmp(argv[i], "--kv-cache-dtype") == 0 && i + 1 < argc &&
               std::strcmp(argv[i + 1], "fp8") == 0) {
      opt.fp8_kv = true;
      ++i;
    } else {
      std::fprintf(stderr,
                   "usage: %s --out FILE [--quick] [--iters N] [--only CASE] [--cascade-only] "
                   "[--prefix-only] [--kv-cache-dtype fp8]\n",
                   argv[0]);
      return 2;
    }
  }
  return kvc::bench::run_kernel_bench(opt);
}
