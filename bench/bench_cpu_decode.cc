// CPU decode step, cascade vs flat: the tiny model on the CPU backend, 1 prompt x 64 siblings
// with a 2,048-token shared prefix. Runs the real engine (scheduler, planner, backend) and times
// its decode steps after the prefill; prints time and KV bytes read per step next to each other.
//   build/bench/bench_cpu_decode [--out FILE] [--steps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/core/engine.h"
#include "replica/model/weights.h"

namespace kvc {
namespace {

struct Measured {
  double median_ms = 0;
  double kv_bytes_read = 0;  // per decode step
  double kv_bytes_flat = 0;
  int levels = 0;
};

Measured measure(const ModelWeights& weights, bool cascade, int steps) {
  constexpr int32_t kPrefix = 2048, kSiblings = 64, kBlockSize = 16;
  CpuBackend backend(weights, /*num_blocks=*/kPrefix / kBlockSize + kSiblings * 8, kBlockSize);
  ByteTokenizer tokenizer;
  EngineConfig config;
  config.cascade.enabled = cascade;
  config.scheduler.max_num_seqs = kSiblings;
  config.scheduler.max_tokens_per_step = kPrefix;
  Engine engine(backend, tokenizer, config, SteadyClock::instance());
  GenerationRequest r;
  for (int i = 0; i < kPrefix; ++i)
    r.prompt.push_back('a' + (i * 7919) % 26);
  r.n = kSiblings;
  r.params.max_tokens = steps + 2;
  r.params.ignore_eos = true;
  r.params.seed = 1;
  if (!engine.submit(r).ok()) std::abort();
  std::vector<double> ms;
  Measured m;
  while (engine.has_work()) {
    const auto t0 = std::chrono::steady_clock::now();
    const StepResult s = engine.step();
    const double t =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s.stats.num_decode_seqs != kSiblings || s.stats.num_prefill_tokens != 0) continue;
    ms.push_back(t);
    m.kv_bytes_read += s.stats.cascade.kv_bytes_cascade;
    m.kv_bytes_flat += s.stats.cascade.kv_bytes_flat;
    m.levels = s.stats.cascade.num_levels_kept();
  }
  std::sort(ms.begin(), ms.end());
  m.median_ms = ms[ms.size() / 2];
  m.kv_bytes_read /= ms.size();
  m.kv_bytes_flat /= ms.size();
  return m;
}

}  // namespace
}  // namespace kvc

int main(int argc, char** argv) {
  std::string out;
  int steps = 24;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::max(3, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--out FILE] [--steps N]\n", argv[0]);
      return 2;
    }
  }
  using namespace kvc;
  const ModelWeights weights = random_weights(*preset_config("tiny"), 1234);
  const Measured flat = measure(weights, false, steps);
  const Measured cascade = measure(weights, true, steps);
  std::printf(
      "CPU decode step, tiny model (4 layers, 8 q / 2 KV heads, d=32, fp32 KV), "
      "1 prompt x 64 siblings, 2048-token prefix, %d steps\n",
      steps);
  std::printf("%-8s %10s %14s %8s\n", "mode", "step ms", "KV MiB/step", "levels");
  std::printf("%-8s %10.2f %14.2f %8d\n", "flat", flat.median_ms, flat.kv_bytes_read / 1048576.0,
              flat.levels);
  std::printf("%-8s %10.2f %14.2f %8d\n", "cascade", cascade.median_ms,
              cascade.kv_bytes_read / 1048576.0, cascade.levels);
  std::printf("speedup %.2fx, KV bytes read %.1fx fewer\n", flat.median_ms / cascade.median_ms,
              flat.kv_bytes_read / cascade.kv_bytes_read);
  if (!out.empty()) {
    nlohmann::json j = {
        {"benchmark", "cpu_decode_step"},
        {"model", "tiny"},
        {"siblings", 64},
        {"prefix_tokens", 2048},
        {"steps", steps},
        {"flat", {{"median_step_ms", flat.median_ms}, {"kv_bytes_per_step", flat.kv_bytes_read}}},
        {"cascade",
         {{"median_step_ms", cascade.median_ms},
          {"kv_bytes_per_step", cascade.kv_bytes_read},
          {"levels", cascade.levels}}},
        {"speedup", flat.median_ms / cascade.median_ms},
        {"kv_bytes_ratio", flat.kv_bytes_read / cascade.kv_bytes_read}};
    std::ofstream(out) << j.dump(2) << "\n";
  }
  return 0;
}
