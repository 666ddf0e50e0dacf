// The CUDA backend: the engine's model on one GPU through kernels/cuda/llama.h (bf16 weights and
// KV cache, cuBLASLt GEMMs, tensor-core prefill, flat or cascade decode executing the planner's
// plan, sampling on the device). The only part of replica/ that links kernels/cuda, through
// CUDA-free headers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "replica/backend/backend.h"
#include "replica/backend/backend_options.h"
#include "replica/model/tensor_parallel.h"
#include "replica/model/weights.h"

namespace kvc::kernels::cuda {
class LlamaModel;
class NcclComm;
}  // namespace kvc::kernels::cuda

namespace kvc {

struct CudaBackendOptions {
  int32_t num_blocks = 0;  // 0: as many as gpu_memory_utilization leaves room for
  int32_t block_size = 16;
  double gpu_memory_utilization = 0.9;  // share of the device's memory this process may use
  int32_t max_tokens_per_step = 512;    // the scheduler's budget: rows of one step
  int32_t max_num_seqs = 256;           // sequences of one step (tokens drawn)
  uint64_t weights_seed = 1234;         // for random_init
  bool cuda_graphs = true;   // decode steps replayed as CUDA graphs (kernels/cuda/llama.h)
  bool decode_gemm = false;  // the Hopper decode GEMM where it runs (kernels/cuda/decode_gemm.h)
  bool gemm_tuning = true;   // cuBLASLt's candidates timed per decode shape (gemm.h set_tuning)
  // --quantization fp8 (kernels/cuda/llama.h LlamaDims::fp8_weights); unset: FP8 exactly when
  // the checkpoint is (ModelConfig::checkpoint_quantization).
  std::optional<bool> fp8_weights;
  // --kv-cache-dtype fp8 (LlamaDims::fp8_kv): the KV cache as E4M3 codes, one byte per element.
  bool fp8_kv = false;
  // --kv-host-memory-gb: a host tier of that many GB (10^9 bytes) of pinned host memory, in
  // blocks of the cache's (replica/core/block_pool.h "Host tier"). 0: none.
  double host_memory_gb = 0;
};

// What start-up allocated (printed in the start-up log).
struct CudaBackendMemory {
  size_t weight_bytes = 0;
  size_t kv_bytes = 0;
  size_t host_kv_bytes = 0;  // the host tier, pinned host memory
  size_t workspace_bytes = 0;
  size_t device_free = 0;
  size_t device_total = 0;
  std::string device;
};

class CudaBackend final : public Backend {
 public:
  // Random-initialised weights on the device (deterministic for options.weights_seed), or the
  // given host weights converted to bf16. Errors: no device, not enough memory, unsupported
  // shape.
  static Result<std::unique_ptr<CudaBackend>> create(const ModelConfig& config,
                                                     const ModelWeights* weights,
                                                     const CudaBackendOptions& options);
  // Loads a Hugging Face folder (config.json + safetensors shards, BF16/F16/F32) straight to the
  // device, tensor by tensor in pieces: no float32 copy of the model on the host.
  static Result<std::unique_ptr<CudaBackend>> load(const std::string& folder,
                                                   const CudaBackendOptions& options);
  // Rank comm.rank() of a tensor-parallel group (CudaTensorParallelBackend): the model of
  // rank_config(whole, comm.size()) with the whole vocabulary (kernels/cuda/llama.h
  // LlamaDims::tp_size), on the calling thread's device (comm.bind_thread() first), its
  // collectives through comm; its weights uninitialised (upload_rank, or model().random_init).
  // With a group of one this is the whole model, through the same path.
  static Result<std::unique_ptr<CudaBackend>> create_rank(const ModelConfig& whole,
                                                          kernels::cuda::NcclComm& comm,
                                                          const CudaBackendOptions& options);
  // A rank's slices (shard_weights or read_rank_weights) onto its device.
  Status upload_rank(const RankWeights& weights);
  // Rank `rank` of `size`'s slices of a Hugging Face folder onto its device, tensor by tensor
  // (plan_rank): 16-bit tensors from the mapping (a row slice as it lies, a column slice
  // gathered into one host buffer of its size), others read as float32 slices; the LM head's
  // rows, zero past the vocabulary. On the host at most one tensor's slice at a time (F32 and
  // FP8 row slices in pieces of at most 16M values).
  Status upload_rank_folder(const HfFolder& folder, int32_t rank, int32_t size);
  ~CudaBackend() override;

  const ModelConfig& config() const override { return config_; }
  int32_t num_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t num_host_blocks() const override;
  std::string name() const override { return "cuda"; }
  std::string quantization() const override;
  std::string kv_cache_dtype() const override;
  int32_t kv_bytes_per_element() const override;
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;
  // The folder's tensors are streamed onto the device over the old ones, in pieces, as at
  // start-up (no second copy of the model): everything is checked before the first write.
  Status check_weights(const std::string& folder) const override;
  Status load_weights(const std::string& folder) override;
  bool weights_intact() const override { return weights_broken_.empty(); }

  const CudaBackendMemory& memory() const { return memory_; }
  // The FP8 KV cache's scales: a checkpoint's (KvCacheScales), or 1.0 where it has none.
  void set_kv_scales(const KvCacheScales& scales);
  // Where the last forward's time went (benchmarks): host work until the wait, the wait, and
  // the step on the device (CUDA events), in microseconds.
  struct StepTiming {
    double host_us = 0, prep_us = 0, wait_us = 0, device_us = 0;
    std::vector<std::pair<std::string, double>> profile;  // with set_profile: device us per op
    bool graph = false;                                   // ran as a CUDA graph replay
  };
  const StepTiming& last_timing() const { return timing_; }
  void set_profile(bool on);
  void set_graphs(bool on);
  kernels::cuda::LlamaModel& model() { return *model_; }

 private:
  CudaBackend(ModelConfig config, std::unique_ptr<kernels::cuda::LlamaModel> model,
              int32_t num_blocks, int32_t block_size, CudaBackendMemory memory);
  // tp_size > 1: config is a rank's (rank_config) and the LM head its vocabulary slice.
  static Result<std::unique_ptr<CudaBackend>> allocate(const ModelConfig& config,
                                                       const CudaBackendOptions& options,
                                                       int32_t tp_size = 1);
  // Host weights (their config's tensors, and KV-cache scales) onto the device.
  Status upload_weights(const ModelWeights& w);
  // Every tensor of the folder onto the device: upload_rank_folder(folder, 0, 1).
  Status upload_folder(const HfFolder& folder);

  ModelConfig config_;
  std::unique_ptr<kernels::cuda::LlamaModel> model_;
  int32_t num_blocks_;
  int32_t block_size_;
  CudaBackendMemory memory_;
  StepTiming timing_;
  std::string weights_broken_;  // why the weights are incomplete (a load failed while writing)
  // Scratch reused across steps.
  std::vector<int32_t> moves_, sample_rows_;
  std::vector<uint8_t> params_;  // kernels::sampling::SampleParams
};

// After a weight update wrote (or failed to write) over the device's weights: `broken` becomes
// why they are incomplete (forward refuses to run until a complete load), or empty.
Status note_weights_written(const Status& written, std::string& broken);

// The backend factory's CUDA maker (replica/server/backend_factory.h: CudaBackendMaker): the
// options' preset (vocabulary grown to min_vocab) or model folder on the device; prints what it
// allocated (weights, workspace, KV) to stderr.
Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options,
                                                   int32_t min_vocab);

}  // namespace kvc
