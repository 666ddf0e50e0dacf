// `kvcascade bench engine --step-table` (bench/cuda/engine_bench.h): warm step times of the real
// engine on the GPU over decode rows x prefill chunk, the shapes a serving replica steps; what the
// sim backend's step model is fitted to (bench/fit_sim_model.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <random>
#include <vector>

#include "bench/cuda/engine_bench_common.h"
#include "replica/backend/cuda/cuda_backend.h"
#include "replica/tokenizer/tokenizer.h"

namespace kvc::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kReps = 5;                            // timed steps per cell, after one untimed
constexpr int kDecodes[] = {0, 1, 4, 16, 64, 128};  // decoding requests (rows)
constexpr int kPrefills[] = {0, 16, 64, 256, 512, 1024, 2048, 4096};  // tokens of the chunk
constexpr int kDecodeTokens = 512;  // each decoding request's max_tokens: outlasts its table rows

// One cell of the step table: `decode` requests decoding, and a fresh `prefill`-token prompt
// prefilled in the same step.
struct StepCell {
  int decode = 0, prefill = 0;
  std::vector<double> wall_ms;  // timed repetitions (after one untimed)
  double context_sum = 0;       // the decoding requests' mean context, summed over those steps
  double ms() const { return median(wall_ms); }
  double decode_context() const { return wall_ms.empty() ? 0 : context_sum / wall_ms.size(); }
};

// Warm step times over decode rows x prefill chunks (cascade attention, CUDA graphs for the pure
// decode steps, as a replica serves). Per decode count: a fresh engine, `decode` requests
// prefilled and decoding; then per prefill size one untimed and kReps timed steps, each with a
// new prompt of that size (after the cached prefix, when there is one) that finishes at its first
// token.
bool measure_cells(const EngineBenchOptions& o, CudaBackend& backend, std::vector<StepCell>& out) {
  std::mt19937_64 rng(20261202);
  ByteTokenizer tokenizer;
  backend.set_graphs(true);
  for (int d : kDecodes) {
    Engine engine(backend, tokenizer, engine_config(o, true, backend.config()),
                  SteadyClock::instance());
    std::map<uint64_t, int64_t> generated;  // by decoding request
    for (int i = 0; i < d; ++i) {
      auto id = engine.submit(random_request(rng, o.step_table_context, kDecodeTokens));
      if (!id.ok()) {
        std::fprintf(stderr, "bench engine: %s\n", id.error().message.c_str());
        return false;
      }
      generated[*id] = 0;
    }
    auto step = [&](StepResult& r) {
      r = engine.step();
      if (!r.error.empty()) {
        std::fprintf(stderr, "bench engine: %s\n", r.error.c_str());
        return false;
      }
      for (const SequenceOutput& so : r.outputs) {
        if (auto it = generated.find(so.group_id); it != generated.end()) {
          it->second += so.num_new_tokens;
        }
      }
      return true;
    };
    // Until every one decodes, then a few warm decode steps.
    for (int steps = 0; d > 0; ++steps) {
      StepResult r;
      if (!step(r)) return false;
      if (r.stats.num_prefill_tokens == 0 && r.stats.num_decode_seqs == d && steps > 8) break;
      if (steps > 1000) {
        std::fprintf(stderr, "bench engine: step table: %d requests never all decoded\n", d);
        return false;
      }
    }
    // The shared prefix, cached before anything is timed (untimed steps until it is done).
    const GenerationRequest prefix = random_request(rng, o.step_table_cached, 1);
    if (o.step_table_cached > 0) {
      auto id = engine.submit(prefix);
      if (!id.ok()) {
        std::fprintf(stderr, "bench engine: step table: %s\n", id.error().message.c_str());
        return false;
      }
      for (bool done = false; !done;) {
        StepResult r;
        if (!step(r)) return false;
        done = std::any_of(r.finished.begin(), r.finished.end(),
                           [&](const auto& g) { return g->id == *id; });
      }
    }
    for (int p : kPrefills) {
      if (p == 0 && d == 0) continue;
      if (p + d > o.max_tokens_per_step) continue;  // the budget counts decode rows too
      StepCell cell{d, p, {}};
      for (int rep = 0; rep <= kReps; ++rep) {
        if (p > 0) {
          GenerationRequest q = random_request(rng, p, 1);
          q.prompt.insert(q.prompt.begin(), prefix.prompt.begin(), prefix.prompt.end());
          auto id = engine.submit(q);
          if (!id.ok()) {
            std::fprintf(stderr, "bench engine: step table: %s\n", id.error().message.c_str());
            return false;
          }
        }
        double context = 0;  // each decoding request's prompt and tokens so far
        for (const auto& [id, n] : generated)
          context += static_cast<double>(o.step_table_context + n);
        const Clock::time_point t0 = Clock::now();
        StepResult r;
        if (!step(r)) return false;
        const double wall = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (r.stats.num_prefill_tokens != p || r.stats.num_decode_seqs != d) {
          std::fprintf(stderr, "bench engine: step table cell (%d, %d) ran (%d, %d)\n", d, p,
                       static_cast<int>(r.stats.num_decode_seqs),
                       static_cast<int>(r.stats.num_prefill_tokens));
          return false;
        }
        if (rep > 0) {
          cell.wall_ms.push_back(wall);
          cell.context_sum += d > 0 ? context / d : 0;
        }
      }
      std::fprintf(stderr, "  step table: %d decoding + %d prefill: %.3f ms\n", d, p, cell.ms());
      out.push_back(std::move(cell));
    }
  }
  return true;
}

}  // namespace

int run_step_table(const EngineBenchOptions& o, const ModelCost& m, double bw, double peak,
                   json result) {
  CudaBackendOptions bo;
  bo.block_size = 16;
  // The most decoding requests at their longest, the cached prefix and the largest chunk.
  const int max_decodes = *std::max_element(std::begin(kDecodes), std::end(kDecodes));
  bo.num_blocks =
      static_cast<int32_t>(max_decodes * ((o.step_table_context + kDecodeTokens) / 16 + 2) +
                           (o.step_table_cached + o.max_tokens_per_step) / 16 + 64);
  bo.max_tokens_per_step = o.max_tokens_per_step;
  bo.max_num_seqs = 256;
  bo.fp8_weights = o.quantization == "fp8";
  bo.decode_gemm = o.decode_gemm;
  auto made = CudaBackend::create(m.config, nullptr, bo);
  if (!made.ok()) {
    std::fprintf(stderr, "bench engine: %s\n", made.error().message.c_str());
    return 1;
  }
  std::vector<StepCell> cells;
  if (!measure_cells(o, **made, cells)) return 1;
  const double cached = o.step_table_cached;
  std::printf(
      "step table: warm steps (median of %d), decode requests with %d-token prompts + a fresh "
      "prompt's prefill in the same step, after %d cached tokens\n",
      kReps, o.step_table_context, o.step_table_cached);
  std::printf("%7s %8s %9s %9s %11s %11s %9s\n", "decode", "prefill", "context", "step ms",
              "byte floor", "FLOP floor", "over");
  json rows = json::array();
  for (const StepCell& c : cells) {
    // Weights once; each decode row's context KV; the chunk's context KV, its causal attention
    // (after the cached tokens) and its GEMM rows.
    const auto kv_token = static_cast<double>(m.config.kv_bytes_per_token(2));  // bf16 KV
    const double ctx = c.decode_context();
    const double bytes = m.weight_bytes + kv_token * (c.decode * ctx + cached + c.prefill);
    const double flops = m.layer_flops(c.decode + c.prefill) +
                         2.0 * m.lm_head_params * (c.decode + (c.prefill > 0 ? 1 : 0)) +
                         m.attn_flops_per_ctx_token * (c.decode * ctx + double(c.prefill) * cached +
                                                       0.5 * double(c.prefill) * c.prefill);
    const double byte_floor = bytes / bw * 1e3, flop_floor = flops / peak * 1e3;
    const double over = c.ms() - std::max(byte_floor, flop_floor);
    std::printf("%7d %8d %9.1f %9.3f %11.3f %11.3f %9.3f\n", c.decode, c.prefill, ctx, c.ms(),
                byte_floor, flop_floor, over);
    rows.push_back({{"decode", c.decode},
                    {"prefill", c.prefill},
                    {"decode_context_mean", ctx},
                    {"step_ms", c.ms()},
                    {"reps_ms", c.wall_ms},
                    {"byte_floor_ms", byte_floor},
                    {"flop_floor_ms", flop_floor},
                    {"over_floor_ms", over}});
  }
  result["step_table"] = {
      {"context", o.step_table_context}, {"cached_prefix", o.step_table_cached}, {"rows", rows}};
  return write_json(o.out_json, result) ? 0 : 1;
}

}  // namespace kvc::bench
