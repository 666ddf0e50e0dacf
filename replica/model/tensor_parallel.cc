#include "replica/model/tensor_parallel.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace kvc {
namespace {

// Reads `slice` of a whole model's tensor `full` (all of it: nullopt) into `out`.
using SliceReader = std::function<Status(const TensorSpec& full,
                                         const std::optional<TensorSlice>& slice, float* out)>;

// A rank's weights from a whole model's tensors (`whole`, config `c`), each read by `read` as
// plan_rank places it; KV-cache scales are the caller's.
Result<RankWeights> split(const ModelConfig& c, const std::vector<TensorSpec>& whole, int32_t rank,
                          int32_t size, const SliceReader& read) {
  Result<RankPlan> plan = plan_rank(c, whole, rank, size);
  if (!plan.ok()) return Error{plan.error().message};
  RankWeights out;
  ModelWeights& w = out.weights;
  w.config = plan->config;
  allocate_weights(w);
  for (const RankTensor& t : plan->tensors) {
    if (Status st = read(t.full, t.slice, tensor_values(w, t.part)); !st.ok()) {
      return Error{st.message()};
    }
  }
  out.vocab = plan->vocab;
  out.lm_head_rows.assign(static_cast<size_t>(out.vocab.padded) * c.hidden_size, 0.0f);
  if (out.vocab.rows > 0) {
    if (Status st = read(plan->head, TensorSlice{0, out.vocab.begin, out.vocab.rows},
                         out.lm_head_rows.data());
        !st.ok()) {
      return Error{st.message()};
    }
  }
  return out;
}

}  // namespace

Result<RankPlan> plan_rank(const ModelConfig& c, const std::vector<TensorSpec>& whole, int32_t rank,
                           int32_t size) {
  assert(rank >= 0 && rank < size);
  if (Status s = check_tensor_parallel(c, size); !s.ok()) return Error{s.message()};
  RankPlan plan;
  plan.config = rank_config(c, size);
  plan.config.tie_word_embeddings = true;  // the rank's input embedding only: its LM head apart
  std::map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& s : whole)
    by_name[s.name] = &s;
  for (const TensorSpec& s : hf_tensor_specs(plan.config)) {
    const auto it = by_name.find(s.name);
    assert(it != by_name.end());
    RankTensor t{s, *it->second, std::nullopt};
    for (size_t d = 0; d < s.shape.size(); ++d) {
      if (s.shape[d] != t.full.shape[d]) {
        t.slice = TensorSlice{static_cast<int>(d), rank * s.shape[d], s.shape[d]};
      }
    }
    plan.tensors.push_back(std::move(t));
  }
  const auto head =
      by_name.find(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
  assert(head != by_name.end());
  plan.head = *head->second;
  plan.vocab = vocab_slice(c.vocab_size, rank, size);
  return plan;
}

void copy_slice_bytes(const std::byte* src, size_t elem_bytes, const std::vector<int64_t>& shape,
                      const std::optional<TensorSlice>& slice, std::byte* out) {
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  if (!slice) {
    std::memcpy(out, src, size_t(numel) * elem_bytes);
    return;
  }
  const size_t cols = shape.size() == 2 ? size_t(shape[1]) : 1;
  if (slice->dim == 0) {
    std::memcpy(out, src + size_t(slice->begin) * cols * elem_bytes,
                size_t(slice->count) * cols * elem_bytes);
    return;
  }
  const size_t row = size_t(slice->count) * elem_bytes;
  for (int64_t r = 0; r < shape[0]; ++r)
    std::memcpy(out + size_t(r) * row, src + (size_t(r) * cols + size_t(slice->begin)) * elem_bytes,
                row);
}

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
  Result<RankWeights> out =
      split(full.config, hf_tensor_specs(full.config), rank, size,
            [&](const TensorSpec& t, const std::optional<TensorSlice>& slice, float* to) {
              copy_slice_bytes(reinterpret_cast<const std::byte*>(tensor_values(full, t)), 4,
                               t.shape, slice, reinterpret_cast<std::byte*>(to));
              return Status::Ok();
            });
  assert(out.ok());
  out->weights.kv_scales = full.kv_scales;
  return std::move(out).value();
}

Result<RankWeights> read_rank_weights(const HfFolder& folder, int32_t rank, int32_t size) {
  Result<RankWeights> out =
      split(folder.config(), folder.specs(), rank, size,
            [&](const TensorSpec& t, const std::optional<TensorSlice>& slice, float* to) {
              return folder.read_f32(t.name, t.shape, to, slice);
            });
  if (!out.ok()) return out;
  Result<KvCacheScales> kv = folder.kv_cache_scales();
  if (!kv.ok()) return Error{kv.error().message};
  out->weights.kv_scales = std::move(kv).value();
  return out;
}

}  // namespace kvc
