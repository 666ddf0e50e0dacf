// Llama-architecture model shape: read from a Hugging Face config.json or taken from a preset.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
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

struct ModelConfig {
  std::string name;  // served model name: the preset's name or the model folder's name
  int hidden_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int intermediate_size = 0;
  int vocab_size = 0;
  float rope_theta = 10000.0f;
  float rms_norm_eps = 1e-5f;
  int max_position_embeddings = 4096;
  bool tie_word_embeddings = false;
  // rope_scaling {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
  // original_max_position_embeddings}
  bool rope_llama3 = false;
  float rope_factor = 8.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_position = 8192;

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

// Preset shapes for random-initialised models: "tiny" (CPU demo and tests) and "llama3-8b"
// (GPU benchmarks; never allocated by CPU tests).
Result<ModelConfig> preset_config(std::string_view name);
std::vector<std::string> preset_names();

// Parses the text of a Hugging Face config.json (Llama architecture).
Result<ModelConfig> parse_model_config(std::string_view json_text, std::string name);

}  // namespace kvc
