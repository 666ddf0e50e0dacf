#include "cli/engine_flags.h"

#include <cstdio>
#include <filesystem>

#include "replica/cpu_backend.h"
#include "replica/hf_tokenizer.h"
#include "replica/sim_backend.h"
#include "replica/weights.h"
#if KVCASCADE_HAVE_CUDA
#include "replica/cuda/cuda_backend.h"
#endif

namespace kvc::cli {

void add_engine_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--preset", f.preset, "random-initialised model shape")
      ->check(CLI::IsMember({"tiny", "llama3-8b"}));
  cmd.add_option("--model", f.model_dir, "Hugging Face model folder (config.json + *.safetensors)")
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--tokenizer", f.tokenizer_dir,
                 "Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json); default: "
                 "--model's folder when it has tokenizer.json, else one token per byte")
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--weights-seed", f.weights_seed, "seed of the random-initialised weights");
  cmd.add_option("--backend", f.backend,
                 "cpu (float32 reference), cuda (bf16 on the GPU) or sim (no math: each step takes "
                 "the time the bandwidth model predicts for --sim-preset's GPU)")
      ->check(CLI::IsMember({"cpu", "cuda", "sim"}));
  cmd.add_option("--sim-preset", f.sim_preset,
                 "--backend sim: model and GPU (the model shape replaces --preset)")
      ->check(CLI::IsMember(sim_preset_names()));
  cmd.add_option("--sim-bandwidth-gbps", f.sim_bandwidth_gbps,
                 "--backend sim: HBM read bandwidth in GB/s (default: the preset's)")
      ->check(CLI::Range(1.0, 1e6));
  cmd.add_option("--sim-peak-tflops", f.sim_peak_tflops,
                 "--backend sim: bf16 TFLOP/s the GEMMs reach (default: the preset's)")
      ->check(CLI::Range(0.1, 1e5));
  cmd.add_option("--sim-step-overhead-ms", f.sim_step_overhead_ms,
                 "--backend sim: the constant part of a step's cost beyond its GEMMs and attention "
                 "(default: the preset's; its per-row and prefill parts stay)")
      ->check(CLI::Range(0.0, 1e4));
  cmd.add_option(
         "--kv-blocks", f.kv_blocks,
         "KV cache blocks in the pool (0, the default: 4096 on the CPU; on the GPU or sim, as "
         "many as --gpu-memory-utilization leaves room for)")
      ->check(CLI::Range(0, 1 << 24));
  cmd.add_option("--gpu-memory-utilization", f.gpu_memory_utilization,
                 "share of the GPU's memory for weights, workspace and KV cache")
      ->check(CLI::Range(0.05, 0.99));
  cmd.add_flag("!--no-cuda-graphs", f.cuda_graphs,
               "enqueue every decode step's kernels instead of replaying CUDA graphs");
  cmd.add_flag("--decode-gemm", f.decode_gemm,
               "GEMMs of <= 128 rows through the Hopper decode GEMM (experimental, --backend cuda: "
               "slower than cuBLASLt so far)");
  cmd.add_option("--block-size", f.block_size, "tokens per KV block")->check(CLI::Range(1, 1024));
  cmd.add_option("--attention", f.attention, "cascade, or flat (bit-reproducible)")
      ->check(CLI::IsMember({"cascade", "flat"}));
  auto& s = f.engine.scheduler;
  cmd.add_option("--max-num-seqs", s.max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-tokens-per-step", s.max_tokens_per_step, "token budget of one step")
      ->check(CLI::Range(1, 1 << 20));
  cmd.add_option("--group-wait-ms", f.group_wait_ms,
                 "how long the first requests of a declared group (group_size) wait for the rest "
                 "before starting with those present")
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

namespace {

Result<std::unique_ptr<Backend>> make_cuda_backend(const EngineFlags& f, int32_t min_vocab) {
#if KVCASCADE_HAVE_CUDA
  CudaBackendOptions o;
  o.num_blocks = f.kv_blocks;
  o.block_size = f.block_size;
  o.gpu_memory_utilization = f.gpu_memory_utilization;
  o.max_tokens_per_step = f.engine.scheduler.max_tokens_per_step;
  o.max_num_seqs = f.engine.scheduler.max_num_seqs;
  o.weights_seed = f.weights_seed;
  o.cuda_graphs = f.cuda_graphs;
  o.decode_gemm = f.decode_gemm;
  Result<std::unique_ptr<CudaBackend>> made = Error{""};
  if (!f.model_dir.empty()) {
    made = CudaBackend::load(f.model_dir, o);
  } else {
    auto config = preset_config(f.preset);
    if (!config.ok()) return Error{config.error().message};
    config->vocab_size = std::max(config->vocab_size, min_vocab);
    made = CudaBackend::create(*config, nullptr, o);
  }
  if (!made.ok()) return Error{made.error().message};
  const CudaBackendMemory& m = (*made)->memory();
  auto mib = [](size_t b) { return static_cast<double>(b) / (1 << 20); };
  std::fprintf(stderr,
               "cuda backend on %s: weights %.0f MiB, workspace %.0f MiB, KV cache %.0f MiB (%d "
               "blocks of %d tokens, bf16); %.0f of %.0f MiB were free\n",
               m.device.c_str(), mib(m.weight_bytes), mib(m.workspace_bytes), mib(m.kv_bytes),
               (*made)->num_blocks(), (*made)->block_size(), mib(m.device_free),
               mib(m.device_total));
  return std::unique_ptr<Backend>(std::move(made).value());
#else
  (void)f;
  (void)min_vocab;
  return Error{
      "--backend cuda: this binary was built without CUDA (configure with "
      "-DKVCASCADE_CUDA=ON on a machine with nvcc)"};
#endif
}

Result<std::unique_ptr<Backend>> make_cpu_backend(const EngineFlags& f, int32_t min_vocab);

Result<std::unique_ptr<Backend>> make_sim_backend(const EngineFlags& f, Clock& clock) {
  if (!f.model_dir.empty()) {
    return Error{"--backend sim takes its model shape from --sim-preset, not --model"};
  }
  Result<SimPreset> preset = sim_preset(f.sim_preset);
  if (!preset.ok()) return Error{preset.error().message};
  Hardware& hw = preset->hardware;
  if (f.sim_bandwidth_gbps > 0) hw.bandwidth_bytes_per_s = f.sim_bandwidth_gbps * 1e9;
  if (f.sim_peak_tflops > 0) hw.peak_flops = f.sim_peak_tflops * 1e12;
  if (f.sim_step_overhead_ms >= 0) hw.step_overhead_s = f.sim_step_overhead_ms * 1e-3;
  const int32_t blocks = f.kv_blocks > 0
                             ? f.kv_blocks
                             : sim_kv_blocks(*preset, f.gpu_memory_utilization, f.block_size);
  return std::unique_ptr<Backend>(
      std::make_unique<SimBackend>(std::move(preset).value(), blocks, f.block_size, clock));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const EngineFlags& f) {
  std::string dir = f.tokenizer_dir;
  if (dir.empty() && !f.model_dir.empty() &&
      std::filesystem::exists(f.model_dir + "/tokenizer.json")) {
    dir = f.model_dir;
  }
  if (dir.empty()) return std::unique_ptr<Tokenizer>(std::make_unique<ByteTokenizer>());
  auto t = HfTokenizer::load_dir(dir);
  if (!t.ok()) return Error{t.error().message};
  return std::unique_ptr<Tokenizer>(std::move(t).value());
}

Result<std::shared_ptr<const ChatTemplate>> make_chat_template(const Tokenizer& tokenizer) {
  const auto* hf = dynamic_cast<const HfTokenizer*>(&tokenizer);
  if (hf == nullptr || hf->chat().chat_template.empty())
    return std::shared_ptr<const ChatTemplate>();
  auto t =
      ChatTemplate::compile(hf->chat().chat_template, hf->chat().bos_token, hf->chat().eos_token);
  if (!t.ok()) return Error{"tokenizer_config.json: chat_template: " + t.error().message};
  return std::shared_ptr<const ChatTemplate>(std::make_shared<ChatTemplate>(std::move(*t)));
}

Result<std::unique_ptr<Backend>> make_backend(const EngineFlags& f, const Tokenizer& tokenizer,
                                              Clock& clock) {
  Result<std::unique_ptr<Backend>> made =
      f.backend == "cuda"  ? make_cuda_backend(f, tokenizer.vocab_size())
      : f.backend == "sim" ? make_sim_backend(f, clock)
                           : make_cpu_backend(f, tokenizer.vocab_size());
  if (made.ok() && (*made)->config().vocab_size < tokenizer.vocab_size()) {
    return Error{"the model's vocabulary (" + std::to_string((*made)->config().vocab_size) +
                 ") is smaller than its tokenizer's (" + std::to_string(tokenizer.vocab_size()) +
                 "): wrong --tokenizer?"};
  }
  return made;
}

namespace {

Result<std::unique_ptr<Backend>> make_cpu_backend(const EngineFlags& f, int32_t min_vocab) {
  ModelWeights weights;
  if (!f.model_dir.empty()) {
    auto loaded = load_hf_weights(f.model_dir);
    if (!loaded.ok()) return Error{loaded.error().message};
    weights = std::move(loaded).value();
  } else {
    auto config = preset_config(f.preset);
    if (!config.ok()) return Error{config.error().message};
    if (f.preset != "tiny") {
      return Error{
          "the CPU backend runs only the tiny preset (llama3-8b is for the GPU: "
          "--backend cuda)"};
    }
    config->vocab_size = std::max(config->vocab_size, min_vocab);
    weights = random_weights(*config, f.weights_seed);
  }
  return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(
      std::move(weights), f.kv_blocks > 0 ? f.kv_blocks : 4096, f.block_size));
}

}  // namespace

EngineConfig engine_config(const EngineFlags& f, const Backend& backend) {
  EngineConfig c = f.engine;
  c.cascade.enabled = f.attention == "cascade";
  c.scheduler.group_wait = std::chrono::milliseconds(f.group_wait_ms);
  c.scheduler.max_model_len = backend.config().max_position_embeddings;
  // A member's partial (O in fp32 + LSE) is written, read back and merged: per layer.
  const ModelConfig& m = backend.config();
  c.cascade.merge_bytes_per_member =
      int64_t{3} * m.num_hidden_layers * m.num_attention_heads * (m.head_dim + 1) * 4;
  return c;
}

}  // namespace kvc::cli
