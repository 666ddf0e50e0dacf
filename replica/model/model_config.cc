#include "replica/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvc {

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, q = int64_t{num_attention_heads} * head_dim,
                kv = int64_t{num_key_value_heads} * head_dim, ff = intermediate_size;
  const int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * ff + 2 * h +
                            (qkv_bias ? q + 2 * kv : 0) + (qk_norm ? 2 * int64_t{head_dim} : 0);
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
  } else if (name == "llama3-8b" || name == "llama3-70b") {
    // Llama 3's shapes; the 70B (~70.6 B parameters, 141 GB in bf16) is more than one GPU
    // holds: split it with --tensor-parallel-size, or FP8 weights on one H200.
    const bool big = name == "llama3-70b";
    c.hidden_size = big ? 8192 : 4096;
    c.num_hidden_layers = big ? 80 : 32;
    c.num_attention_heads = big ? 64 : 32;
    c.num_key_value_heads = 8;
    c.head_dim = 128;
    c.intermediate_size = big ? 28672 : 14336;
    c.vocab_size = 128256;
    c.rope_theta = 500000.0f;
    c.max_position_embeddings = 131072;
    c.rope_llama3 = true;
  } else {
    std::string known;
    for (const std::string& n : preset_names())
      known += (known.empty() ? "" : ", ") + n;
    return Error{"unknown preset '" + std::string(name) + "' (known: " + known + ")"};
  }
  return c;
}

std::vector<std::string> preset_names() {
  return {"tiny", "llama3-8b", "llama3-70b"};
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

struct Architecture {
  const char* architecture;
  const char* model_type;
  ModelFamily family;
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", ModelFamily::kLlama},
    {"MistralForCausalLM", "mistral", ModelFamily::kMistral},
    {"Qwen2ForCausalLM", "qwen2", ModelFamily::kQwen2},
    {"Qwen3ForCausalLM", "qwen3", ModelFamily::kQwen3},
};

Status refuse(const std::string& field, const std::string& why) {
  return Error{"config.json: " + field + ": " + why};
}

// The architecture, from `architectures` (its one entry) or else `model_type`.
Status read_architecture(const nlohmann::json& top, const nlohmann::json& j, ModelConfig& c) {
  std::string architecture;
  if (auto a = top.find("architectures"); a != top.end() && !a->is_null()) {
    if (!a->is_array() || a->size() != 1 || !(*a)[0].is_string()) {
      return refuse("architectures", "expected a list of one name");
    }
    architecture = (*a)[0].get<std::string>();
    for (const Architecture& x : kArchitectures) {
      if (architecture == x.architecture) {
        c.family = x.family;
        c.architecture = architecture;
        return Status::Ok();
      }
    }
    return refuse("architectures", "'" + architecture + "' is not implemented (implemented: " +
                                       implemented_architectures() + ")");
  }
  static const nlohmann::json kNone;
  const nlohmann::json* found = &kNone;
  for (const nlohmann::json* o : {&j, &top}) {
    if (auto it = o->find("model_type"); it != o->end()) {
      found = &*it;
      break;
    }
  }
  const nlohmann::json& mt = *found;
  if (!mt.is_string()) {
    return refuse("architectures",
                  "missing, and no model_type either: cannot tell what model this is "
                  "(implemented: " +
                      implemented_architectures() + ")");
  }
  const std::string type = mt.get<std::string>();
  for (const Architecture& x : kArchitectures) {
    if (type == x.model_type) {
      c.family = x.family;
      c.architecture = x.architecture;
      return Status::Ok();
    }
  }
  return refuse("model_type", "'" + type + "' is not implemented (implemented: " +
                                  implemented_architectures() + ")");
}

// The RoPE parameters: transformers 5's rope_parameters {rope_type, rope_theta, ...} or the
// classic top-level rope_theta with rope_scaling {rope_type | type, ...}.
Status read_rope(const nlohmann::json& j, ModelConfig& c) {
  const nlohmann::json* scaling = nullptr;
  std::string where;
  if (auto rp = j.find("rope_parameters"); rp != j.end() && !rp->is_null()) {
    if (!rp->is_object()) return refuse("rope_parameters", "expected an object");
    if (rp->contains("full_attention") || rp->contains("sliding_attention")) {
      return refuse("rope_parameters", "per-layer-type RoPE parameters are not implemented");
    }
    if (Status s = read_field(*rp, "rope_theta", c.rope_theta, true); !s.ok()) {
      return refuse("rope_parameters", s.message());
    }
    scaling = &*rp;
    where = "rope_parameters";
  } else {
    if (Status s = read_field(j, "rope_theta", c.rope_theta, false); !s.ok()) return s;
    if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
      if (!rs->is_object()) return refuse("rope_scaling", "expected an object");
      scaling = &*rs;
      where = "rope_scaling";
    }
  }
  if (scaling == nullptr) return Status::Ok();
  std::string type = "default", type_key = "rope_type";
  for (const char* key : {"rope_type", "type"}) {
    if (auto t = scaling->find(key); t != scaling->end() && !t->is_null()) {
      if (!t->is_string()) return refuse(where + "." + key, "expected a string");
      type = t->get<std::string>();
      type_key = key;
      break;
    }
  }
  if (type == "default") return Status::Ok();
  if (type != "llama3") {
    return refuse(where + "." + type_key,
                  "'" + type + "' is not implemented (implemented: default, llama3)");
  }
  c.rope_llama3 = true;
  for (const Status& s : {
           read_field(*scaling, "factor", c.rope_factor, true),
           read_field(*scaling, "low_freq_factor", c.rope_low_freq_factor, false),
           read_field(*scaling, "high_freq_factor", c.rope_high_freq_factor, false),
           read_field(*scaling, "original_max_position_embeddings", c.rope_original_max_position,
                      false),
       }) {
    if (!s.ok()) return Error{where + ": " + s.message()};
  }
  return Status::Ok();
}

// FP8 checkpoints as published: compressed-tensors' float-quantized FP8 (per-tensor, per-channel
// or block scales in `<linear>.weight_scale`) and transformers' fine-grained fp8 (block scales in
// `<linear>.weight_scale_inv`). The weights are dequantized at load (HfFolder::read_f32) and
// requantized per output channel where the engine serves FP8 (kernels/fp8_rule.h). Static
// activation scales (input_scale) are not read: activations are quantized per token as they are
// produced. KV-cache scales (self_attn.k_scale / v_scale) scale an FP8 KV cache
// (HfFolder::kv_cache_scales). Anything else is refused by name.
Status read_quantization(const nlohmann::json& q, ModelConfig& c) {
  if (!q.is_object()) return refuse("quantization_config", "expected an object");
  const auto m = q.find("quant_method");
  const std::string method = m != q.end() && m->is_string() ? m->get<std::string>() : "";
  const std::string supported =
      " (supported: FP8 checkpoints, quant_method \"compressed-tensors\" with float-quantized "
      "8-bit "
      "float weights, or \"fp8\")";
  if (method == "fp8") {
    c.checkpoint_fp8_block = {128, 128};
    if (auto b = q.find("weight_block_size"); b != q.end() && !b->is_null()) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
          !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
          (*b)[1].get<int64_t>() <= 0 || (*b)[0].get<int64_t>() > (1 << 20) ||
          (*b)[1].get<int64_t>() > (1 << 20)) {
        return refuse("quantization_config.weight_block_size", "expected two positive integers");
      }
      c.checkpoint_fp8_block = {(*b)[0].get<int>(), (*b)[1].get<int>()};
    }
    if (auto fmt = q.find("fmt"); fmt != q.end() && !fmt->is_null() && *fmt != "e4m3") {
      return refuse("quantization_config.fmt", fmt->dump() + " is not supported (e4m3)");
    }
    c.checkpoint_quantization = "fp8 (transformers, " +
                                std::to_string(c.checkpoint_fp8_block.first) + "x" +
                                std::to_string(c.checkpoint_fp8_block.second) + " blocks)";
    return Status::Ok();
  }
  if (method != "compressed-tensors") {
    return refuse("quantization_config.quant_method",
                  (method.empty() ? std::string("missing") : "'" + method + "'") +
                      " is not supported" + supported);
  }
  const std::string format = q.value("format", "");
  if (format != "float-quantized" && format != "naive-quantized") {
    return refuse("quantization_config.format",
                  "'" + format + "' is not supported (float-quantized, naive-quantized)");
  }
  const auto groups = q.find("config_groups");
  if (groups == q.end() || !groups->is_object() || groups->empty()) {
    return refuse("quantization_config.config_groups", "expected an object of groups");
  }
  std::string strategies;
  for (const auto& [name, g] : groups->items()) {
    const std::string where = "quantization_config.config_groups." + name;
    const auto w = g.find("weights");
    if (!g.is_object() || w == g.end() || !w->is_object()) {
      return refuse(where + ".weights", "expected an object");
    }
    if (w->value("num_bits", 0) != 8 || w->value("type", "") != "float") {
      return refuse(where + ".weights", "only 8-bit float weights are supported");
    }
    const std::string strategy = w->value("strategy", "");
    if (strategy != "tensor" && strategy != "channel" && strategy != "block") {
      return refuse(where + ".weights.strategy",
                    "'" + strategy + "' is not supported (tensor, channel, block)");
    }
    if (strategy == "block") {
      const auto b = w->find("block_structure");
      if (b == w->end() || !b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() ||
          !(*b)[1].is_number_integer() || (*b)[0].get<int64_t>() <= 0 ||
          (*b)[1].get<int64_t>() <= 0 || (*b)[0].get<int64_t>() > (1 << 20) ||
          (*b)[1].get<int64_t>() > (1 << 20)) {
        return refuse(where + ".weights.block_structure", "expected two positive integers");
      }
      c.checkpoint_fp8_block = {(*b)[0].get<int>(), (*b)[1].get<int>()};
    }
    if (w->contains("symmetric") && !w->value("symmetric", true)) {
      return refuse(where + ".weights.symmetric", "asymmetric weights are not supported");
    }
    if (auto a = g.find("input_activations"); a != g.end() && !a->is_null()) {
      if (!a->is_object() || a->value("num_bits", 0) != 8 || a->value("type", "") != "float") {
        return refuse(where + ".input_activations",
                      "only 8-bit float activations are supported (they are quantized per token)");
      }
    }
    if (strategies.find(strategy) == std::string::npos)
      strategies += (strategies.empty() ? "" : ", ") + strategy;
  }
  c.checkpoint_quantization = "fp8 (compressed-tensors, " + strategies + " scales)";
  return Status::Ok();
}

// The options of the family, and what it does not have refused by name.
Status read_family_options(const nlohmann::json& j, ModelConfig& c) {
  auto flag = [&](const char* key) -> Result<bool> {
    bool v = false;
    if (Status s = read_field(j, key, v, false); !s.ok()) return Error{s.message()};
    return v;
  };
  Result<bool> attention_bias = flag("attention_bias");
  Result<bool> mlp_bias = flag("mlp_bias");
  if (!attention_bias.ok()) return Error{attention_bias.error().message};
  if (!mlp_bias.ok()) return Error{mlp_bias.error().message};
  if (*mlp_bias) return refuse("mlp_bias", "true is not implemented (no family has MLP biases)");
  if (*attention_bias) {
    return refuse("attention_bias", std::string("true is not implemented for ") +
                                        model_family_name(c.family) +
                                        " (it would add biases to q, k, v and o)");
  }
  c.qkv_bias = c.family == ModelFamily::kQwen2;  // Qwen2's q/k/v biases are implicit
  c.qk_norm = c.family == ModelFamily::kQwen3;
  if (auto act = j.find("hidden_act"); act != j.end() && !act->is_null()) {
    if (!act->is_string() || act->get<std::string>() != "silu") {
      return refuse("hidden_act", act->dump() + " is not implemented (implemented: \"silu\")");
    }
  }
  if (auto q = j.find("quantization_config"); q != j.end() && !q->is_null()) {
    if (Status s = read_quantization(*q, c); !s.ok()) return s;
  }
  // A sliding window shorter than the context served would change attention: not implemented.
  // Qwen's sliding_window applies only with use_sliding_window.
  bool window_used = true;
  if (Result<bool> u = flag("use_sliding_window"); !u.ok()) {
    return Error{u.error().message};
  } else if (j.contains("use_sliding_window")) {
    window_used = *u;
  }
  if (auto w = j.find("sliding_window"); window_used && w != j.end() && !w->is_null()) {
    if (!w->is_number_integer()) return refuse("sliding_window", "expected an integer or null");
    const int64_t window = w->get<int64_t>();
    if (window < c.max_position_embeddings) {
      return refuse("sliding_window",
                    std::to_string(window) + " is shorter than the context served (" +
                        "max_position_embeddings " + std::to_string(c.max_position_embeddings) +
                        "): sliding-window attention is not implemented");
    }
  }
  if (auto lt = j.find("layer_types"); window_used && lt != j.end() && lt->is_array()) {
    for (const auto& t : *lt) {
      if (!t.is_string() || t.get<std::string>() != "full_attention") {
        return refuse("layer_types", t.dump() + " is not implemented (only \"full_attention\")");
      }
    }
  }
  return Status::Ok();
}

// An id or a list of ids (eos_token_id in config.json and generation_config.json).
Status read_token_ids(const nlohmann::json& j, const char* key, std::vector<int32_t>& out,
                      const char* file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  std::vector<int32_t> ids;
  auto one = [&](const nlohmann::json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxVocabSize) {
      return false;
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    return true;
  };
  bool ok = it->is_array() ? std::all_of(it->begin(), it->end(), one) : one(*it);
  if (!ok) {
    return Error{std::string(file) + ": " + key + ": expected a token id or a list of them"};
  }
  out = std::move(ids);
  return Status::Ok();
}

Result<ModelConfig> parse_fields(const nlohmann::json& top, std::string name) {
  ModelConfig c;
  c.name = std::move(name);
  // Multimodal checkpoints nest the language model's fields in text_config.
  const nlohmann::json& j =
      top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
  if (Status s = read_architecture(top, j, c); !s.ok()) return Error{s.message()};
  c.rms_norm_eps = 1e-6f;  // every family's default in transformers
  for (const Status& s : {
           read_field(j, "hidden_size", c.hidden_size, true),
           read_field(j, "num_hidden_layers", c.num_hidden_layers, true),
           read_field(j, "num_attention_heads", c.num_attention_heads, true),
           read_field(j, "intermediate_size", c.intermediate_size, true),
           read_field(j, "vocab_size", c.vocab_size, true),
           read_field(j, "rms_norm_eps", c.rms_norm_eps, false),
           read_field(j, "max_position_embeddings", c.max_position_embeddings, false),
           read_field(top.contains("tie_word_embeddings") ? top : j, "tie_word_embeddings",
                      c.tie_word_embeddings, false),
       }) {
    if (!s.ok()) return Error{s.message()};
  }
  c.num_key_value_heads = c.num_attention_heads;
  if (Status s = read_field(j, "num_key_value_heads", c.num_key_value_heads, false); !s.ok()) {
    return Error{s.message()};
  }
  c.head_dim = c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0;
  if (Status s = read_field(j, "head_dim", c.head_dim, false); !s.ok()) return Error{s.message()};
  if (Status s = read_rope(j, c); !s.ok()) return Error{s.message()};
  if (Status s = read_family_options(j, c); !s.ok()) return Error{s.message()};
  if (Status s = read_token_ids(j, "eos_token_id", c.eos_token_ids, "config.json"); !s.ok()) {
    return Error{s.message()};
  }
  if (Status s = c.validate(); !s.ok()) return Error{s.message()};
  return c;
}

}  // namespace

Status parse_generation_config(std::string_view json_text, ModelConfig& c) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("generation_config.json: ") + e.what()};
  }
  if (!j.is_object()) return Error{"generation_config.json: not a JSON object"};
  std::vector<int32_t> eos;
  if (Status s = read_token_ids(j, "eos_token_id", eos, "generation_config.json"); !s.ok()) {
    return s;
  }
  if (!eos.empty()) c.eos_token_ids = std::move(eos);
  GenerationDefaults g;
  auto number = [&](const char* key, auto& out, double lo, double hi) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::Ok();
    if (!it->is_number() || it->get<double>() < lo || it->get<double>() > hi) {
      return Error{std::string("generation_config.json: ") + key + ": expected a number in [" +
                   std::to_string(lo) + ", " + std::to_string(hi) + "]"};
    }
    out = static_cast<std::remove_reference_t<decltype(*out)>>(it->get<double>());
    return Status::Ok();
  };
  for (const Status& s :
       {number("temperature", g.temperature, 0, 2), number("top_p", g.top_p, 1e-9, 1),
        number("top_k", g.top_k, 0, 1 << 20)}) {
    if (!s.ok()) return s;
  }
  if (g.top_k && *g.top_k == 0) g.top_k.reset();
  // Sampling defaults the sampler does not implement, unless at their neutral value; named so the
  // replica can say so.
  for (const auto& [key, neutral] :
       {std::pair{"repetition_penalty", 1.0}, std::pair{"presence_penalty", 0.0},
        std::pair{"frequency_penalty", 0.0}, std::pair{"min_p", 0.0}, std::pair{"typical_p", 1.0},
        std::pair{"no_repeat_ngram_size", 0.0}}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number() || it->get<double>() != neutral) g.unsupported.push_back(key);
  }
  c.generation = std::move(g);
  return Status::Ok();
}

std::string implemented_architectures() {
  std::string s;
  for (const Architecture& x : kArchitectures) {
    if (!s.empty()) s += ", ";
    s += x.architecture;
  }
  return s;
}

const char* model_family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::kLlama:
      return "llama";
    case ModelFamily::kMistral:
      return "mistral";
    case ModelFamily::kQwen2:
      return "qwen2";
    case ModelFamily::kQwen3:
      return "qwen3";
  }
  return "?";
}

std::string hf_config_json(const ModelConfig& c) {
  nlohmann::ordered_json j;
  for (const Architecture& a : kArchitectures) {
    if (a.family == c.family) {
      j["architectures"] = {a.architecture};
      j["model_type"] = a.model_type;
    }
  }
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_factor},
                         {"low_freq_factor", c.rope_low_freq_factor},
                         {"high_freq_factor", c.rope_high_freq_factor},
                         {"original_max_position_embeddings", c.rope_original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (c.family == ModelFamily::kQwen2 || c.family == ModelFamily::kQwen3) {
    j["use_sliding_window"] = false;
  }
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids;
  j["torch_dtype"] = "bfloat16";
  return j.dump(2);
}

Status check_same_model(const ModelConfig& serving, const ModelConfig& update) {
  auto differs = [](const char* field, const auto& a, const auto& b) -> Status {
    std::ostringstream m;
    m << "the checkpoint's " << field << " is " << b << ", the running model's " << a
      << ": weights can only be replaced by a checkpoint of the same model";
    return Error{m.str()};
  };
#define KVC_SAME(field) \
  if (serving.field != update.field) return differs(#field, serving.field, update.field)
  if (serving.family != update.family) {
    return differs("family", model_family_name(serving.family), model_family_name(update.family));
  }
  KVC_SAME(hidden_size);
  KVC_SAME(num_hidden_layers);
  KVC_SAME(num_attention_heads);
  KVC_SAME(num_key_value_heads);
  KVC_SAME(head_dim);
  KVC_SAME(intermediate_size);
  KVC_SAME(vocab_size);
  KVC_SAME(tie_word_embeddings);
  KVC_SAME(qkv_bias);
  KVC_SAME(qk_norm);
  KVC_SAME(rope_theta);
  KVC_SAME(rms_norm_eps);
  KVC_SAME(rope_llama3);
  if (serving.rope_llama3) {
    KVC_SAME(rope_factor);
    KVC_SAME(rope_low_freq_factor);
    KVC_SAME(rope_high_freq_factor);
    KVC_SAME(rope_original_max_position);
  }
#undef KVC_SAME
  return Status::Ok();
}

}  // namespace kvc
