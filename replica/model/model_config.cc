#include "replica/model/model_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

namespace kvc {

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, q = int64_t{num_attention_heads} * head_dim,
                kv = int64_t{num_key_value_heads} * head_dim, ff = intermediate_size;
  const int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * ff + 2 * h;
  const int64_t embed = int64_t{vocab_size} * h;
  return num_hidden_layers * per_layer + embed * (tie_word_embeddings ? 1 : 2) + h;
}

Status ModelConfig::validate() const {
  auto positive = [](int v) { return v > 0; };
  if (!positive(hidden_size) || !positive(num_hidden_layers) || !positive(num_attention_heads) ||
      !positive(num_key_value_heads) || !positive(head_dim) || !positive(intermediate_size) ||
      !positive(vocab_size) || !positive(max_position_embeddings)) {
    return Error{"model config: sizes must be positive"};
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    return Error{"model config: num_attention_heads must be a multiple of num_key_value_heads"};
  }
  if (hidden_size > kMaxHiddenSize || num_hidden_layers > kMaxLayers ||
      num_attention_heads > kMaxHeads || head_dim > kMaxHeadDim ||
      intermediate_size > kMaxIntermediateSize || vocab_size > kMaxVocabSize ||
      max_position_embeddings > kMaxPositions) {
    return Error{"model config: a size is beyond the supported maximum (hidden_size " +
                 std::to_string(kMaxHiddenSize) + ", num_hidden_layers " +
                 std::to_string(kMaxLayers) + ", heads " + std::to_string(kMaxHeads) +
                 ", head_dim " + std::to_string(kMaxHeadDim) + ", intermediate_size " +
                 std::to_string(kMaxIntermediateSize) + ", vocab_size " +
                 std::to_string(kMaxVocabSize) + ", max_position_embeddings " +
                 std::to_string(kMaxPositions) + ")"};
  }
  if (head_dim % 2 != 0) return Error{"model config: head_dim must be even (RoPE pairs)"};
  auto positive_finite = [](float v) { return v > 0 && std::isfinite(v); };
  if (!positive_finite(rope_theta) || !positive_finite(rms_norm_eps)) {
    return Error{"model config: rope_theta and rms_norm_eps must be positive and finite"};
  }
  // The llama3 ramp divides frequencies by factor: 0 gives infinite ones, a negative one flips
  // them.
  if (rope_llama3 && (!positive_finite(rope_factor) || !positive_finite(rope_low_freq_factor) ||
                      !positive_finite(rope_high_freq_factor) || rope_original_max_position <= 0)) {
    return Error{
        "model config: rope_scaling needs factor, low_freq_factor, high_freq_factor and "
        "original_max_position_embeddings positive (and finite)"};
  }
  return Status::Ok();
}

Result<ModelConfig> preset_config(std::string_view name) {
  ModelConfig c;
  c.name = std::string(name);
  if (name == "tiny") {
    // Small enough for a CPU demo at interactive speed; GQA 4:1 like the big models, and a
    // head_dim the CUDA kernels take (64 or 128), so the same preset runs on the GPU.
    c.hidden_size = 256;
    c.num_hidden_layers = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 1;
    c.head_dim = 64;
    c.intermediate_size = 768;
    c.vocab_size = 320;  // 256 bytes + EOS, padded
    c.rope_theta = 10000.0f;
    c.max_position_embeddings = 16384;
    c.tie_word_embeddings = true;
  } else if (name == "llama3-8b") {
    c.hidden_size = 4096;
    c.num_hidden_layers = 32;
    c.num_attention_heads = 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.intermediate_size = 14336;
    c.vocab_size = 128256;
    c.rope_theta = 500000.0f;
    c.max_position_embeddings = 131072;
    c.rope_llama3 = true;
  } else {
    return Error{"unknown preset '" + std::string(name) + "' (known: tiny, llama3-8b)"};
  }
  return c;
}

std::vector<std::string> preset_names() {
  return {"tiny", "llama3-8b"};
}

namespace {

template <typename T>
Status read_field(const nlohmann::json& j, const char* key, T& out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    return required ? Status(Error{std::string("config.json: missing field '") + key + "'"})
                    : Status::Ok();
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!it->is_boolean()) return Error{std::string("config.json: '") + key + "' must be a bool"};
  } else if constexpr (std::is_integral_v<T>) {
    if (!it->is_number_integer()) {
      return Error{std::string("config.json: '") + key + "' must be an integer"};
    }
    // get<T>() would silently truncate: 4294967552 must not become 256.
    const bool fits = it->is_number_unsigned()
                          ? it->template get<uint64_t>() <= uint64_t{std::numeric_limits<T>::max()}
                          : it->template get<int64_t>() >= std::numeric_limits<T>::min() &&
                                it->template get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) return Error{std::string("config.json: '") + key + "' is out of range"};
  } else {
    if (!it->is_number()) return Error{std::string("config.json: '") + key + "' must be a number"};
  }
  out = it->get<T>();
  return Status::Ok();
}

Result<ModelConfig> parse_fields(const nlohmann::json& j, std::string name);

}  // namespace

Result<ModelConfig> parse_model_config(std::string_view json_text, std::string name) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("config.json: ") + e.what()};
  }
  if (!j.is_object()) return Error{"config.json: not a JSON object"};
  try {
    return parse_fields(j, std::move(name));
  } catch (const nlohmann::json::exception& e) {
    // A field of an unexpected type deep inside (e.g. rope_scaling.rope_type as a number).
    return Error{std::string("config.json: ") + e.what()};
  }
}

namespace {

Result<ModelConfig> parse_fields(const nlohmann::json& j, std::string name) {
  ModelConfig c;
  c.name = std::move(name);
  for (const Status& s : {
           read_field(j, "hidden_size", c.hidden_size, true),
           read_field(j, "num_hidden_layers", c.num_hidden_layers, true),
           read_field(j, "num_attention_heads", c.num_attention_heads, true),
           read_field(j, "intermediate_size", c.intermediate_size, true),
           read_field(j, "vocab_size", c.vocab_size, true),
           read_field(j, "rope_theta", c.rope_theta, false),
           read_field(j, "rms_norm_eps", c.rms_norm_eps, false),
           read_field(j, "max_position_embeddings", c.max_position_embeddings, false),
           read_field(j, "tie_word_embeddings", c.tie_word_embeddings, false),
       }) {
    if (!s.ok()) return Error{s.message()};
  }
  c.num_key_value_heads = c.num_attention_heads;
  if (Status s = read_field(j, "num_key_value_heads", c.num_key_value_heads, false); !s.ok()) {
    return Error{s.message()};
  }
  c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  if (Status s = read_field(j, "head_dim", c.head_dim, false); !s.ok()) return Error{s.message()};
  if (auto rs = j.find("rope_scaling"); rs != j.end() && rs->is_object()) {
    const auto type = rs->value("rope_type", rs->value("type", std::string()));
    if (type == "llama3") {
      c.rope_llama3 = true;
      for (const Status& s : {
               read_field(*rs, "factor", c.rope_factor, true),
               read_field(*rs, "low_freq_factor", c.rope_low_freq_factor, false),
               read_field(*rs, "high_freq_factor", c.rope_high_freq_factor, false),
               read_field(*rs, "original_max_position_embeddings", c.rope_original_max_position,
                          false),
           }) {
        if (!s.ok()) return Error{"rope_scaling: " + s.message()};
      }
    } else if (!type.empty() && type != "default") {
      return Error{"config.json: rope_scaling type '" + type + "' is not supported"};
    }
  }
  if (Status s = c.validate(); !s.ok()) return Error{s.message()};
  return c;
}

}  // namespace
}  // namespace kvc
