// parse_model_config on arbitrary config.json text. A config it accepts must be one the engine
// can size itself from: validate() passes, and the derived sizes (parameters, KV bytes per token,
// GQA group) are computed without overflow (UBSan checks the arithmetic).
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_input.h"
#include "replica/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kvc::Result<kvc::ModelConfig> config = kvc::parse_model_config(text, "fuzz");
  if (!config.ok()) return 0;
  FUZZ_CHECK(config->validate().ok());
  FUZZ_CHECK(config->num_parameters() > 0);
  FUZZ_CHECK(config->kv_bytes_per_token(2) > 0);
  FUZZ_CHECK(config->gqa_group() >= 1);
  return 0;
}
