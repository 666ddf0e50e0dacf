#include "bench/cuda/engine_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/cuda/engine_bench_common.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/llama.h"
#include "kernels/cuda/nccl_group.h"
#include "kernels/cuda/roofline.h"
#include "replica/backend/cuda/cuda_backend.h"
#include "replica/backend/cuda/tensor_parallel_backend.h"
#include "replica/core/engine.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc::bench {
namespace {

namespace kc = kernels::cuda;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct StepRecord {
  double wall_ms = 0;    // Engine::step, host clock
  double host_ms = 0;    // the backend's host work until it waits (staging, plans, launches)
  double prep_ms = 0;    // of which before the first launch
  double engine_ms = 0;  // the engine's own work: schedule, build (plan), append tokens
  double schedule_ms = 0, build_ms = 0;  // of which scheduling, and building the batch
  double wait_ms = 0;
  double device_ms = 0;  // first to last operation of the step on the device
  int decode = 0;        // decode rows
  int prefill = 0;       // prefill tokens
  int s = 0;             // tokens generated so far by the first group (the S of the step)
  int64_t kv_bytes = 0;  // KV bytes the step's plan reads (planner's accounting)
};

using SeqKey = std::pair<uint64_t, int32_t>;
using Tokens = std::map<SeqKey, std::vector<int32_t>>;

struct ModeRun {
  std::string mode;
  std::vector<StepRecord> steps;
  Tokens tokens;
  double total_s = 0;
  double decode_s = 0;
  int64_t generated = 0;
  int preemptions = 0;
  int graph_steps = 0;  // decode steps that ran as CUDA graph replays
  int decode_steps = 0;
};

std::vector<GenerationRequest> rollout_requests(const EngineBenchOptions& o) {
  std::vector<GenerationRequest> reqs;
  std::mt19937_64 rng(20261201);
  for (int g = 0; g < o.groups; ++g) {
    GenerationRequest r = random_request(rng, o.prefix, o.gen);
    r.n = o.siblings;
    r.params.seed = 1 + g;
    r.params.logprobs = o.logprobs;
    reqs.push_back(std::move(r));
  }
  return reqs;
}

// Blocks the rollout needs at most, with a little room.
int32_t rollout_blocks(const EngineBenchOptions& o, int32_t block_size) {
  const int64_t shared = (o.prefix + block_size - 1) / block_size;
  const int64_t own = (o.prefix + o.gen + block_size - 1) / block_size - o.prefix / block_size;
  return static_cast<int32_t>(o.groups * (shared + o.siblings * own) + 64);
}

struct NeedGap {
  std::set<std::tuple<uint64_t, int32_t, int32_t>> keys;  // (group, sibling, position)
  std::map<std::tuple<uint64_t, int32_t, int32_t>, std::pair<float, float>> gaps;  // (gap, best)
};

// Runs the rollout once. With `need`, logits are fetched only on the steps that sample one of
// its positions, and their top-2 gaps recorded (untimed use).
// Device time per operation over the profiled steps of one S window.
using Profile = std::map<int, std::vector<std::pair<std::string, double>>>;  // S point -> op us

// What the bench drives: one GPU's backend, or a split over GPUs (--tensor-parallel-size) whose
// rank 0 gives the step timings, profile and graph statistics (its step includes the
// collectives, which wait for every rank).
struct BenchBackend {
  std::unique_ptr<CudaBackend> one;
  std::unique_ptr<CudaTensorParallelBackend> split;
  Backend& engine() { return split ? static_cast<Backend&>(*split) : *one; }
  CudaBackend& rank0() { return split ? split->rank(0) : *one; }
  void set_graphs(bool on) { split ? split->set_graphs(on) : one->set_graphs(on); }
  void set_profile(bool on) { split ? split->set_profile(on) : one->set_profile(on); }
  int ranks() const { return split ? split->tensor_parallel_size() : 1; }
};

bool run_rollout(const EngineBenchOptions& o, BenchBackend& backend, bool cascade, bool graphs,
                 const std::vector<GenerationRequest>& reqs, ModeRun& out, NeedGap* need,
                 Profile* profile = nullptr) {
  ByteTokenizer tokenizer;
  Engine engine(backend.engine(), tokenizer, engine_config(o, cascade, backend.engine().config()),
                SteadyClock::instance());
  for (const auto& r : reqs) {
    auto id = engine.submit(r);
    if (!id.ok()) {
      std::fprintf(stderr, "bench engine: %s\n", id.error().message.c_str());
      return false;
    }
  }
  out.mode = cascade ? "cascade" : "flat";
  if (!graphs && o.graphs == "both") out.mode += "_eager";
  backend.set_graphs(graphs);
  std::map<uint64_t, int> generated;                      // by group, of sibling 0
  std::set<std::pair<uint64_t, int32_t>> need_positions;  // (group, position)
  if (need) {
    for (const auto& [g, s, p] : need->keys)
      need_positions.insert({g, p});
  }
  const int32_t prompt = o.prefix;
  const Clock::time_point start = Clock::now();
  while (engine.has_work()) {
    bool observe = false;
    if (need) {
      for (uint64_t g = 1; g <= reqs.size(); ++g)
        observe = observe || need_positions.count({g, prompt + generated[g]}) > 0;
      if (observe) {
        engine.set_logits_observer(
            [need](uint64_t g, int32_t s, int32_t pos, std::span<const float> l) {
              if (!need->keys.count({g, s, pos})) return;
              std::vector<float> v(l.begin(), l.end());
              std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<>());
              need->gaps[{g, s, pos}] = {v[0] - v[1], v[0]};
            });
      } else {
        engine.set_logits_observer(nullptr);
      }
    }
    // Profiled steps: the window's first 10 pure decode steps from each S point.
    int profile_point = 0;
    if (profile) {
      for (int p : {16, 256, 1024}) {
        const int lo = std::min(p, o.gen) - 10;
        if (generated[1] >= std::max(1, lo) && generated[1] < std::max(1, lo) + 10) {
          profile_point = p;
        }
      }
      backend.set_profile(profile_point != 0);
    }
    const Clock::time_point t0 = Clock::now();
    StepResult step = engine.step();
    const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (!step.error.empty()) {
      std::fprintf(stderr, "bench engine: %s\n", step.error.c_str());
      return false;
    }
    StepRecord r;
    r.wall_ms = wall;
    r.host_ms = backend.rank0().last_timing().host_us / 1e3;
    r.prep_ms = backend.rank0().last_timing().prep_us / 1e3;
    r.engine_ms =
        std::chrono::duration<double, std::milli>(step.stats.duration - step.stats.forward).count();
    r.schedule_ms = std::chrono::duration<double, std::milli>(step.stats.schedule).count();
    r.build_ms = std::chrono::duration<double, std::milli>(step.stats.build).count();
    r.wait_ms = backend.rank0().last_timing().wait_us / 1e3;
    r.device_ms = backend.rank0().last_timing().device_us / 1e3;
    r.decode = step.stats.num_decode_seqs;
    r.prefill = step.stats.num_prefill_tokens;
    r.s = generated[1];
    r.kv_bytes = step.stats.cascade.kv_bytes_cascade;
    out.steps.push_back(r);
    if (profile_point != 0 && r.prefill == 0) {
      auto& acc = (*profile)[profile_point];
      for (const auto& [name, us] : backend.rank0().last_timing().profile) {
        auto it =
            std::find_if(acc.begin(), acc.end(), [&](const auto& a) { return a.first == name; });
        if (it == acc.end()) {
          acc.emplace_back(name, us / 10);
        } else {
          it->second += us / 10;
        }
      }
    }
    for (const SequenceOutput& so : step.outputs) {
      if (so.sibling == 0) generated[so.group_id] += so.num_new_tokens;
      out.generated += so.num_new_tokens;
    }
    for (const auto& g : step.finished) {
      for (const Sequence& s : g->seqs) {
        out.tokens[{g->id, s.sibling}].assign(s.tokens.begin() + g->prompt.size(), s.tokens.end());
      }
    }
    if (r.prefill == 0) {
      out.decode_s += wall / 1e3;
      ++out.decode_steps;
      out.graph_steps += backend.rank0().last_timing().graph;
    }
  }
  if (profile) backend.set_profile(false);
  out.total_s = std::chrono::duration<double>(Clock::now() - start).count();
  out.preemptions = static_cast<int>(engine.scheduler().num_preemptions());
  return true;
}

struct Point {
  int s = 0;
  int steps = 0;
  double wall_ms = NAN, engine_ms = NAN, schedule_ms = NAN, build_ms = NAN, prep_ms = NAN,
         host_ms = NAN, wait_ms = NAN, device_ms = NAN;
  double bytes = 0, flops = 0, byte_floor_ms = 0, flop_floor_ms = 0;
  double link_floor_ms = 0;  // split: the collectives' bytes over the measured link (in bytes)
  double floor_ms() const { return std::max(byte_floor_ms, flop_floor_ms); }
  double ratio() const { return wall_ms / floor_ms(); }
};

// Pure decode steps of every sequence with S in [s - window/2, s + window/2) (clipped to the run).
// `ranks` > 1: the model split over that many GPUs, each reading and computing 1/ranks of it
// (the floors are one GPU's), and the byte floor adds the collectives' bytes over `link_bw`
// (the group's all-reduce bus bandwidth measured in the run): two all-reduces of rows x hidden
// bf16 values a layer at 2 (N - 1) / N of their bytes, and the LM head's logits all-gathered
// at (N - 1) / N of theirs (NCCL's bus-bandwidth accounting).
Point point_at(const ModeRun& run, int s, int window, int rows, const ModelCost& m, double bw,
               double peak, int gen, int prompt_len, int ranks, double link_bw) {
  Point p;
  p.s = s;
  int lo = std::max(1, s - window / 2), hi = lo + window;
  if (hi > gen) {
    hi = gen;
    lo = std::max(1, hi - window);
  }
  std::vector<double> wall, engine, schedule, build, prep, host, wait, dev, bytes, flops;
  for (const StepRecord& r : run.steps) {
    if (r.prefill != 0 || r.decode != rows || r.s < lo || r.s >= hi) continue;
    wall.push_back(r.wall_ms);
    engine.push_back(r.engine_ms);
    schedule.push_back(r.schedule_ms);
    build.push_back(r.build_ms);
    prep.push_back(r.prep_ms);
    host.push_back(r.host_ms);
    wait.push_back(r.wait_ms);
    dev.push_back(r.device_ms);
    bytes.push_back(m.weight_bytes + static_cast<double>(r.kv_bytes));
    // GEMMs over every row, plus attention over each sequence's context (prompt + S), in
    // bf16-peak equivalents (FP8 layer GEMMs count half).
    flops.push_back(m.layer_flops(rows) + 2.0 * m.lm_head_params * rows +
                    m.attn_flops_per_ctx_token * rows * double(prompt_len + r.s));
  }
  p.steps = static_cast<int>(wall.size());
  if (p.steps == 0) return p;
  p.wall_ms = median(wall);
  p.engine_ms = median(engine);
  p.schedule_ms = median(schedule);
  p.build_ms = median(build);
  p.prep_ms = median(prep);
  p.host_ms = median(host);
  p.wait_ms = median(wait);
  p.device_ms = median(dev);
  p.bytes = median(bytes) / ranks;
  p.flops = median(flops) / ranks;
  p.byte_floor_ms = p.bytes / bw * 1e3;
  p.flop_floor_ms = p.flops / peak * 1e3;
  if (ranks > 1 && link_bw > 0) {
    const double n = ranks, all_reduce = 2.0 * m.config.num_hidden_layers * rows *
                                         m.config.hidden_size * 2.0 * 2.0 * (n - 1) / n;
    const double lm_rows = std::ceil(double(m.config.vocab_size) / n);
    const double gather = double(rows) * lm_rows * 4.0 * n * (n - 1) / n;
    p.link_floor_ms = (all_reduce + gather) / link_bw * 1e3;
    p.byte_floor_ms += p.link_floor_ms;
  }
  return p;
}

json point_json(const Point& p) {
  return {{"S", p.s},
          {"steps", p.steps},
          {"step_ms", p.wall_ms},
          {"engine_ms", p.engine_ms},
          {"engine_schedule_ms", p.schedule_ms},
          {"engine_build_ms", p.build_ms},
          {"prep_ms", p.prep_ms},
          {"host_ms", p.host_ms},
          {"wait_ms", p.wait_ms},
          {"device_ms", p.device_ms},
          {"bytes", p.bytes},
          {"flops", p.flops},
          {"byte_floor_ms", p.byte_floor_ms},
          {"link_floor_ms", p.link_floor_ms},
          {"flop_floor_ms", p.flop_floor_ms},
          {"floor_ms", p.floor_ms()},
          {"ratio", p.ratio()}};
}

// The decode shapes whose cuBLASLt candidates were timed (gemm.h Gemm::set_tuning) and what
// that gave against the heuristic's first pick.
void report_gemm_tuning(const kc::LlamaModel& model, json& result) {
  if (!model.gemm_tuning()) {
    std::printf("\nGEMM tuning: off (cuBLASLt's first pick everywhere)\n");
    result["gemm_tuning"] = nullptr;
    return;
  }
  const std::vector<kc::GemmTuning> t = model.gemm_tunings();
  double seconds = 0;
  for (const auto& x : t)
    seconds += x.seconds;
  std::printf(
      "\nGEMM tuning: %zu shapes timed in %.3f s (each candidate %d times, L2 evicted before "
      "each); per layer GEMM (us, median), first pick -> kept:\n",
      t.size(), seconds, kc::kGemmTuneRuns);
  json rows = json::array();
  for (const auto& x : t) {
    if (x.candidates == 0) {
      std::printf("  %s m=%4d n=%6d k=%6d  not timed (no memory for the scratch): first pick\n",
                  x.fp8 ? "fp8 " : "bf16", x.m, x.n, x.k);
    } else {
      std::printf("  %s m=%4d n=%6d k=%6d  %8.1f -> %8.1f%s  (%d candidates)\n",
                  x.fp8 ? "fp8 " : "bf16", x.m, x.n, x.k, x.first_us, x.chosen_us,
                  x.chosen == 0 ? " (first pick)" : "", x.candidates);
    }
    rows.push_back({{"m", x.m},
                    {"n", x.n},
                    {"k", x.k},
                    {"fp8", x.fp8},
                    {"candidates", x.candidates},
                    {"chosen", x.chosen},
                    {"first_us", x.first_us},
                    {"chosen_us", x.chosen_us}});
  }
  result["gemm_tuning"] = {{"shapes", rows}, {"seconds", seconds}};
}

}  // namespace

int run_engine_bench(const EngineBenchOptions& o) {
  if (!kc::device_available()) {
    std::fprintf(stderr, "bench engine: %s\n", kc::device_description().c_str());
    return 1;
  }
  auto config = preset_config(o.preset);
  if (!config.ok()) {
    std::fprintf(stderr, "bench engine: %s\n", config.error().message.c_str());
    return 1;
  }
  const bool fp8 = o.quantization == "fp8";
  const ModelCost m = cost_of(*config, fp8);
  std::printf("device: %s\n", kc::device_description().c_str());
  const double bw = kc::measure_read_bandwidth();
  const double peak = kc::measure_gemm_flops();
  std::printf("streaming read: %.0f GB/s; cuBLASLt bf16 GEMM 8192^3: %.0f TFLOP/s\n", bw / 1e9,
              peak / 1e12);
  std::printf("model %s%s%s: %.2f GB of weights read per decode step\n", o.preset.c_str(),
              fp8 ? " (FP8 E4M3 layer matrices, per-channel scales; LM head bf16)" : "",
              o.fp8_kv ? " (FP8 E4M3 KV cache)" : "", m.weight_bytes / 1e9);
  json result{{"device", kc::device_description()},
              {"read_bandwidth_GBps", bw / 1e9},
              {"gemm_bf16_TFLOPs", peak / 1e12},
              {"preset", o.preset},
              {"quantization", fp8 ? "fp8" : "none"},
              {"kv_cache_dtype", o.fp8_kv ? "fp8" : "bf16"},
              {"max_tokens_per_step", o.max_tokens_per_step},
              {"weight_bytes_per_step", m.weight_bytes}};
  if (o.step_table && o.tensor_parallel_size > 0) {
    std::fprintf(stderr,
                 "bench engine: --step-table runs on one GPU (no --tensor-parallel-size)\n");
    return 1;
  }
  if (o.step_table) {
    std::fflush(stdout);
    return run_step_table(o, m, bw, peak, std::move(result));
  }
  std::printf("rollout: %d prompts x %d siblings, %d-token prefix, %d tokens each (greedy)%s\n\n",
              o.groups, o.siblings, o.prefix, o.gen,
              o.logprobs >= 0 ? (", top-" + std::to_string(o.logprobs) + " logprobs").c_str() : "");
  std::fflush(stdout);

  const std::vector<GenerationRequest> reqs = rollout_requests(o);
  // (cascade, graphs): the main runs with the --graphs setting (on for both), then the eager
  // runs of the with/without table.
  const bool graphs = o.graphs != "off";
  std::vector<std::pair<bool, bool>> modes;
  if (o.attention != "flat") modes.emplace_back(true, graphs);
  if (o.attention != "cascade") modes.emplace_back(false, graphs);
  if (o.graphs == "both") {
    if (o.attention != "flat") modes.emplace_back(true, false);
    if (o.attention != "cascade") modes.emplace_back(false, false);
  }
  CudaBackendOptions bo;
  bo.block_size = 16;
  bo.num_blocks = rollout_blocks(o, bo.block_size);
  bo.max_tokens_per_step = o.max_tokens_per_step;
  bo.max_num_seqs = std::max(256, o.groups * o.siblings);
  bo.decode_gemm = o.decode_gemm;
  bo.gemm_tuning = o.gemm_tuning;
  bo.fp8_weights = fp8;
  bo.fp8_kv = o.fp8_kv;
  BenchBackend backend;
  if (o.tensor_parallel_size > 0) {
    auto made = CudaTensorParallelBackend::create(*config, nullptr, o.tensor_parallel_size, bo);
    if (!made.ok()) {
      std::fprintf(stderr, "bench engine: %s\n", made.error().message.c_str());
      return 1;
    }
    backend.split = std::move(made).value();
    std::printf(
        "tensor parallelism: %d rank(s), a thread per GPU, %s (each rank a random model "
        "of its own; floors per GPU)\n\n",
        o.tensor_parallel_size, kc::nccl_description().c_str());
  } else {
    auto made = CudaBackend::create(*config, nullptr, bo);
    if (!made.ok()) {
      std::fprintf(stderr, "bench engine: %s\n", made.error().message.c_str());
      return 1;
    }
    backend.one = std::move(made).value();
    backend.one->model().set_fp8_scales_in_readers(!o.fp8_scales_in_gemm);
    backend.one->model().set_fp8_attention_rows_in_merge(!o.fp8_attention_quantize_pass);
  }

  // Split over several GPUs: the group's all-reduce bus bandwidth (256 MiB per rank), the
  // links' term of the floor.
  double link_bw = 0;
  if (backend.split) {
    constexpr size_t kBytes = size_t{256} << 20;
    Result<double> t = backend.split->all_reduce_seconds(kBytes, 20);
    if (!t.ok()) {
      std::fprintf(stderr, "bench engine: %s\n", t.error().message.c_str());
      return 1;
    }
    const int n = backend.ranks();
    link_bw = double(kBytes) / *t * 2.0 * (n - 1) / n;  // 0 with one rank: no link crossed
    std::printf("all-reduce of 256 MiB over %d GPU(s): %.3f ms, bus bandwidth %.0f GB/s\n\n", n,
                *t * 1e3, link_bw / 1e9);
    result["all_reduce_256MiB_ms"] = *t * 1e3;
    result["all_reduce_bus_GBps"] = link_bw / 1e9;
  }
  const int rows = o.groups * o.siblings;
  result.update({{"groups", o.groups},
                 {"siblings", o.siblings},
                 {"prefix", o.prefix},
                 {"gen", o.gen},
                 {"logprobs", o.logprobs},
                 {"decode_gemm", backend.rank0().model().decode_gemm()},
                 {"tensor_parallel_size", o.tensor_parallel_size},
                 {"fp8_scales_in_readers", fp8 && !o.fp8_scales_in_gemm},
                 {"fp8_attention_rows_in_merge", fp8 && !o.fp8_attention_quantize_pass}});
  std::printf("decode GEMMs: %s\n\n", backend.rank0().model().decode_gemm()
                                          ? "Hopper decode GEMM (<= 128 rows), cuBLASLt above"
                                          : "cuBLASLt");
  if (fp8) {
    std::printf("FP8 scales: %s\n\n", !o.fp8_scales_in_gemm
                                          ? "applied by the ops that read each GEMM's output"
                                          : "in cuBLASLt (block-scaled kernels)");
  }
  std::map<std::string, ModeRun> runs;
  std::map<std::string, std::vector<Point>> points;
  for (auto [cascade, with_graphs] : modes) {
    ModeRun run;
    if (!run_rollout(o, backend, cascade, with_graphs, reqs, run, nullptr)) return 1;
    const std::string name = run.mode;
    // Prefill of one prompt: the first step (the budget holds one prompt, nothing decodes yet).
    const StepRecord& first = run.steps.front();
    const double prefill_flops =
        m.layer_flops(first.prefill) + 2.0 * m.lm_head_params +
        m.attn_flops_per_ctx_token * 0.5 * double(first.prefill) * first.prefill;
    const double prefill_floor_ms = prefill_flops / peak * 1e3;
    std::printf("== %s ==\n", name.c_str());
    std::printf(
        "prefill: %d tokens in %.2f ms; FLOP floor %.2f ms -> %.0f%% of the measured "
        "tensor-core peak\n",
        first.prefill, first.wall_ms, prefill_floor_ms, 100.0 * prefill_floor_ms / first.wall_ms);
    std::printf("%6s %6s %9s %8s %8s %8s %8s %9s %11s %11s %9s %7s\n", "S", "steps", "step ms",
                "engine", "prep", "host", "wait", "device", "byte floor", "FLOP floor", "floor",
                "ratio");
    std::vector<Point>& pts = points[name];
    for (int s : {16, 256, 1024}) {
      if (s > o.gen) continue;
      Point p =
          point_at(run, s, o.window, rows, m, bw, peak, o.gen, o.prefix, backend.ranks(), link_bw);
      pts.push_back(p);
      std::printf("%6d %6d %9.3f %8.3f %8.3f %8.3f %8.3f %9.3f %11.3f %11.3f %9.3f %6.2fx\n", p.s,
                  p.steps, p.wall_ms, p.engine_ms, p.prep_ms, p.host_ms, p.wait_ms, p.device_ms,
                  p.byte_floor_ms, p.flop_floor_ms, p.floor_ms(), p.ratio());
      std::printf(
          "%6s engine: schedule %.3f, build the batch %.3f, the rest (tokens, outputs) %.3f ms\n",
          "", p.schedule_ms, p.build_ms, p.engine_ms - p.schedule_ms - p.build_ms);
      if (p.link_floor_ms > 0) {
        std::printf("%6s the byte floor holds %.3f ms of collectives at the bus bandwidth\n", "",
                    p.link_floor_ms);
      }
    }
    const double tps = run.generated / run.total_s;
    std::printf(
        "rollout: %.2f s total, %.2f s decode, %lld tokens, %.0f tokens/s, %d "
        "preemptions; %d of %d decode steps replayed CUDA graphs\n\n",
        run.total_s, run.decode_s, static_cast<long long>(run.generated), tps, run.preemptions,
        run.graph_steps, run.decode_steps);
    std::fflush(stdout);
    json pj = json::array();
    for (const Point& p : pts)
      pj.push_back(point_json(p));
    std::vector<double> host_share;
    for (const StepRecord& r : run.steps) {
      if (r.prefill == 0 && r.wall_ms > 0)
        host_share.push_back((r.wall_ms - r.device_ms) / r.wall_ms);
    }
    result[name] = {{"prefill_tokens", first.prefill},
                    {"prefill_ms", first.wall_ms},
                    {"prefill_flop_floor_ms", prefill_floor_ms},
                    {"prefill_peak_fraction", prefill_floor_ms / first.wall_ms},
                    {"points", pj},
                    {"rollout_total_s", run.total_s},
                    {"rollout_decode_s", run.decode_s},
                    {"generated_tokens", run.generated},
                    {"tokens_per_s", tps},
                    {"preemptions", run.preemptions},
                    {"graph_steps", run.graph_steps},
                    {"decode_steps", run.decode_steps},
                    {"gpu_idle_share_median", median(host_share)}};
    runs[name] = std::move(run);
  }

  if (runs.count("cascade") && runs.count("flat")) {
    const ModeRun& c = runs["cascade"];
    const ModeRun& f = runs["flat"];
    std::printf("== cascade vs flat ==\n");
    json speed = json::array();
    for (size_t i = 0; i < points["cascade"].size(); ++i) {
      const Point& pc = points["cascade"][i];
      const Point& pf = points["flat"][i];
      std::printf("S=%-5d step %.3f vs %.3f ms: %.2fx\n", pc.s, pc.wall_ms, pf.wall_ms,
                  pf.wall_ms / pc.wall_ms);
      speed.push_back({{"S", pc.s}, {"speedup", pf.wall_ms / pc.wall_ms}});
    }
    std::printf("rollout decode %.2f vs %.2f s: %.2fx shorter; total %.2f vs %.2f s\n", c.decode_s,
                f.decode_s, f.decode_s / c.decode_s, c.total_s, f.total_s);
    result["cascade_vs_flat"] = {{"step_speedup", speed},
                                 {"rollout_decode_speedup", f.decode_s / c.decode_s}};
    if (o.check_agreement) {
      // First difference of each sequence; its flat logits' top-2 gap from an untimed re-run.
      NeedGap need;
      int identical = 0, differing_positions = 0;
      for (const auto& [key, ft] : f.tokens) {
        const auto& ct = c.tokens.at(key);
        const auto d = std::mismatch(ft.begin(), ft.end(), ct.begin());
        for (size_t i = 0; i < ft.size(); ++i)
          differing_positions += ft[i] != ct[i];
        if (d.first == ft.end()) {
          ++identical;
          continue;
        }
        need.keys.insert(
            {key.first, key.second, o.prefix + static_cast<int32_t>(d.first - ft.begin())});
      }
      ModeRun again;
      if (!need.keys.empty() && !run_rollout(o, backend, false, graphs, reqs, again, &need))
        return 1;
      float worst_gap = 0, worst_rel = 0;
      json firsts = json::array();
      for (const auto& [key, gb] : need.gaps) {
        const auto& [g, s, pos] = key;
        worst_gap = std::max(worst_gap, gb.first);
        worst_rel = std::max(worst_rel, gb.first / std::max(std::fabs(gb.second), 1e-6f));
        firsts.push_back({{"group", g},
                          {"sibling", s},
                          {"position", pos},
                          {"gap", gb.first},
                          {"best_logit", gb.second}});
      }
      std::printf(
          "agreement: %d of %zu sequences identical; %d differing positions in all; "
          "%zu first differences, largest top-2 logit gap there %.4f (%.2e of the best "
          "logit)\n",
          identical, f.tokens.size(), differing_positions, need.keys.size(), worst_gap, worst_rel);
      result["agreement"] = {{"sequences", f.tokens.size()},
                             {"identical", identical},
                             {"differing_positions", differing_positions},
                             {"first_differences", firsts},
                             {"largest_gap", worst_gap},
                             {"largest_gap_relative", worst_rel}};
    }
  }

  if (o.graphs == "both") {
    // The same rollouts with every decode step enqueued kernel by kernel.
    std::printf("\n== CUDA graphs: step ms with / without, and rollout decode s ==\n");
    const auto stats = backend.rank0().model().graph_stats();
    std::printf("graphs captured %lld, replayed steps %lld, evicted %lld%s%s\n",
                static_cast<long long>(stats.captures), static_cast<long long>(stats.replays),
                static_cast<long long>(stats.evictions), stats.disabled.empty() ? "" : "; ",
                stats.disabled.c_str());
    json gj = json::array();
    for (const std::string mode : {"cascade", "flat"}) {
      if (!runs.count(mode) || !runs.count(mode + "_eager")) continue;
      const auto& pg = points[mode];
      const auto& pe = points[mode + "_eager"];
      for (size_t i = 0; i < pg.size() && i < pe.size(); ++i) {
        std::printf("%-8s S=%-5d %.3f / %.3f ms (%.1f%% faster), host prep+launch %.3f / %.3f ms\n",
                    mode.c_str(), pg[i].s, pg[i].wall_ms, pe[i].wall_ms,
                    100 * (pe[i].wall_ms / pg[i].wall_ms - 1), pg[i].host_ms, pe[i].host_ms);
        gj.push_back({{"mode", mode},
                      {"S", pg[i].s},
                      {"graphs_ms", pg[i].wall_ms},
                      {"eager_ms", pe[i].wall_ms},
                      {"graphs_host_ms", pg[i].host_ms},
                      {"eager_host_ms", pe[i].host_ms}});
      }
      const ModeRun& rg = runs[mode];
      const ModeRun& re = runs[mode + "_eager"];
      std::printf("%-8s rollout decode %.2f / %.2f s (%.1f%% shorter)\n", mode.c_str(), rg.decode_s,
                  re.decode_s, 100 * (1 - rg.decode_s / re.decode_s));
      gj.push_back({{"mode", mode},
                    {"rollout_decode_graphs_s", rg.decode_s},
                    {"rollout_decode_eager_s", re.decode_s}});
    }
    result["graphs"] = {{"rows", gj},
                        {"captures", stats.captures},
                        {"replays", stats.replays},
                        {"evictions", stats.evictions},
                        {"disabled", stats.disabled}};
  }

  if (o.profile) {
    // Where the device time of a step goes, per operation (events after every operation of
    // profiled steps: slightly slower than the timed runs above).
    for (auto [cascade, with_graphs] : modes) {
      if (with_graphs != graphs) continue;
      Profile prof;
      ModeRun pr;
      if (!run_rollout(o, backend, cascade, with_graphs, reqs, pr, nullptr, &prof)) return 1;
      std::printf("\n== device time per operation, %s (us per step, 10 profiled steps) ==\n",
                  pr.mode.c_str());
      json pj;
      for (const auto& [point, ops] : prof) {
        double total = 0;
        for (const auto& [name, us] : ops)
          total += us;
        std::printf("S=%d: %.0f us\n", point, total);
        for (const auto& [name, us] : ops) {
          std::printf("  %-20s %9.1f  %5.1f%%\n", name.c_str(), us, 100 * us / total);
          pj[std::to_string(point)][name] = us;
        }
      }
      result["profile_" + pr.mode] = pj;
    }
  }

  report_gemm_tuning(backend.rank0().model(), result);

  if (!o.anchor_json.empty()) {
    std::ifstream in(o.anchor_json);
    json a = json::parse(in, nullptr, false);
    if (!a.is_discarded() && a.contains("attention")) {
      std::printf("\n== against PyTorch (same run: %s) ==\n", o.anchor_json.c_str());
      std::printf("%6s %12s %15s %12s %9s %14s %16s\n", "S", "torch base", "torch cascade",
                  "ours cascade", "ours flat", "vs torch base", "vs torch cascade");
      json rows_j = json::array();
      for (const json& r : a["attention"]) {
        const int s = r["S"];
        double oc = NAN, of = NAN;
        for (const Point& p : points["cascade"])
          if (p.s == s) oc = p.wall_ms;
        for (const Point& p : points["flat"])
          if (p.s == s) of = p.wall_ms;
        const double tb = r["step_base_ms"], tc = r["step_cascade_ms"];
        std::printf("%6d %12.3f %15.3f %12.3f %9.3f %13.2fx %15.2fx\n", s, tb, tc, oc, of, tb / oc,
                    tc / oc);
        rows_j.push_back({{"S", s},
                          {"torch_step_base_ms", tb},
                          {"torch_step_cascade_ms", tc},
                          {"ours_cascade_ms", oc},
                          {"ours_flat_ms", of}});
      }
      result["anchor"] = rows_j;
    }
  }
  return write_json(o.out_json, result) ? 0 : 1;
}

}  // namespace kvc::bench
