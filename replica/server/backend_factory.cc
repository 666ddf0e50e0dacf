#include "replica/server/backend_factory.h"

#include <algorithm>
#include <filesystem>
#include <string>

#include "replica/backend/cpu/cpu_backend.h"
#include "replica/backend/cpu/tensor_parallel_backend.h"
#include "replica/backend/sim/sim_backend.h"
#include "replica/model/tensor_parallel.h"
#include "replica/model/weights.h"
#include "replica/tokenizer/hf_tokenizer.h"

namespace kvc {
namespace {

// --kv-host-memory-gb over the CPU's float32 blocks of the whole model.
int32_t cpu_host_blocks(const BackendOptions& o, const ModelConfig& config) {
  if (!o.kv_host_memory_gb) return 0;
  return host_tier_blocks(
      *o.kv_host_memory_gb,
      static_cast<double>(config.kv_bytes_per_token(sizeof(float))) * o.block_size);
}

// A checkpoint split over ranks: each rank reads only its slices.
Result<std::unique_ptr<Backend>> make_cpu_tensor_parallel_backend(const BackendOptions& o) {
  Result<HfFolder> f = HfFolder::open(o.model_dir);
  if (!f.ok()) return Error{f.error().message};
  std::vector<RankWeights> ranks;
  for (int32_t r = 0; r < o.tensor_parallel_size; ++r) {
    Result<RankWeights> w = read_rank_weights(*f, r, o.tensor_parallel_size);
    if (!w.ok()) return Error{w.error().message};
    ranks.push_back(std::move(w).value());
  }
  const bool fp8 = o.fp8_weights_for(f->config().checkpoint_quantization);
  auto backend = std::make_unique<CpuTensorParallelBackend>(f->config(), std::move(ranks),
                                                            o.kv_blocks > 0 ? o.kv_blocks : 4096,
                                                            o.block_size, fp8, o.fp8_kv());
  backend->set_host_blocks(cpu_host_blocks(o, f->config()));
  return std::unique_ptr<Backend>(std::move(backend));
}

Result<std::unique_ptr<Backend>> make_cpu_backend(const BackendOptions& o, int32_t min_vocab) {
  if (o.tensor_parallel_size > 1 && !o.model_dir.empty()) {
    return make_cpu_tensor_parallel_backend(o);
  }
  ModelWeights weights;
  if (!o.model_dir.empty()) {
    auto loaded = load_hf_weights(o.model_dir);
    if (!loaded.ok()) return Error{loaded.error().message};
    weights = std::move(loaded).value();
  } else {
    auto config = preset_config(o.preset_or_default());
    if (!config.ok()) return Error{config.error().message};
    if (o.preset_or_default() != "tiny") {
      return Error{
          "the CPU backend runs only the tiny preset (llama3-8b is for the GPU: "
          "--backend cuda)"};
    }
    config->vocab_size = std::max(config->vocab_size, min_vocab);
    weights = random_weights(*config, o.seed_or_default());
  }
  const bool fp8 = o.fp8_weights_for(weights.config.checkpoint_quantization);
  const int32_t blocks = o.kv_blocks > 0 ? o.kv_blocks : 4096;
  if (o.tensor_parallel_size > 1) {
    if (Status s = check_tensor_parallel(weights.config, o.tensor_parallel_size); !s.ok()) {
      return Error{s.message()};
    }
    auto backend = std::make_unique<CpuTensorParallelBackend>(
        weights, o.tensor_parallel_size, blocks, o.block_size, fp8, o.fp8_kv());
    backend->set_host_blocks(cpu_host_blocks(o, weights.config));
    return std::unique_ptr<Backend>(std::move(backend));
  }
  const int32_t host = cpu_host_blocks(o, weights.config);
  auto backend =
      std::make_unique<CpuBackend>(std::move(weights), blocks, o.block_size, fp8, o.fp8_kv());
  backend->set_host_blocks(host);
  return std::unique_ptr<Backend>(std::move(backend));
}

Result<std::unique_ptr<Backend>> make_sim_backend(const BackendOptions& o, Clock& clock) {
  Result<SimPreset> preset = sim_preset(o.sim_preset.value_or("h200-llama3-8b"));
  if (!preset.ok()) return Error{preset.error().message};
  Hardware& hw = preset->hardware;
  if (o.sim_bandwidth_gbps) hw.bandwidth_bytes_per_s = *o.sim_bandwidth_gbps * 1e9;
  if (o.sim_peak_tflops) hw.peak_flops = *o.sim_peak_tflops * 1e12;
  if (o.sim_step_overhead_ms) hw.step_overhead_s = *o.sim_step_overhead_ms * 1e-3;
  if (o.fp8_kv()) hw.kv_bytes_per_element = 1;  // the pool holds twice the blocks
  const int32_t blocks =
      o.kv_blocks > 0 ? o.kv_blocks
                      : sim_kv_blocks(*preset, o.memory_utilization_or_default(), o.block_size);
  const int32_t host =
      o.kv_host_memory_gb ? sim_host_blocks(*preset, *o.kv_host_memory_gb, o.block_size) : 0;
  return std::unique_ptr<Backend>(
      std::make_unique<SimBackend>(std::move(preset).value(), blocks, o.block_size, clock, host));
}

}  // namespace

Status check_backend_options(const BackendOptions& o) {
  const std::string& b = o.backend;
  if (b != "cpu" && b != "cuda" && b != "sim") {
    return Error{"--backend " + b + ": not a backend (cpu, cuda or sim)"};
  }
  if (!o.quantization.empty() && o.quantization != "fp8" && o.quantization != "none") {
    return Error{"--quantization " + o.quantization + ": not supported (fp8 or none)"};
  }
  if (o.kv_cache_dtype != "auto" && o.kv_cache_dtype != "fp8") {
    return Error{"--kv-cache-dtype " + o.kv_cache_dtype + ": not supported (auto or fp8)"};
  }
  if (!is_tensor_parallel_size(o.tensor_parallel_size)) {
    return Error{"--tensor-parallel-size " + std::to_string(o.tensor_parallel_size) +
                 ": not 1, 2, 4 or 8"};
  }
  // Each entry: an option that only some backends read, whether it was given, and who reads it.
  struct Only {
    const char* flag;
    bool given;
    bool read;
    const char* readers;
  };
  const bool sim = b == "sim", cuda = b == "cuda";
  const Only only[] = {
      {"--preset", o.preset.has_value(), !sim, "cpu and cuda (sim: --sim-preset)"},
      {"--model", !o.model_dir.empty(), !sim, "cpu and cuda (sim: --sim-preset)"},
      {"--weights-seed", o.weights_seed.has_value(), !sim, "cpu and cuda"},
      {"--quantization", !o.quantization.empty(), !sim, "cpu and cuda"},
      {"--gpu-memory-utilization", o.gpu_memory_utilization.has_value(), cuda || sim,
       "cuda and sim"},
      {"--no-cuda-graphs", o.cuda_graphs.has_value(), cuda, "cuda"},
      {"--decode-gemm", o.decode_gemm, cuda, "cuda"},
      {"--no-gemm-tuning", o.gemm_tuning.has_value(), cuda, "cuda"},
      {"--tensor-parallel-size", o.tensor_parallel_size != 1, !sim, "cpu and cuda"},
      {"--sim-preset", o.sim_preset.has_value(), sim, "sim"},
      {"--sim-bandwidth-gbps", o.sim_bandwidth_gbps.has_value(), sim, "sim"},
      {"--sim-peak-tflops", o.sim_peak_tflops.has_value(), sim, "sim"},
      {"--sim-step-overhead-ms", o.sim_step_overhead_ms.has_value(), sim, "sim"},
  };
  for (const Only& x : only) {
    if (x.given && !x.read) {
      return Error{std::string(x.flag) + " is not read by --backend " + b + " (only by " +
                   x.readers + "): leave it out"};
    }
  }
  if (cuda && o.kv_host_memory_gb && o.tensor_parallel_size > 1) {
    return Error{"--kv-host-memory-gb: not with --tensor-parallel-size > 1 on cuda yet"};
  }
  return {};
}

Status check_backend_model(const BackendOptions& o) {
  if (Status s = check_backend_options(o); !s.ok()) return s;
  if (o.tensor_parallel_size == 1 || o.backend == "sim") return {};
  Result<ModelConfig> config = Error{""};
  if (!o.model_dir.empty()) {
    Result<HfFolder> f = HfFolder::open(o.model_dir);
    if (!f.ok()) return Error{f.error().message};
    config = f->config();
  } else {
    config = preset_config(o.preset_or_default());
  }
  if (!config.ok()) return Error{config.error().message};
  return check_tensor_parallel(*config, o.tensor_parallel_size);
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const BackendOptions& o) {
  std::string dir = o.tokenizer_dir;
  if (dir.empty() && !o.model_dir.empty() &&
      std::filesystem::exists(o.model_dir + "/tokenizer.json")) {
    dir = o.model_dir;
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

Result<std::unique_ptr<Backend>> make_backend(const BackendOptions& o, const Tokenizer& tokenizer,
                                              CudaBackendMaker cuda, Clock& clock) {
  if (Status s = check_backend_options(o); !s.ok()) return Error{s.message()};
  Result<std::unique_ptr<Backend>> made = Error{""};
  if (o.backend == "cuda") {
    if (cuda == nullptr) {
      return Error{
          "--backend cuda: this binary has no CUDA backend (run kvcascade-cuda, built where "
          "nvcc is found)"};
    }
    made = cuda(o, tokenizer.vocab_size());
  } else if (o.backend == "sim") {
    made = make_sim_backend(o, clock);
  } else {
    made = make_cpu_backend(o, tokenizer.vocab_size());
  }
  if (made.ok() && o.kv_host_memory_gb && (*made)->num_host_blocks() == 0) {
    return Error{"--kv-host-memory-gb: less than one KV block"};
  }
  if (made.ok() && (*made)->config().vocab_size < tokenizer.vocab_size()) {
    return Error{"the model's vocabulary (" + std::to_string((*made)->config().vocab_size) +
                 ") is smaller than its tokenizer's (" + std::to_string(tokenizer.vocab_size()) +
                 "): wrong --tokenizer?"};
  }
  return made;
}

std::string generation_config_note(const ModelConfig& m) {
  if (m.generation.unsupported.empty()) return {};
  std::string names;
  for (const std::string& u : m.generation.unsupported)
    names += (names.empty() ? "" : ", ") + u;
  return "generation_config.json sets " + names +
         ", which the sampler does not implement: not applied (requests get its temperature, "
         "top_p and top_k)";
}

EngineConfig fit_engine_config(EngineConfig c, const Backend& backend) {
  const ModelConfig& m = backend.config();
  c.scheduler.max_model_len = m.max_position_embeddings;
  c.cascade.merge_bytes_per_member =
      int64_t{3} * m.num_hidden_layers * m.num_attention_heads * (m.head_dim + 1) * 4;
  return c;
}

}  // namespace kvc
