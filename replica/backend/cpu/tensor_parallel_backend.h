// The CPU backend split over N ranks (`replica --backend cpu --tensor-parallel-size N`): the
// sharding math of tensor parallelism (replica/model/tensor_parallel.h) run for real on the CPU,
// one thread per rank, the ranks summing their row-parallel projections and gathering their
// logits through an in-process group (replica/backend/communicator.h). It is the GPU's
// tensor parallelism's twin: one process, a thread per rank, the batch (block tables, cascade
// plan) built once by the engine and run by every rank in lockstep; each rank holds its heads'
// KV. Its logits equal the unsharded CPU model's up to float32 summation order
// (tests/replica/backend/cpu/tensor_parallel_test.cc). Not faster than the whole model: the
// ranks share the CPU kernels' one thread pool (kernels/cpu/parallel.h), which one rank holds
// at a time while the others run their kernels on their own thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "replica/backend/backend.h"
#include "replica/backend/communicator.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/backend/rank_threads.h"
#include "replica/model/weights.h"

namespace kvc {

class CpuTensorParallelBackend final : public Backend {
 public:
  // The ranks' weights, rank r at [r] (read_rank_weights from a checkpoint, or shard_weights),
  // of a model of config `whole`. Preconditions: check_tensor_parallel(whole, ranks.size()) is
  // ok; num_blocks > 0, block_size > 0. Each rank's KV cache holds num_blocks blocks of its
  // heads.
  CpuTensorParallelBackend(ModelConfig whole, std::vector<RankWeights> ranks, int32_t num_blocks,
                           int32_t block_size, bool fp8_weights = false, bool fp8_kv = false);
  // `weights` split over `size` ranks (shard_weights). Preconditions as above, and
  // check_weight_shapes(weights) is ok.
  CpuTensorParallelBackend(const ModelWeights& weights, int32_t size, int32_t num_blocks,
                           int32_t block_size, bool fp8_weights = false, bool fp8_kv = false);
  ~CpuTensorParallelBackend() override;  // stops the rank threads

  const ModelConfig& config() const override { return config_; }
  int32_t num_blocks() const override { return ranks_[0]->num_blocks(); }
  int32_t block_size() const override { return ranks_[0]->block_size(); }
  int32_t num_host_blocks() const override { return ranks_[0]->num_host_blocks(); }
  // Each rank's host tier holds `n` blocks of its heads (CpuBackend::set_host_blocks).
  void set_host_blocks(int32_t n) {
    for (auto& r : ranks_)
      r->set_host_blocks(n);
  }
  std::string name() const override { return "cpu"; }
  std::string quantization() const override { return ranks_[0]->quantization(); }
  std::string kv_cache_dtype() const override { return ranks_[0]->kv_cache_dtype(); }
  int32_t kv_bytes_per_element() const override { return ranks_[0]->kv_bytes_per_element(); }
  int32_t tensor_parallel_size() const { return static_cast<int32_t>(ranks_.size()); }
  const CpuBackend& rank(int32_t r) const { return *ranks_[static_cast<size_t>(r)]; }

  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;
  // Every rank's logits are the whole rows: these are rank 0's.
  Status compute_logits(const ForwardBatch& batch, std::vector<float>& logits);
  Status check_weights(const std::string& folder) const override;
  // Checked, then each rank's slices read (read_rank_weights), then swapped in on every rank;
  // an error leaves the old weights.
  Status load_weights(const std::string& folder) override;

 private:
  ModelConfig config_;  // the whole model's
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<CpuBackend>> ranks_;
  std::vector<std::vector<float>> logits_;  // per rank (rank 0's are returned)
  std::vector<float> host_logits_;
  RankThreads threads_;  // rank 0 on the engine's thread, ranks 1.. on their own; last member:
                         // stopped before the ranks they run are destroyed
};

}  // namespace kvc
