#include "cli/engine_flags.h"

#include "replica/backend/sim/sim_backend.h"
#include "replica/model/model_config.h"

namespace kvc::cli {

void add_engine_flags(CLI::App& cmd, EngineFlags& f) {
  BackendOptions& b = f.backend;
  // Options only some backends read are optional (BackendOptions): given to another backend, the
  // factory refuses them by name.
  cmd.add_option_function<std::string>(
         "--preset", [&b](const std::string& v) { b.preset = v; },
         "random-initialised model shape (default tiny)")
      ->check(CLI::IsMember(preset_names()));
  cmd.add_option("--model", b.model_dir, "Hugging Face model folder (config.json + *.safetensors)")
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--tokenizer", b.tokenizer_dir,
                 "Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json); default: "
                 "--model's folder when it has tokenizer.json, else one token per byte")
      ->check(CLI::ExistingDirectory);
  cmd.add_option_function<uint64_t>(
      "--weights-seed", [&b](uint64_t v) { b.weights_seed = v; },
      "seed of the random-initialised weights (default 1234)");
  cmd.add_option("--quantization", b.quantization,
                 "fp8: the layer matrices in FP8 E4M3 with one scale per output channel, "
                 "quantized at load, and FP8 activations with one scale per token; none: bf16 "
                 "(float32 on the CPU), an FP8 checkpoint dequantized (cpu, cuda; default: FP8 "
                 "exactly when the checkpoint is)")
      ->check(CLI::IsMember({"fp8", "none"}));
  cmd.add_option("--kv-cache-dtype", b.kv_cache_dtype,
                 "auto: the backend's own (float32 on the CPU, bf16 on the GPU); fp8: E4M3 keys "
                 "and values, one scale per layer for each (an FP8 checkpoint's k_scale / "
                 "v_scale, else 1.0), one byte per element on cuda and in the sim (twice the "
                 "blocks for the same memory); the CPU keeps the E4M3 values in float32")
      ->check(CLI::IsMember({"auto", "fp8"}));
  cmd.add_option("--backend", b.backend,
                 "cpu (float32 reference), cuda (bf16 on the GPU) or sim (no math: each step takes "
                 "the time the bandwidth model predicts for --sim-preset's GPU)")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}));
  cmd.add_option_function<std::string>(
         "--sim-preset", [&b](const std::string& v) { b.sim_preset = v; },
         "--backend sim: model and GPU (default h200-llama3-8b)")
      ->check(CLI::IsMember(sim_preset_names()));
  cmd.add_option_function<double>(
         "--sim-bandwidth-gbps", [&b](double v) { b.sim_bandwidth_gbps = v; },
         "--backend sim: HBM read bandwidth in GB/s (default: the preset's)")
      ->check(CLI::Range(1.0, 1e6));
  cmd.add_option_function<double>(
         "--sim-peak-tflops", [&b](double v) { b.sim_peak_tflops = v; },
         "--backend sim: bf16 TFLOP/s the GEMMs reach (default: the preset's)")
      ->check(CLI::Range(0.1, 1e5));
  cmd.add_option_function<double>(
         "--sim-step-overhead-ms", [&b](double v) { b.sim_step_overhead_ms = v; },
         "--backend sim: the constant part of a step's cost beyond its GEMMs and attention "
         "(default: the preset's; its per-row and prefill parts stay)")
      ->check(CLI::Range(0.0, 1e4));
  cmd.add_option(
         "--kv-blocks", b.kv_blocks,
         "KV cache blocks in the pool (0, the default: 4096 on the CPU; on the GPU or sim, as "
         "many as --gpu-memory-utilization leaves room for)")
      ->check(CLI::Range(0, 1 << 24));
  cmd.add_option_function<double>(
         "--kv-host-memory-gb", [&b](double v) { b.kv_host_memory_gb = v; },
         "GB of host memory that keeps KV blocks evicted from the pool, loaded back instead of "
         "recomputed when a prompt asks for them again (default: none; cuda: pinned memory)")
      ->check(CLI::Range(0.0, 1e5));
  cmd.add_option_function<double>(
         "--gpu-memory-utilization", [&b](double v) { b.gpu_memory_utilization = v; },
         "--backend cuda or sim: share of the GPU's memory for weights, workspace and KV cache "
         "(default 0.9)")
      ->check(CLI::Range(0.05, 0.99));
  cmd.add_flag_callback(
      "--no-cuda-graphs", [&b] { b.cuda_graphs = false; },
      "--backend cuda: enqueue every decode step's kernels instead of replaying CUDA graphs");
  cmd.add_flag_callback(
      "--no-gemm-tuning", [&b] { b.gemm_tuning = false; },
      "--backend cuda: keep cuBLASLt's first pick for every GEMM instead of timing its "
      "candidates at each decode shape's first step (a measurement: two processes may pick "
      "differently, and their results then differ by summation order)");
  cmd.add_flag("--decode-gemm", b.decode_gemm,
               "GEMMs of <= 128 rows through the Hopper decode GEMM (experimental, --backend cuda: "
               "slower than cuBLASLt so far)");
  cmd.add_option("--tensor-parallel-size", b.tensor_parallel_size,
                 "ranks the model is split over (1, 2, 4, 8; they must divide its heads, KV heads "
                 "and intermediate size): --backend cpu runs a thread per rank; cuda takes 1 so "
                 "far")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--block-size", b.block_size, "tokens per KV block")->check(CLI::Range(1, 1024));
  cmd.add_option("--attention", f.attention, "cascade, or flat (bit-reproducible)")
      ->check(CLI::IsMember({"cascade", "flat"}));
  cmd.add_option("--logprobs-mode", f.logprobs_mode,
                 "logprobs of the model's distribution (raw: log-softmax of the logits) or of the "
                 "one tokens are drawn from (processed: after temperature, top-k and top-p)")
      ->check(CLI::IsMember({"raw", "processed"}));
  cmd.add_option(
         "--kv-cold-reuse-rate", f.engine.cold_reuse_rate,
         "prefix cache: blocks of a branch whose earlier blocks were found again less often "
         "than this are evicted first (0: least recently used first only)")
      ->check(CLI::Range(0.0, 1.0));
  auto& s = f.engine.scheduler;
  cmd.add_option("--max-num-seqs", s.max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-tokens-per-step", s.max_tokens_per_step, "token budget of one step")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--group-wait-ms", f.group_wait_ms,
                 "how long the first requests of a declared group (group_size) wait for the rest "
                 "before starting with those present")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  cmd.add_option("--group-idle-ms", f.group_idle_ms,
                 "within --group-wait-ms: how long after the latest member of a declared group "
                 "arrived, with none following, those present start (0: off)")
      ->check(CLI::Range(int64_t{0}, int64_t{600000}));
  auto& c = f.engine.cascade;
  cmd.add_option("--cascade-min-shared-tokens", c.min_shared_tokens,
                 "shortest shared span worth a cascade level")
      ->check(CLI::Range(0, 1 << 24));
  cmd.add_option("--cascade-min-siblings", c.min_members,
                 "fewest sequences sharing a span worth a cascade level")
      ->check(CLI::Range(2, 1 << 20));
  cmd.add_option("--cascade-pass-overhead-bytes", c.pass_overhead_bytes,
                 "fixed cost of one more attention pass, in bytes of KV traffic")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--cascade-hysteresis", c.hysteresis,
                 "a kept level stays while it clears (1 - h) x the thresholds")
      ->check(CLI::Range(0.0, 1.0));
}

BackendOptions backend_options(const EngineFlags& f) {
  BackendOptions b = f.backend;
  b.max_tokens_per_step = f.engine.scheduler.max_tokens_per_step;
  b.max_num_seqs = f.engine.scheduler.max_num_seqs;
  return b;
}

EngineConfig engine_config(const EngineFlags& f, const Backend& backend) {
  EngineConfig c = f.engine;
  c.cascade.enabled = f.attention == "cascade";
  c.processed_logprobs = f.logprobs_mode == "processed";
  c.scheduler.affinity_wait = std::chrono::milliseconds(f.group_wait_ms);
  c.scheduler.affinity_idle = std::chrono::milliseconds(f.group_idle_ms);
  return fit_engine_config(std::move(c), backend);
}

}  // namespace kvc::cli
