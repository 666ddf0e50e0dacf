// parse_model_config on arbitrary config.json text. A config it accepts must be one the engine
// can size itself from and run: validate() passes, the derived sizes (parameters, KV bytes per
// token, GQA group) are computed without overflow (UBSan checks the arithmetic), integer fields
// hold exactly the values written in the file, and the CPU RoPE kernel runs on its head_dim with
// finite, positive frequencies.
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_input.h"
#include "kernels/cpu/ops.h"
#include "replica/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvc::Result<kvc::ModelConfig> config = kvc::parse_model_config(text, "fuzz");
  if (!config.ok()) return 0;
  FUZZ_CHECK(config->validate().ok());
  FUZZ_CHECK(config->num_parameters() > 0);
  FUZZ_CHECK(config->kv_bytes_per_token(2) > 0);
  FUZZ_CHECK(config->gqa_group() >= 1);
  FUZZ_CHECK(std::isfinite(config->rms_norm_eps) && config->rms_norm_eps > 0);
  const kvc::kernels::cpu::RopeConfig rope{config->rope_theta,
                                           config->rope_llama3,
                                           config->rope_factor,
                                           config->rope_low_freq_factor,
                                           config->rope_high_freq_factor,
                                           config->rope_original_max_position};
  std::vector<double> inv_freq(config->head_dim / 2);
  kvc::kernels::cpu::rope_inv_freq(config->head_dim, rope, inv_freq.data());
  for (const double f : inv_freq)
    FUZZ_CHECK(std::isfinite(f) && f > 0);
  std::vector<float> x(config->head_dim, 1.0f);
  const int32_t position = 1000;
  kvc::kernels::cpu::rope(x.data(), &position, /*tokens=*/1, /*heads=*/1, config->head_dim, rope);
  for (const float v : x)
    FUZZ_CHECK(std::isfinite(v));

  const nlohmann::json top = nlohmann::json::parse(text);
  // The fields are read from text_config where a checkpoint nests them there.
  const nlohmann::json& j =
      top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
  const std::pair<const char*, int> fields[] = {
      {"hidden_size", config->hidden_size},
      {"num_hidden_layers", config->num_hidden_layers},
      {"num_attention_heads", config->num_attention_heads},
      {"num_key_value_heads", config->num_key_value_heads},
      {"head_dim", config->head_dim},
      {"intermediate_size", config->intermediate_size},
      {"vocab_size", config->vocab_size},
      {"max_position_embeddings", config->max_position_embeddings}};
  for (const auto& [key, value] : fields) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) FUZZ_CHECK(*it == value);
  }
  return 0;
}
