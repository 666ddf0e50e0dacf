// The shape of a model the engine implements, read from a Hugging Face config.json (and
// generation_config.json) or taken from a preset. One decoder (pre-norm RMSNorm, GQA attention
// with RoPE, SwiGLU MLP) with per-family options: the families are Llama (3.x included), Mistral
// (without a sliding window), Qwen2/Qwen2.5 (q/k/v biases) and Qwen3 dense (per-head q/k RMSNorm
// before RoPE). A config the engine would mis-read is refused with the field named: another
// architecture, a bias or RoPE type or sliding window not implemented, quantized weights.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace kvc {

// Upper bounds on a model's sizes, far above real models (Llama-3-405B: hidden 16384, 126 layers,
// 128 heads, vocab 128256). They keep every derived size (num_parameters, kv_bytes_per_token)
// inside int64 whatever a config.json says.
inline constexpr int kMaxHiddenSize = 1 << 20;
inline constexpr int kMaxLayers = 1 << 12;
inline constexpr int kMaxHeads = 1 << 12;    // attention and key-value heads
inline constexpr int kMaxHeadDim = 1 << 10;  // the CPU RoPE kernel's bound
inline constexpr int kMaxIntermediateSize = 1 << 22;
inline constexpr int kMaxVocabSize = 1 << 24;
inline constexpr int kMaxPositions = 1 << 30;

enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3 };
const char* model_family_name(ModelFamily f);  // "llama", "mistral", "qwen2", "qwen3"

// generation_config.json's defaults for what a request leaves out (vLLM's
// `--generation-config auto`): those the sampler implements; `unsupported` names the others it
// sets (e.g. repetition_penalty), which are not applied.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::vector<std::string> unsupported;
};

struct ModelConfig {
  std::string name;  // served model name: the preset's name or the model folder's name
  ModelFamily family = ModelFamily::kLlama;
  std::string architecture = "LlamaForCausalLM";  // as config.json names it
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;  // config.json without it: the family's default (1e-6)
  int max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  // rope_scaling {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
  // original_max_position_embeddings}
  bool rope_llama3 = false;
  float rope_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_position = 8192;
  bool qkv_bias = false;  // q_proj, k_proj and v_proj have biases (Qwen2)
  bool qk_norm = false;   // q and k are RMS-normalised per head, before RoPE (Qwen3)
  // Token ids that end generation besides the tokenizer's EOS: generation_config.json's
  // eos_token_id, else config.json's (an id or a list; Llama 3 Instruct ends on any of three).
  std::vector<int32_t> eos_token_ids;
  GenerationDefaults generation;
  // An FP8 checkpoint (config.json's quantization_config): how its weights are stored, for logs
  // ("" for a bf16/f16/f32 checkpoint), and the block of one scale where scales are per block
  // (rows, columns).
  std::string checkpoint_quantization;
  std::pair<int, int> checkpoint_fp8_block{0, 0};

  int gqa_group() const { return num_attention_heads / num_key_value_heads; }
  // K and V of one token over all layers, at `bytes_per_element` (2 for fp16/bf16).
  int64_t kv_bytes_per_token(int bytes_per_element) const {
    return int64_t{2} * num_hidden_layers * num_key_value_heads * head_dim * bytes_per_element;
  }
  // All parameters (embeddings counted once when tied).
  int64_t num_parameters() const;

  // Checks that the shape is usable: positive sizes within the kMax* bounds, heads divisible,
  // finite positive RoPE parameters, and so on.
  Status validate() const;
};

// Preset shapes for random-initialised models: "tiny" (CPU demo and tests), "llama3-8b" and
// "llama3-70b" (GPU benchmarks, the latter split over GPUs; never allocated by CPU tests).
Result<ModelConfig> preset_config(std::string_view name);
std::vector<std::string> preset_names();

// Parses the text of a Hugging Face config.json: both layouts of the RoPE parameters (top-level
// rope_theta / rope_scaling, and transformers 5's rope_parameters), fields nested in text_config,
// dispatch on architectures (else model_type). Errors name the field that is not understood.
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string name);

// Reads generation_config.json's text into `config`: its eos_token_id (replacing config.json's)
// and its sampling defaults.
Status parse_generation_config(std::string_view json_text, ModelConfig& config);

// config.json as transformers writes it for this config (the classic RoPE layout):
// parse_model_config reads it back to the same shapes. For checkpoints the tests and benchmarks
// write (write_hf_checkpoint).
std::string hf_config_json(const ModelConfig& config);

// Whether a checkpoint of config `update` can replace the weights of a running model of config
// `serving` in place (POST /v1/admin/weights): the same family and every shape, RoPE parameter
// and norm epsilon the running model baked in. The error names the first field that differs.
Status check_same_model(const ModelConfig& serving, const ModelConfig& update);

// The architectures parse_model_config accepts, for messages.
std::string implemented_architectures();

}  // namespace kvc
