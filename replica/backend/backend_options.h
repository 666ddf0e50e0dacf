// Which backend a replica runs, on which model, and with what: plain data, filled by the
// commands' flags (cli/engine_flags.h) and read by the backend factory
// (replica/server/backend_factory.h) and the CUDA backend's maker. Options that only one backend
// reads are optional: set for a backend that does not read them, they are refused, not ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace kvc {

struct BackendOptions {
  std::string backend = "cpu";  // cpu, cuda or sim
  // The model: a random-initialised preset (cpu, cuda; "tiny" when neither is set) or a Hugging
  // Face folder. The sim backend takes both from sim_preset instead.
  std::optional<std::string> preset;
  std::string model_dir;
  // A Hugging Face tokenizer folder; empty: model_dir's tokenizer.json if any, else bytes.
  std::string tokenizer_dir;
  std::optional<uint64_t> weights_seed;  // random weights (default 1234)
  // cpu and cuda: "fp8": the layer matrices in FP8 E4M3 with per-output-channel scales,
  // quantized at load, and FP8 activations with per-token scales; "none": the weights as bf16
  // (float32 on the CPU), an FP8 checkpoint dequantized; "" (the default): FP8 exactly when the
  // checkpoint is FP8.
  std::string quantization;
  bool fp8_weights_for(const std::string& checkpoint_quantization) const {
    return quantization == "fp8" || (quantization.empty() && !checkpoint_quantization.empty());
  }
  // The KV cache's element type: "auto" (the backend's own: float32 on the CPU, bf16 on the GPU
  // and in the sim) or "fp8" (E4M3 with per-layer K and V scales, kernels/fp8_rule.h; the CPU
  // keeps the E4M3 values in float32, the sim counts one byte per element).
  std::string kv_cache_dtype = "auto";
  bool fp8_kv() const { return kv_cache_dtype == "fp8"; }
  // Ranks the model is split over (replica/model/tensor_parallel.h): 1, 2, 4 or 8. cpu: one
  // thread per rank in this process (the GPU's tensor parallelism's twin); cuda: 1 only so far.
  int32_t tensor_parallel_size = 1;
  int32_t kv_blocks = 0;  // 0: 4096 on the CPU; on the GPU or sim, as many as memory allows
  // GB (10^9 bytes) of host memory for KV evicted from the pool, loaded back instead of computed
  // when a prompt asks for it again (replica/core/block_pool.h, "Host tier"); cuda: pinned, not
  // with tensor parallelism yet.
  std::optional<double> kv_host_memory_gb;
  int32_t block_size = 16;
  // The scheduler's limits (SchedulerConfig): the CUDA backend sizes its workspace by them.
  int32_t max_tokens_per_step = 512;
  int32_t max_num_seqs = 256;
  // cuda and sim: the share of the GPU's memory for weights, workspace and KV (default 0.9).
  std::optional<double> gpu_memory_utilization;
  // cuda only.
  std::optional<bool> cuda_graphs;  // default on
  bool decode_gemm = false;
  std::optional<bool> gemm_tuning;  // default on: kernels/cuda/gemm.h Gemm::set_tuning
  // sim only: the model and device, each figure overridable.
  std::optional<std::string> sim_preset;  // default h200-llama3-8b
  std::optional<double> sim_bandwidth_gbps;
  std::optional<double> sim_peak_tflops;
  std::optional<double> sim_step_overhead_ms;

  std::string preset_or_default() const { return preset.value_or("tiny"); }
  uint64_t seed_or_default() const { return weights_seed.value_or(1234); }
  double memory_utilization_or_default() const { return gpu_memory_utilization.value_or(0.9); }
};

}  // namespace kvc
