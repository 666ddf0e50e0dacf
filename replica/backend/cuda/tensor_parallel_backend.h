// The CUDA backend split over the GPUs of one host (`replica --backend cuda
// --tensor-parallel-size N`; docs/architecture.md "Tensor parallelism"): one process, a thread
// per GPU (RankThreads: rank r's thread keeps device r current for its whole life), each rank a
// CudaBackend of its slice of the model (rank_config, the LM head's vocabulary slice) whose o and
// down outputs are all-reduced and whose logits are all-gathered through NCCL
// (kernels/cuda/nccl_group.h). The engine, its block tables and cascade plan are unchanged:
// every rank runs the same ForwardBatch in lockstep, samples the same gathered logits with the
// same parameters, and rank 0's tokens are returned. Each rank holds its KV heads' blocks, as
// many blocks as the rank with the least room holds (num_blocks). Decode steps replay per-rank
// CUDA graphs, collectives included, which the ranks capture and replay together
// (kernels/cuda/llama.h set_tensor_parallel). A step that fails on a rank aborts the NCCL group
// (the others would wait for it in a collective) and the replica refuses further steps. The twin of
// CpuTensorParallelBackend.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "replica/backend/backend.h"
#include "replica/backend/cuda/cuda_backend.h"
#include "replica/backend/rank_threads.h"
#include "replica/model/weights.h"

namespace kvc {

class CudaTensorParallelBackend final : public Backend {
 public:
  // `size` ranks on devices 0..size-1: each rank's slices of `weights` (shard_weights), or with
  // null a random model per rank (options.weights_seed + rank). Errors: the split does not
  // divide the model, fewer GPUs than ranks, NCCL missing or failing, a rank's allocation.
  static Result<std::unique_ptr<CudaTensorParallelBackend>> create(
      const ModelConfig& whole, const ModelWeights* weights, int32_t size,
      const CudaBackendOptions& options);
  // A Hugging Face folder: each rank streams only its slices onto its device, tensor by tensor
  // and all ranks at once (CudaBackend::upload_rank_folder: a 16-bit checkpoint's slices go from
  // the mapping, at most one tensor's slice a rank on the host).
  static Result<std::unique_ptr<CudaTensorParallelBackend>> load(const std::string& folder,
                                                                 int32_t size,
                                                                 const CudaBackendOptions& options);
  ~CudaTensorParallelBackend() override;  // each rank is destroyed on its thread

  const ModelConfig& config() const override { return config_; }
  int32_t num_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return ranks_[0]->block_size(); }
  std::string name() const override { return "cuda"; }
  std::string quantization() const override { return ranks_[0]->quantization(); }
  std::string kv_cache_dtype() const override { return ranks_[0]->kv_cache_dtype(); }
  int32_t kv_bytes_per_element() const override { return ranks_[0]->kv_bytes_per_element(); }
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;
  Status check_weights(const std::string& folder) const override;
  // Checked, then every rank's slices read and uploaded over its old ones (all ranks at once);
  // a failure while writing leaves the weights broken until a complete load.
  Status load_weights(const std::string& folder) override;
  bool weights_intact() const override { return weights_broken_.empty(); }

  int32_t tensor_parallel_size() const { return threads_->size(); }
  CudaBackend& rank(int32_t r) { return *ranks_[static_cast<size_t>(r)]; }
  // On every rank (benchmarks).
  void set_graphs(bool on);
  void set_profile(bool on);
  // Seconds the group's all-reduce of `bytes` of bf16 per rank takes on rank 0, the median of
  // `iters` runs after a warm-up (benchmarks, between steps). NCCL's bus bandwidth of the group
  // is bytes / seconds x 2 (N - 1) / N. A rank that fails aborts the group.
  Result<double> all_reduce_seconds(size_t bytes, int iters);

 private:
  CudaTensorParallelBackend(ModelConfig whole, int32_t size);
  // The group and every rank's model, their weights uninitialised.
  static Result<std::unique_ptr<CudaTensorParallelBackend>> make(const ModelConfig& whole,
                                                                 int32_t size,
                                                                 const CudaBackendOptions& options);
  // Every rank's slices of a folder onto its device (upload_rank_folder), the ranks at once.
  Status upload_folder(const HfFolder& folder);
  // A rank failed inside `threads_->run` (its on_failure hook): ends the group's votes, then aborts
  // every communicator from a thread of its own (NcclComm::abort returns only once the graphs that
  // captured the group's collectives are gone), so that ranks blocked in a collective or a vote
  // return. Once per group; any rank thread may call it.
  void abort_group();
  // After the run that aborted: every rank drops its CUDA graphs on its thread (which lets the
  // aborts finish), then the abort threads are joined; `why` becomes group_failed_.
  Status finish_abort(const std::string& why);

  ModelConfig config_;  // the whole model's
  int32_t num_blocks_ = 0;
  std::string weights_broken_;
  std::string group_failed_;  // a step failed on a rank and the group was aborted
  std::vector<std::unique_ptr<kernels::cuda::NcclComm>> comms_;
  std::vector<std::unique_ptr<CudaBackend>> ranks_;
  std::vector<ForwardOutput> outputs_;  // per rank (rank 0's are returned)
  std::mutex abort_mu_;
  std::vector<std::thread> aborting_;  // abort_group's, joined by finish_abort
  bool aborted_ = false;
  std::unique_ptr<RankThreads> threads_;
};

}  // namespace kvc
