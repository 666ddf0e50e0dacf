// Tensor parallelism's sharding math: how one model splits over N ranks (GPUs of one host, or
// the CPU backend's simulated ranks), as Megatron-LM splits a transformer layer.
//   - Column-parallel: q, k and v (each rank its query heads and their KV heads, so each rank
//     holds its heads' KV blocks), gate and up (each rank ff / N of the intermediate columns).
//   - Row-parallel: o and down take the rank's slice of their input; each rank's product is a
//     partial sum of the full one, summed over the ranks (an all-reduce) before the residual add.
//   - Vocab-parallel LM head: each rank computes the logits of its ceil(vocab / N) rows (the
//     trailing ranks' padded with zero rows past the vocabulary); an all-gather assembles the
//     row.
//   - Replicated: the embedding, every RMSNorm weight (Qwen3's per-head q/k norms are one [d]
//     vector shared by the heads), the KV-cache scales.
// Block tables, the cascade plan and sampling are the same on every rank: the host builds them
// once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "base/status.h"
#include "replica/model/model_config.h"
#include "replica/model/weights.h"

namespace kvc {

// The sizes a replica may split over (one host's GPUs).
bool is_tensor_parallel_size(int32_t size);

// Whether `config` splits over `size` ranks: size is 1, 2, 4 or 8 and divides the query heads,
// the KV heads and the intermediate size. The error names the flag and the field that does not
// divide ("--tensor-parallel-size 4 does not divide num_key_value_heads 2").
Status check_tensor_parallel(const ModelConfig& config, int32_t size);

// One rank's model: its heads, KV heads and intermediate columns (config / size), everything else
// as the full model's. Precondition: check_tensor_parallel(config, size) is ok.
ModelConfig rank_config(const ModelConfig& config, int32_t size);

// A rank's rows of the LM head: [begin, begin + rows) of the vocabulary, padded to `padded`
// (ceil(vocab / size)) rows so that every rank's part of an all-gather has one size.
struct VocabSlice {
  int32_t begin = 0;
  int32_t rows = 0;
  int32_t padded = 0;
};
VocabSlice vocab_slice(int32_t vocab_size, int32_t rank, int32_t size);

struct RankWeights {
  // config = rank_config, with tie_word_embeddings set (lm_head empty: embed is the input
  // embedding only; the rank's LM head is lm_head_rows). embed and the norms whole.
  ModelWeights weights;
  std::vector<float> lm_head_rows;  // [vocab.padded, h]: its rows of the output projection
  VocabSlice vocab;
};

// Where each tensor of rank `rank`'s model comes from in the whole model's (`whole`, config `c`):
// `part` is the rank model's spec (rank_config with tie_word_embeddings set: the input
// embedding only), `full` the whole one's, `slice` the part of it along the one dimension whose
// size the split changed (rows of a column-parallel matrix or bias, columns of a row-parallel
// one; nullopt: all of it). Then the rank's LM-head rows: `vocab` of `head` (the whole model's
// LM head, or its embedding when tied), padded. Errors: check_tensor_parallel.
struct RankTensor {
  TensorSpec part, full;
  std::optional<TensorSlice> slice;
};
struct RankPlan {
  ModelConfig config;  // rank_config, tie_word_embeddings set
  std::vector<RankTensor> tensors;
  TensorSpec head;
  VocabSlice vocab;
};
Result<RankPlan> plan_rank(const ModelConfig& c, const std::vector<TensorSpec>& whole, int32_t rank,
                           int32_t size);

// `slice` of a row-major tensor of `shape` (at most two dimensions) whose elements are
// `elem_bytes` wide, from `src` into `out` (slice->count x shape[1] elements for rows,
// shape[0] x slice->count for columns; all of it without a slice).
void copy_slice_bytes(const std::byte* src, size_t elem_bytes, const std::vector<int64_t>& shape,
                      const std::optional<TensorSlice>& slice, std::byte* out);

// Rank `rank`'s slices of `full` (the layouts of weights.h: Linear [out, in], row-major).
// Preconditions: check_tensor_parallel(full.config, size) is ok; 0 <= rank < size;
// check_weight_shapes(full) is ok.
RankWeights shard_weights(const ModelWeights& full, int32_t rank, int32_t size);

// The same slices read from a checkpoint, touching only the rank's part of each split tensor
// (each rank reads its slices of the mapped files, not the whole model). Errors: the split does
// not divide the model (check_tensor_parallel), or a tensor cannot be read. Precondition:
// 0 <= rank < size.
Result<RankWeights> read_rank_weights(const HfFolder& folder, int32_t rank, int32_t size);

}  // namespace kvc
