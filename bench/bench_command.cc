// `kvcascade bench kernels`: the device benchmark of flat vs cascade decode
// (bench/cuda/kernel_bench.h). `kvcascade bench router`: the router against direct access and nginx
// (bench/router_bench.h). `kvcascade bench routing`: policies on a trace through sim replicas
// (bench/routing_bench.h). `kvcascade bench pressure`: progress under KV memory pressure
// (bench/pressure_bench.h). `kvcascade bench gemm`: the decode step's GEMMs, cuBLASLt vs the decode
// GEMM (bench/cuda/gemm_bench.h). `kvcascade bench engine`: the RL rollout through the engine on
// the GPU (bench/cuda/engine_bench.h).
#include "bench/bench_command.h"

#include <cstdio>
#include <string>

#include "bench/pressure_bench.h"
#include "bench/rl_bench.h"
#include "bench/router_bench.h"
#include "bench/routing_bench.h"
#include "replica/model/model_config.h"

namespace kvc::bench {
namespace {

// A GPU benchmark this binary does not have: a build without CUDA.
int no_gpu(const char* name) {
  std::fprintf(stderr,
               "kvcascade bench %s: this binary has no GPU benchmarks (kvcascade-cuda has them, "
               "built where nvcc is found)\n",
               name);
  return 2;
}

// --kv-cache-dtype auto|fp8 of a GPU benchmark: fp8 sets `fp8_kv` (floors then count a byte per KV
// element).
void add_kv_cache_dtype(CLI::App* cmd, bool& fp8_kv, const std::string& fp8_means) {
  cmd->add_option_function<std::string>(
         "--kv-cache-dtype", [&fp8_kv](const std::string& v) { fp8_kv = v == "fp8"; },
         "fp8: " + fp8_means + " (floors count a byte per KV element)")
      ->check(CLI::IsMember({"auto", "fp8"}));
}

}  // namespace

std::function<int()> add_bench_command(CLI::App& app, const GpuBenches& gpu) {
  auto f = std::make_shared<KernelBenchOptions>();
  CLI::App* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  CLI::App* kernels = bench->add_subcommand(
      "kernels", "flat vs cascade decode attention on the GPU, next to the byte floor");
  kernels->add_option("--out", f->out_json, "write the results as JSON to this file");
  kernels->add_flag("--quick", f->quick, "the worked example and the tree only");
  add_kv_cache_dtype(kernels, f->fp8_kv,
                     "the pool as E4M3 codes read with bf16 queries; auto: fp16");
  kernels->add_option("--iters", f->iters, "timed runs per measurement (median reported)")
      ->check(CLI::Range(3, 1000));
  kernels->add_option("--only", f->only, "run only this case (its row number in the table, from 0)")
      ->check(CLI::Range(0, 1000));
  auto r = std::make_shared<RouterBenchOptions>();
  CLI::App* router = bench->add_subcommand(
      "router", "the router's added latency and throughput against direct access and nginx");
  router->add_option("--out", r->out, "write the results as JSON to this file");
  router->add_option("--seconds", r->seconds, "measured seconds per run")
      ->check(CLI::Range(0.2, 600.0));
  router->add_option("--concurrency", r->concurrency, "connections of the throughput runs")
      ->check(CLI::Range(1, 512));
  router->add_option("--replicas", r->replicas, "instant fake replicas")->check(CLI::Range(1, 64));
  router->add_option("--prompt-bytes", r->prompt_bytes, "shared prompt prefix per tenant")
      ->check(CLI::Range(16, 1 << 20));
  router->add_option("--tenants", r->tenants, "distinct prompt prefixes")
      ->check(CLI::Range(1, 4096));
  router->add_option("--router-threads", r->router_threads, "the router's HTTP server threads")
      ->check(CLI::Range(1, 64));
  router->add_option("--nginx", r->nginx, "nginx binary");
  router->add_option("--router-binary", r->router_binary,
                     "the kvcascade binary run as the router (default: this one)");
  router
      ->add_option("--replica-kind", r->replica_kind,
                   "what the fake replicas answer like (the router detects it)")
      ->check(CLI::IsMember({"kvcascade", "vllm", "sglang", "openai"}))
      ->capture_default_str();
  auto g = std::make_shared<RoutingBenchOptions>();
  CLI::App* routing = bench->add_subcommand(
      "routing",
      "a trace replayed open-loop through a router per policy in front of sim replicas: cache "
      "hits vs an oracle, balance, TTFT");
  routing->add_option("--mix", g->mixes, "synthetic mixes (chat, rl, mixed)")
      ->check(CLI::IsMember(trace_mix_names()))
      ->capture_default_str();
  routing->add_option("--trace", g->trace, "a recorded trace (JSON lines) instead of --mix")
      ->check(CLI::ExistingFile);
  routing->add_option("--requests", g->requests, "requests per synthetic mix")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  routing
      ->add_option("--rate", g->rates,
                   "mean arrivals per second (default: the mix's); several: each mix at each")
      ->check(CLI::Range(0.01, 1e6));
  routing->add_option("--seed", g->seed, "seed of the synthetic mixes");
  routing->add_option("--policy", g->policies, "policies compared (default: all five)");
  routing->add_option("--replicas", g->replicas, "sim replicas")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  routing
      ->add_option("--routers", g->routers,
                   "routers in front of the same replicas, requests spread over them in turn; "
                   "several: each mix and policy with each")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  routing
      ->add_option("--router-poll-ms", g->router_poll_ms,
                   "how often each router polls every replica's health and load")
      ->check(CLI::Range(10, 10000))
      ->capture_default_str();
  routing
      ->add_option("--routed-ttl-ms", g->routed_ttl_ms,
                   "each router counts a prompt it sent as held by that replica for this long "
                   "before its KV events say so (the router's --routed-ttl-ms)")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}))
      ->capture_default_str();
  routing
      ->add_option("--backend", g->backend,
                   "the replicas: sim (--sim-preset's device model) or cpu (the tiny model on "
                   "the CPU backend, in this process)")
      ->check(CLI::IsMember({"sim", "cpu"}))
      ->capture_default_str();
  routing
      ->add_option("--sim-preset", g->sim_presets,
                   "model and GPU of the sim replicas; several (comma-separated) are given to "
                   "the replicas in turn: a mixed fleet")
      ->delimiter(',')
      ->check(CLI::IsMember(sim_preset_names()));
  routing->add_option("--kv-blocks", g->kv_blocks, "KV blocks per replica (default: the GPU's)")
      ->check(CLI::Range(1, 1 << 24));
  routing
      ->add_option("--kv-cold-reuse-rate", g->kv_cold_reuse_rate,
                   "the replicas' --kv-cold-reuse-rate (0: their prefix caches evict least "
                   "recently used first only)")
      ->check(CLI::Range(0.0, 1.0));
  routing
      ->add_option("--kv-host-memory-gb", g->kv_host_memory_gb,
                   "sim replicas: GB of host memory each keeps KV evicted from its pool in, "
                   "loaded back over PCIe instead of recomputed (default 0: none)")
      ->check(CLI::Range(0.0, 1e5));
  routing
      ->add_option("--stream-interval", g->stream_interval,
                   "the replicas' --stream-interval: tokens per streamed chunk after a "
                   "choice's first (the harness's CPU per generated token; TTFT unchanged)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  routing->add_option("--ttft-slo-ms", g->ttft_slo_ms, "goodput counts requests within it")
      ->check(CLI::Range(1.0, 1e6))
      ->capture_default_str();
  routing->add_option("--timeout", g->request_timeout_s, "seconds a request may take")
      ->check(CLI::Range(1.0, 3600.0));
  routing->add_option("--out", g->out, "write the results as JSON to this file");
  routing->add_option("--plot", g->plot, "draw TTFT and load per policy into this SVG file");
  routing->add_option("--replot", g->replot,
                      "draw --plot from this saved --out JSON instead of running anything");
  routing->add_flag("!--no-progress", g->progress, "no progress lines on stderr");
  routing
      ->add_option(
          "--decisions", g->decisions,
          "write each replay's routing decisions (a TSV line per request) into this folder")
      ->check(CLI::ExistingDirectory);
  routing
      ->add_option("--save-traces", g->save_traces,
                   "write each synthetic trace as JSON lines into this folder (for --trace)")
      ->check(CLI::ExistingDirectory);
  routing->add_flag("--save-only", g->save_only, "with --save-traces: write them, replay nothing");
  auto p = std::make_shared<PressureBenchOptions>();
  CLI::App* pressure = bench->add_subcommand(
      "pressure", "long sibling groups at once on a small KV pool vs one at a time (CPU replica)");
  pressure->add_option("--out", p->out, "write the results as JSON to this file");
  pressure->add_option("--kv-blocks", p->kv_blocks, "KV blocks of the replica's pool")
      ->check(CLI::Range(8, 1 << 20));
  pressure->add_option("--groups", p->groups, "requests sent at once")->check(CLI::Range(1, 64));
  pressure->add_option("-n", p->n, "samples per request")->check(CLI::Range(1, 64));
  pressure->add_option("--max-tokens", p->max_tokens, "tokens per sample (ignore_eos)")
      ->check(CLI::Range(1, 4000));
  auto rl = std::make_shared<RlBenchOptions>();
  CLI::App* rl_cmd = bench->add_subcommand(
      "rl",
      "a GRPO-shaped loop through the router: rollouts with logprobs, then a weight update, per "
      "step (an in-process CPU fleet, or --router)");
  rl_cmd->add_option("--out", rl->out, "write the results as JSON to this file");
  rl_cmd->add_option("--router", rl->router,
                     "HOST:PORT of a running router (default: a fleet "
                     "of tiny CPU replicas started here)");
  rl_cmd->add_option("--model", rl->model, "the served model name");
  rl_cmd
      ->add_option("--checkpoints", rl->checkpoints,
                   "with --router: checkpoint folders (absolute paths on the replicas' disks) to "
                   "alternate")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](const std::string& v) {
            return !v.empty() && v.front() == '/' ? std::string{}
                                                  : std::string{"must be an absolute path"};
          },
          "ABSOLUTE PATH"));
  rl_cmd->add_option("--replicas", rl->replicas, "replicas of the in-process fleet")
      ->check(CLI::Range(1, 16));
  rl_cmd->add_option("--steps", rl->steps, "RL steps")->check(CLI::Range(1, 1000));
  rl_cmd->add_option("--prompts", rl->prompts, "prompts per step (G)")->check(CLI::Range(1, 256));
  rl_cmd->add_option("-n", rl->samples, "samples per prompt")->check(CLI::Range(1, 256));
  rl_cmd->add_option("--prompt-bytes", rl->prompt_tokens, "bytes of each prompt's shared text")
      ->check(CLI::Range(16, 1 << 20));
  rl_cmd->add_option("--max-tokens", rl->max_tokens, "tokens per sample (ignore_eos)")
      ->check(CLI::Range(1, 1 << 16));
  rl_cmd->add_option("--logprobs", rl->logprobs, "top logprobs per token")
      ->check(CLI::Range(0, 20));
  rl_cmd->add_option("--strategy", rl->strategy, "weight rollout: all-at-once or rolling")
      ->check(CLI::IsMember({"all-at-once", "rolling"}));
  rl_cmd->add_option("--mode", rl->mode, "weight update mode: drain or abort")
      ->check(CLI::IsMember({"drain", "abort"}));
  auto e = std::make_shared<EngineBenchOptions>();
  CLI::App* engine = bench->add_subcommand(
      "engine",
      "an RL rollout through the engine on the GPU: decode steps vs their floors, "
      "cascade vs flat, the whole rollout, prefill");
  engine->add_option("--out", e->out_json, "write the results as JSON to this file");
  engine->add_option("--anchor", e->anchor_json,
                     "anchor.json of torch_cascade_anchor.py from the same run: rows side by side");
  engine->add_option("--preset", e->preset, "model shape (random bf16 weights)")
      ->check(CLI::IsMember(preset_names()));
  engine->add_option("--groups", e->groups, "prompts")->check(CLI::Range(1, 64));
  engine->add_option("--siblings", e->siblings, "samples per prompt")->check(CLI::Range(1, 256));
  engine->add_option("--prefix", e->prefix, "prompt tokens")->check(CLI::Range(16, 65536));
  engine->add_option("--gen", e->gen, "tokens generated per sample")->check(CLI::Range(1, 16384));
  engine->add_option("--attention", e->attention, "cascade, flat or both")
      ->check(CLI::IsMember({"cascade", "flat", "both"}));
  engine
      ->add_option("--graphs", e->graphs,
                   "decode steps as CUDA graph replays: on, off or both (a table with and "
                   "without)")
      ->check(CLI::IsMember({"on", "off", "both"}));
  engine->add_option("--window", e->window, "decode steps around each S point")
      ->check(CLI::Range(1, 1000));
  engine->add_option("--max-tokens-per-step", e->max_tokens_per_step, "the step's token budget")
      ->check(CLI::Range(256, 65536));
  engine->add_flag("!--no-agreement", e->check_agreement,
                   "skip the cascade-vs-flat token comparison");
  engine->add_flag("!--no-profile", e->profile, "skip the per-operation device profile");
  engine->add_flag("--step-table", e->step_table,
                   "instead of the rollout: warm step times over decode rows x prefill chunk");
  engine
      ->add_option("--step-table-context", e->step_table_context,
                   "prompt tokens of each decoding request in the step table")
      ->check(CLI::Range(16, 32768))
      ->capture_default_str();
  engine
      ->add_option("--step-table-cached", e->step_table_cached,
                   "tokens every step-table prompt has cached before its fresh part (16s)")
      ->check(CLI::Range(0, 16384) & CLI::Validator(
                                         [](const std::string& v) {
                                           return std::stoi(v) % 16 == 0
                                                      ? std::string{}
                                                      : std::string{"must be a multiple of 16"};
                                         },
                                         "MULTIPLE OF 16"))
      ->capture_default_str();
  engine
      ->add_option("--logprobs", e->logprobs,
                   "every sibling asks for each token's logprob and the top-K logprobs (0-20)")
      ->check(CLI::Range(0, 20));
  engine
      ->add_option("--quantization", e->quantization,
                   "fp8: the layer matrices in FP8 E4M3 with per-channel scales (floors count "
                   "their bytes, and their FLOPs at twice the bf16 rate)")
      ->check(CLI::IsMember({"fp8"}));
  add_kv_cache_dtype(engine, e->fp8_kv, "the KV cache as E4M3 codes; auto: bf16");
  engine->add_flag("--decode-gemm", e->decode_gemm,
                   "GEMMs of <= 128 rows through the Hopper decode GEMM (experimental)");
  engine->add_flag_callback(
      "--no-gemm-tuning", [e] { e->gemm_tuning = false; },
      "keep cuBLASLt's first pick for every GEMM instead of timing its candidates at each "
      "decode shape's first step");
  engine
      ->add_option("--tensor-parallel-size", e->tensor_parallel_size,
                   "the model split over this many GPUs (1: the split's path, NCCL included, on "
                   "one GPU); floors per GPU")
      ->check(CLI::IsMember({1, 2, 4, 8}));
  engine->add_flag("--fp8-scales-in-gemm", e->fp8_scales_in_gemm,
                   "with --quantization fp8: cuBLASLt applies the scales (its block-scaled "
                   "kernels) instead of the ops that read the GEMMs' outputs (its per-tensor "
                   "kernels with scales of 1, the default)");
  engine->add_flag("--fp8-attention-quantize-pass", e->fp8_attention_quantize_pass,
                   "with --quantization fp8: the attention output is quantized for the o "
                   "projection by a pass of its own instead of by the attention's merge (the "
                   "default; the same codes)");
  auto gm = std::make_shared<GemmBenchOptions>();
  CLI::App* gemm = bench->add_subcommand(
      "gemm",
      "the decode step's GEMMs: cuBLASLt vs the Hopper decode GEMM, next to the byte floor");
  gemm->add_option("--out", gm->out_json, "write the results as JSON to this file");
  gemm->add_option("--rows", gm->rows, "activation rows (sequences in the decode batch)")
      ->check(CLI::Range(1, 128));
  gemm->add_option("--iters", gm->iters, "graph replays per measurement (median reported)")
      ->check(CLI::Range(1, 1000));
  gemm->add_option("--splits", gm->splits, "force the decode GEMM's K split (0: planner)")
      ->check(CLI::Range(0, 8));
  gemm->add_option("--only", gm->only, "this GEMM only")
      ->check(CLI::IsMember({"qkv", "o", "gate_up", "down", "lm_head"}));
  return [gpu, f, r, router, g, routing, p, pressure, rl, rl_cmd, e, engine, gm, gemm] {
    if (gemm->parsed()) {
      return gpu.gemm ? gpu.gemm(*gm) : no_gpu("gemm");
    }
    if (router->parsed()) return run_router_bench(*r);
    if (routing->parsed()) return run_routing_bench(*g);
    if (engine->parsed()) return gpu.engine ? gpu.engine(*e) : no_gpu("engine");
    if (pressure->parsed()) return run_pressure_bench(*p);
    if (rl_cmd->parsed()) return run_rl_bench(*rl);
    return gpu.kernels ? gpu.kernels(*f) : no_gpu("kernels");
  };
}

}  // namespace kvc::bench
