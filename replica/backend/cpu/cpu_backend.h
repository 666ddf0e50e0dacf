// The CPU backend: the model in float32 on kernels/cpu over a paged KV cache in host memory. It is
// the reference the CUDA backend is compared with and the backend of the CPU demo. With FP8
// weights (--quantization fp8) it is the CUDA FP8 model's twin: the layer matrices and each GEMM's
// input rows take their E4M3 values (kernels/cpu/fp8.h: per output channel, per token), and the
// GEMMs run in float32 on those values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention_shape.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/ops.h"
#include "replica/backend/backend.h"
#include "replica/backend/communicator.h"
#include "replica/model/tensor_parallel.h"
#include "replica/model/weights.h"

namespace kvc {

// One rank of a tensor-parallel CPU model (replica/model/tensor_parallel.h): its communicator
// and its rows of the LM head. The rank's weights (heads, KV heads, intermediate columns) are
// the ModelWeights the backend is made with.
struct CpuRank {
  Communicator* comm = nullptr;  // of the group; outlives the backend
  std::vector<float> lm_head_rows;
  VocabSlice vocab;
};

class CpuBackend final : public Backend {
 public:
  // Allocates the KV cache: 2 * layers * num_blocks * block_size * kv_heads * head_dim floats
  // (kv_cache_bytes). Preconditions: check_weight_shapes(weights) is ok; num_blocks > 0,
  // block_size > 0.
  // fp8_kv: the cache keeps every key and value as its E4M3 value under the layer's K or V scale
  // (kernels/fp8_rule.h; the checkpoint's, weights.kv_scales, else 1.0), still in float32: the
  // CUDA FP8 KV cache's twin.
  CpuBackend(ModelWeights weights, int32_t num_blocks, int32_t block_size, bool fp8_weights = false,
             bool fp8_kv = false);
  // One rank of a tensor-parallel model (CpuTensorParallelBackend runs the group): weights and
  // LM head rows from shard_weights. It sums its o and down projections with the other ranks'
  // (an all-reduce) and gathers the logits; compute_logits returns every rank the whole rows.
  // FP8 weights take per-output-channel scales of the rank's slice (as vLLM's shards do), so
  // they are not the unsharded FP8 model's.
  CpuBackend(RankWeights weights, Communicator& comm, int32_t num_blocks, int32_t block_size,
             bool fp8_weights = false, bool fp8_kv = false);

  static int64_t kv_cache_bytes(const ModelConfig& config, int32_t num_blocks, int32_t block_size) {
    return config.kv_bytes_per_token(sizeof(float)) * num_blocks * block_size;
  }

  const ModelConfig& config() const override { return weights_.config; }
  int32_t num_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t num_host_blocks() const override { return num_host_blocks_; }
  // Allocates a host tier of `n` blocks (BlockPool's; this process's memory like the cache, but
  // a separate array, so that a transfer is the copy a GPU replica's would be). Before the first
  // forward.
  void set_host_blocks(int32_t n);
  std::string name() const override { return "cpu"; }
  std::string quantization() const override { return fp8_weights_ ? "fp8" : ""; }
  std::string kv_cache_dtype() const override { return fp8_kv_ ? "fp8" : ""; }
  // The FP8 KV cache's scales of one layer.
  float k_scale(int layer) const { return k_scales_[layer]; }
  float v_scale(int layer) const { return v_scales_[layer]; }
  int32_t kv_bytes_per_element() const override { return sizeof(float); }

  // Not thread-safe: one forward at a time (the kernels inside are threaded).
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;
  // The folder is read whole into float32 first and swapped in only then: any error leaves the
  // old weights.
  Status check_weights(const std::string& folder) const override;
  Status load_weights(const std::string& folder) override;
  // The model alone: logits resized to [batch.num_logit_rows(), vocab_size], float32.
  Status compute_logits(const ForwardBatch& batch, std::vector<float>& logits);
  // A rank's new weights (a weight update of the group: shard_weights of the new model). The
  // KV cache is kept (the caller flushes it).
  void set_rank_weights(RankWeights weights);

 private:
  // The step's KV moves, in order (ForwardBatch::kv_moves). A move out of range (a block past
  // the cache, a slot past the host tier, a kind of none of the three) refuses them all before
  // any is done, with an error as the CUDA backend's ("move_blocks: invalid argument ...").
  Status move_blocks(const ForwardBatch& batch);
  // Fills tokens_, positions_, kv_dst_ (cache row of each token) and logit_rows_.
  void gather_rows(const ForwardBatch& batch);
  void attention(int layer, const ForwardBatch& batch);
  void mlp(const LayerWeights& l, int rows);
  // What newly set weights_ imply: the KV-cache scales (the checkpoint's, else 1.0) and, with
  // FP8 weights, the layer matrices replaced by their E4M3 values (per output channel).
  void adopt_weights();
  // With FP8 weights: rows [rows, dim] of a GEMM's input replaced by their E4M3 values.
  void quantize_input(std::vector<float>& x, int rows, int dim) const;
  // A rank's partial sums of a row-parallel projection ([n] floats) summed over the group.
  void all_reduce(std::vector<float>& partial, int64_t n);
  // The LM head over xn_'s first `rows` rows into logits [rows, vocab]: the whole matrix, or a
  // rank's rows gathered from every rank.
  void lm_head(int rows, std::vector<float>& logits);

  float* k_cache(int layer) { return k_cache_[layer].data(); }
  float* v_cache(int layer) { return v_cache_[layer].data(); }
  // Floats per cache row (one token of one layer): kv_heads * head_dim.
  int64_t kv_row() const { return int64_t{shape_.num_kv_heads} * shape_.head_dim; }

  ModelWeights weights_;
  CpuRank rank_;  // comm null: the whole model
  bool fp8_weights_ = false;
  bool fp8_kv_ = false;
  std::vector<float> k_scales_, v_scales_;  // per layer (fp8_kv)
  int32_t num_blocks_;
  int32_t block_size_;
  kernels::AttentionShape shape_;
  kernels::cpu::RopeConfig rope_;
  // Per layer, [num_blocks, block_size, kv_heads, head_dim].
  std::vector<std::vector<float>> k_cache_, v_cache_;
  // The host tier: per layer, [num_host_blocks, block_size, kv_heads, head_dim].
  int32_t num_host_blocks_ = 0;
  std::vector<std::vector<float>> host_k_, host_v_;

  // Scratch reused across calls (vectors only grow). Rows: prefill tokens, then decode tokens.
  std::vector<int32_t> tokens_, positions_;
  std::vector<int64_t> kv_dst_;      // cache row (block * block_size + slot) of each row's KV
  std::vector<int32_t> logit_rows_;  // rows whose logits are returned, in output order
  std::vector<float> x_;             // residual stream [rows, h]
  std::vector<float> xn_;            // normalised [rows, h]
  std::vector<float> q_, k_, v_;     // [rows, q_heads * d], [rows, kv_heads * d] x 2
  std::vector<float> attn_;          // [rows, q_heads * d]
  std::vector<float> proj_;          // [rows, h], o_proj / down_proj output
  std::vector<float> gate_up_;       // [rows, 2 * ff]
  std::vector<float> act_;           // [rows, ff]
  kernels::cpu::CascadeWorkspace cascade_ws_;
  std::vector<float> logits_;
  std::vector<float> rank_logits_, gathered_;  // a rank's LM head rows, and every rank's
};

}  // namespace kvc
