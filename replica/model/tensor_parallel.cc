#include "replica/model/tensor_parallel.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <optional>
#include <string>

namespace kvc {
namespace {

// Rows [begin, begin + count) of a row-major [rows, cols] matrix.
std::vector<float> rows_of(const std::vector<float>& m, int64_t cols, int64_t begin,
                           int64_t count) {
  assert(static_cast<int64_t>(m.size()) >= (begin + count) * cols);
  return {m.begin() + begin * cols, m.begin() + (begin + count) * cols};
}

// Columns [begin, begin + count) of a row-major [rows, cols] matrix.
std::vector<float> cols_of(const std::vector<float>& m, int64_t cols, int64_t begin,
                           int64_t count) {
  const int64_t rows = static_cast<int64_t>(m.size()) / cols;
  std::vector<float> out;
  out.reserve(static_cast<size_t>(rows * count));
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = m.begin() + r * cols + begin;
    out.insert(out.end(), row, row + count);
  }
  return out;
}

// A slice of a vector that may be empty (a family option the model does not have).
std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t count) {
  return v.empty() ? v : rows_of(v, 1, begin, count);
}

}  // namespace

bool is_tensor_parallel_size(int32_t size) {
  return size == 1 || size == 2 || size == 4 || size == 8;
}

Status check_tensor_parallel(const ModelConfig& c, int32_t size) {
  const std::string flag = "--tensor-parallel-size " + std::to_string(size);
  if (!is_tensor_parallel_size(size)) return Error{flag + ": not 1, 2, 4 or 8"};
  const struct {
    const char* field;
    int value;
  } splits[] = {{"num_attention_heads", c.num_attention_heads},
                {"num_key_value_heads", c.num_key_value_heads},
                {"intermediate_size", c.intermediate_size}};
  for (const auto& s : splits) {
    if (s.value % size != 0) {
      return Error{flag + " does not divide the model's " + s.field + " " +
                   std::to_string(s.value) + " (each rank takes an equal share)"};
    }
  }
  return {};
}

ModelConfig rank_config(const ModelConfig& config, int32_t size) {
  assert(check_tensor_parallel(config, size).ok());
  ModelConfig c = config;
  c.num_attention_heads /= size;
  c.num_key_value_heads /= size;
  c.intermediate_size /= size;
  return c;
}

VocabSlice vocab_slice(int32_t vocab_size, int32_t rank, int32_t size) {
  assert(size > 0 && rank >= 0 && rank < size);
  VocabSlice s;
  s.padded = (vocab_size + size - 1) / size;
  s.begin = std::min(vocab_size, rank * s.padded);
  s.rows = std::min(s.padded, vocab_size - s.begin);
  return s;
}

RankWeights shard_weights(const ModelWeights& full, int32_t rank, int32_t size) {
  assert(rank >= 0 && rank < size);
  const ModelConfig& c = full.config;
  RankWeights out;
  ModelWeights& w = out.weights;
  w.config = rank_config(c, size);
  w.config.tie_word_embeddings = true;  // the rank's input embedding only: its LM head is below
  w.kv_scales = full.kv_scales;
  w.embed = full.embed;
  w.final_norm = full.final_norm;
  const int64_t h = c.hidden_size, d = c.head_dim;
  const int64_t qd = int64_t{w.config.num_attention_heads} * d;   // the rank's q columns
  const int64_t kvd = int64_t{w.config.num_key_value_heads} * d;  // ...and k / v columns
  const int64_t ff = w.config.intermediate_size, full_ff = c.intermediate_size;
  const int64_t full_qd = int64_t{c.num_attention_heads} * d;
  w.layers.reserve(full.layers.size());
  for (const LayerWeights& l : full.layers) {
    LayerWeights r;
    r.attn_norm = l.attn_norm;
    r.mlp_norm = l.mlp_norm;
    r.q_norm = l.q_norm;
    r.k_norm = l.k_norm;
    // Column-parallel: the rank's heads are consecutive output rows (head-major).
    r.wq = rows_of(l.wq, h, rank * qd, qd);
    r.wk = rows_of(l.wk, h, rank * kvd, kvd);
    r.wv = rows_of(l.wv, h, rank * kvd, kvd);
    r.bq = slice(l.bq, rank * qd, qd);
    r.bk = slice(l.bk, rank * kvd, kvd);
    r.bv = slice(l.bv, rank * kvd, kvd);
    // Gate and up are one fused [2 ff, h] tensor: the rank's gate rows, then its up rows.
    r.w_gate_up = rows_of(l.w_gate_up, h, rank * ff, ff);
    const std::vector<float> up = rows_of(l.w_gate_up, h, full_ff + rank * ff, ff);
    r.w_gate_up.insert(r.w_gate_up.end(), up.begin(), up.end());
    // Row-parallel: the rank's slice of the input columns.
    r.wo = cols_of(l.wo, full_qd, rank * qd, qd);
    r.w_down = cols_of(l.w_down, full_ff, rank * ff, ff);
    w.layers.push_back(std::move(r));
  }
  out.vocab = vocab_slice(c.vocab_size, rank, size);
  out.lm_head_rows = rows_of(full.output_embedding(), h, out.vocab.begin, out.vocab.rows);
  out.lm_head_rows.resize(static_cast<size_t>(out.vocab.padded * h), 0.0f);
  return out;
}

Result<RankWeights> read_rank_weights(const HfFolder& folder, int32_t rank, int32_t size) {
  assert(rank >= 0 && rank < size);
  const ModelConfig& c = folder.config();
  if (Status s = check_tensor_parallel(c, size); !s.ok()) return Error{s.message()};
  RankWeights out;
  ModelWeights& w = out.weights;
  w.config = rank_config(c, size);
  w.config.tie_word_embeddings = true;  // as shard_weights: the LM head is lm_head_rows
  allocate_weights(w);
  std::map<std::string, const TensorSpec*> whole;
  for (const TensorSpec& s : folder.specs())
    whole[s.name] = &s;
  // Each tensor of the rank's model is the whole one's, or its slice along the one dimension
  // whose size the split changed (rows of a column-parallel matrix or bias, columns of a
  // row-parallel one).
  for (const TensorSpec& s : hf_tensor_specs(w.config)) {
    const auto it = whole.find(s.name);
    assert(it != whole.end());
    const TensorSpec& full = *it->second;
    std::optional<TensorSlice> slice;
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (s.shape[d] != full.shape[d]) {
        slice = TensorSlice{static_cast<int>(d), rank * s.shape[d], s.shape[d]};
      }
    }
    if (Status st = folder.read_f32(full.name, full.shape, tensor_values(w, s), slice); !st.ok()) {
      return Error{st.message()};
    }
  }
  Result<KvCacheScales> kv = folder.kv_cache_scales();
  if (!kv.ok()) return Error{kv.error().message};
  w.kv_scales = std::move(kv).value();
  out.vocab = vocab_slice(c.vocab_size, rank, size);
  out.lm_head_rows.assign(static_cast<size_t>(out.vocab.padded) * c.hidden_size, 0.0f);
  const char* head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  const auto it = whole.find(head);
  assert(it != whole.end());
  if (out.vocab.rows > 0) {
    if (Status st = folder.read_f32(head, it->second->shape, out.lm_head_rows.data(),
                                    TensorSlice{0, out.vocab.begin, out.vocab.rows});
        !st.ok()) {
      return Error{st.message()};
    }
  }
  return out;
}

}  // namespace kvc
