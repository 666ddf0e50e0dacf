#include "replica/backend/cpu/tensor_parallel_backend.h"

#include <cassert>
#include <string>

#include "replica/model/tensor_parallel.h"

namespace kvc {

namespace {

std::vector<RankWeights> shard_all(const ModelWeights& weights, int32_t size) {
  std::vector<RankWeights> ranks;
  for (int32_t r = 0; r < size; ++r)
    ranks.push_back(shard_weights(weights, r, size));
  return ranks;
}

}  // namespace

CpuTensorParallelBackend::CpuTensorParallelBackend(const ModelWeights& weights, int32_t size,
                                                   int32_t num_blocks, int32_t block_size,
                                                   bool fp8_weights, bool fp8_kv)
    : CpuTensorParallelBackend(weights.config, shard_all(weights, size), num_blocks, block_size,
                               fp8_weights, fp8_kv) {}

CpuTensorParallelBackend::CpuTensorParallelBackend(ModelConfig whole,
                                                   std::vector<RankWeights> ranks,
                                                   int32_t num_blocks, int32_t block_size,
                                                   bool fp8_weights, bool fp8_kv)
    : config_(std::move(whole)),
      comms_(make_local_group(static_cast<int32_t>(ranks.size()))),
      threads_(static_cast<int32_t>(ranks.size()), /*caller_runs_first=*/true) {
  const auto size = static_cast<int32_t>(ranks.size());
  assert(check_tensor_parallel(config_, size).ok());
  for (int32_t r = 0; r < size; ++r) {
    ranks_.push_back(std::make_unique<CpuBackend>(std::move(ranks[static_cast<size_t>(r)]),
                                                  *comms_[static_cast<size_t>(r)], num_blocks,
                                                  block_size, fp8_weights, fp8_kv));
  }
  logits_.resize(static_cast<size_t>(size));
}

CpuTensorParallelBackend::~CpuTensorParallelBackend() = default;

Status CpuTensorParallelBackend::compute_logits(const ForwardBatch& batch,
                                                std::vector<float>& logits) {
  // Every rank runs the same batch and the same collectives, so none returns early alone:
  // compute_logits fails only on what it checks before its first collective, alike everywhere.
  if (Status s = threads_.run([&](int32_t r) {
        return ranks_[static_cast<size_t>(r)]->compute_logits(batch,
                                                              logits_[static_cast<size_t>(r)]);
      });
      !s.ok()) {
    return s;
  }
  logits.swap(logits_[0]);
  return Status::Ok();
}

Status CpuTensorParallelBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  if (Status s = compute_logits(batch, host_logits_); !s.ok()) return s;
  sample_on_host(batch, host_logits_, config_.vocab_size, out.samples);
  if (batch.return_logits) {
    out.logits = host_logits_;
  } else {
    out.logits.clear();
  }
  return Status::Ok();
}

Status CpuTensorParallelBackend::check_weights(const std::string& folder) const {
  return check_replacement(folder, config_);
}

Status CpuTensorParallelBackend::load_weights(const std::string& folder) {
  Result<HfFolder> f = open_replacement(folder, config_);
  if (!f.ok()) return Error{f.error().message};
  const auto size = static_cast<int32_t>(ranks_.size());
  std::vector<RankWeights> read;
  for (int32_t r = 0; r < size; ++r) {
    Result<RankWeights> w = read_rank_weights(*f, r, size);
    if (!w.ok()) return Error{w.error().message};
    // The running model's name, context and defaults, at the rank's shapes (read_rank_weights'
    // rank config: its LM head apart, so tied).
    w->weights.config = rank_config(config_, size);
    w->weights.config.tie_word_embeddings = true;
    read.push_back(std::move(w).value());
  }
  for (int32_t r = 0; r < size; ++r)
    ranks_[static_cast<size_t>(r)]->set_rank_weights(std::move(read[static_cast<size_t>(r)]));
  return Status::Ok();
}

}  // namespace kvc
