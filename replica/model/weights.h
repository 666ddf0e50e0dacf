// Model weights in float32, in the layouts the kernels take (HF Linear [out, in], row-major):
// random-initialised from a config, or read from a Hugging Face folder (config.json +
// *.safetensors). h = hidden_size, d = head_dim, ff = intermediate_size.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/model_tensor.h"
#include "replica/model/model_config.h"
#include "replica/model/safetensors.h"

namespace kvc {

struct LayerWeights {
  std::vector<float> attn_norm;  // [h]
  std::vector<float> wq;         // [q_heads * d, h]
  std::vector<float> wk;         // [kv_heads * d, h]
  std::vector<float> wv;         // [kv_heads * d, h]
  std::vector<float> wo;         // [h, q_heads * d]
  std::vector<float> mlp_norm;   // [h]
  std::vector<float> w_gate_up;  // [2 * ff, h]: the ff gate rows, then the ff up rows
  std::vector<float> w_down;     // [h, ff]
  // Family options (empty when the model has none): q/k/v biases [q_heads * d], [kv_heads * d],
  // [kv_heads * d] (Qwen2); per-head RMSNorm weights of q and k [d] (Qwen3).
  std::vector<float> bq, bk, bv;
  std::vector<float> q_norm, k_norm;
};

// The KV-cache scales of an FP8 checkpoint, one K and one V scale per layer (empty: it has none,
// and --kv-cache-dtype fp8 uses 1.0): what compressed-tensors' kv_cache_scheme writes and vLLM
// reads, `model.layers.<l>.self_attn.k_scale` and `.v_scale`, one positive number each. A cached
// key is e4m3(k / k_scale) x k_scale (kernels/fp8_rule.h); only an FP8 KV cache reads them.
struct KvCacheScales {
  std::vector<float> k, v;
  bool empty() const { return k.empty(); }
};

struct ModelWeights {
  ModelConfig config;
  KvCacheScales kv_scales;
  std::vector<float> embed;  // [vocab, h]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [h]
  std::vector<float> lm_head;     // [vocab, h]; empty when config.tie_word_embeddings

  // The output projection [vocab, h]: lm_head, or embed when tied.
  const std::vector<float>& output_embedding() const {
    return config.tie_word_embeddings ? embed : lm_head;
  }
};

// Every tensor has the size its config implies (lm_head empty exactly when tied).
Status check_weight_shapes(const ModelWeights& weights);

// Deterministic for (config, seed), whatever the thread count: every matrix uniform with
// standard deviation 1 / sqrt(fan_in) (its last dimension), norms 1. Not HF's 0.02: with it the
// layers' outputs are small next to the tied embedding, so each token's own logit wins and greedy
// decoding repeats one token; at unit scale attention is not uniform and the tiny model's next
// tokens depend on the context (tests/replica/backend/cpu/cpu_backend_test.cc checks this).
// Precondition: config.validate() is ok.
ModelWeights random_weights(const ModelConfig& config, uint64_t seed);

// One tensor of a Hugging Face checkpoint the model reads: its name, its shape, and where it goes
// (kernels/model_tensor.h: the tensor, its layer, the element offset into it, since q/k/v are one
// fused QKV tensor and gate/up one GateUp tensor on every backend).
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  kernels::ModelTensor kind;
  int layer;       // 0 for the model-wide tensors
  int64_t offset;  // elements into the (fused) tensor of `kind`
  int64_t numel() const;
};
// Every tensor `config` reads, in a fixed order (random_weights' seeds depend on it).
std::vector<TensorSpec> hf_tensor_specs(const ModelConfig& config);
// Where `spec`'s values are in `weights` (spec.numel() floats). Precondition: the weights have
// their config's shapes (check_weight_shapes) and spec is one of hf_tensor_specs(its config).
const float* tensor_values(const ModelWeights& weights, const TensorSpec& spec);
float* tensor_values(ModelWeights& weights, const TensorSpec& spec);
// Sizes every tensor of `weights` for weights.config (zeros).
void allocate_weights(ModelWeights& weights);

// A Hugging Face model folder, opened: config.json parsed (the model is named after the folder),
// generation_config.json read when present, and every *.safetensors file mapped (tensors may be
// spread over shards). Nothing is read yet. A checkpoint tensor the model would not read is an
// error (a wrong config would otherwise serve a different model), except known harmless extras
// (rotary caches, an lm_head next to tied embeddings).
class HfFolder {
 public:
  static Result<HfFolder> open(const std::string& folder);
  const ModelConfig& config() const { return config_; }
  const std::vector<TensorSpec>& specs() const { return specs_; }
  // Every tensor the model reads is there with its shape and a dtype it takes (reads nothing but
  // the shards' headers): after this, reading them fails only if the files change underneath.
  Status check_tensors() const;
  // Every tensor the model reads (an FP8 matrix's scales included) holds only finite values: one
  // pass over their mapped bytes (check_finite_tensor), the error naming the first that does not.
  // read_f32 checks what it reads as it converts it; a backend that writes tensors in place as
  // it reads them (the GPU's) runs this before a weight update, so that a refused checkpoint
  // leaves the old weights whole.
  Status check_finite() const;
  // Tensor `name`, which must have exactly `shape` and dtype F32, F16, BF16 or (a matrix of an
  // FP8 checkpoint) F8_E4M3; errors name it. An F8_E4M3 view holds codes: read it with read_f32.
  Result<TensorView> tensor(const std::string& name, const std::vector<int64_t>& shape) const;
  // Tensor `name` as float32; an F8_E4M3 matrix dequantized by its scales (`<linear>.weight_scale`
  // or `.weight_scale_inv`: one scale, one per row, or one per block of
  // config().checkpoint_fp8_block).
  // `slice`: only that part of it (SafetensorsFile::read_f32), its FP8 scales those of its
  // elements' places in the whole tensor.
  Status read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out,
                  const std::optional<TensorSlice>& slice = std::nullopt) const;
  // The checkpoint's KV-cache scales (KvCacheScales): every layer's k_scale and v_scale, or none.
  // Errors: some layers only, a tensor of more than one value, a scale not finite and > 0.
  Result<KvCacheScales> kv_cache_scales() const;

 private:
  Status check_every_tensor_read() const;
  // Where the scales of F8_E4M3 matrix `name` are and how they map onto it: each scale covers
  // block_rows x block_cols elements (the whole matrix, a row, or a block).
  struct Fp8Scales {
    std::string name;
    std::vector<int64_t> shape;
    int64_t block_rows = 1, block_cols = 1;
  };
  Result<Fp8Scales> fp8_scales(const std::string& name, const std::vector<int64_t>& shape) const;
  std::string folder_;
  ModelConfig config_;
  std::vector<TensorSpec> specs_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_;  // tensor name -> index in shards_
};

// A folder that can replace the weights of a running model of config `serving` (a weight
// update): opened, the same model (check_same_model), every tensor there with its shape and a
// dtype the model takes (HfFolder::check_tensors). Reads only headers.
Result<HfFolder> open_replacement(const std::string& folder, const ModelConfig& serving);
// open_replacement's verdict alone (what every backend's check_weights answers).
Status check_replacement(const std::string& folder, const ModelConfig& serving);

// Every tensor of an opened folder, converted to float32, in its config's layout.
Result<ModelWeights> read_weights(const HfFolder& folder);

// Writes `weights` as a Hugging Face folder: config.json (hf_config_json) and model.safetensors
// with every tensor hf_tensor_specs names, as `dtype` (F32, F16 or BF16, rounded to nearest
// even). The folder must exist. For the tests and benchmarks that need real checkpoints (weight
// updates): HfFolder::open reads it back.
Status write_hf_checkpoint(const ModelWeights& weights, const std::string& folder,
                           DType dtype = DType::kBF16);

// Reads config.json (the model is named after the folder) and every *.safetensors file in
// `folder` (tensors may be spread over shards), converting F32/F16/BF16 to float32. Errors name
// the missing file or tensor, or the tensor whose shape differs from the config's.
Result<ModelWeights> load_hf_weights(const std::string& folder);

}  // namespace kvc
