#include "cli/engine_flags.h"

#include "replica/cpu_backend.h"
#include "replica/weights.h"

namespace kvc::cli {

void add_engine_flags(CLI::App& cmd, EngineFlags& f) {
  cmd.add_option("--preset", f.preset, "random-initialised model shape")
      ->check(CLI::IsMember({"tiny", "llama3-8b"}));
  cmd.add_option("--model", f.model_dir, "Hugging Face model folder (config.json + *.safetensors)")
      ->check(CLI::ExistingDirectory);
  cmd.add_option("--weights-seed", f.weights_seed, "seed of the random-initialised weights");
  cmd.add_option("--kv-blocks", f.kv_blocks, "KV cache blocks in the pool")
      ->check(CLI::Range(1, 1 << 24));
  cmd.add_option("--block-size", f.block_size, "tokens per KV block")->check(CLI::Range(1, 1024));
  cmd.add_option("--attention", f.attention, "cascade, or flat (bit-reproducible)")
      ->check(CLI::IsMember({"cascade", "flat"}));
  auto& s = f.engine.scheduler;
  cmd.add_option("--max-num-seqs", s.max_num_seqs, "sequences running at once")
      ->check(CLI::Range(1, 1 << 16));
  cmd.add_option("--max-tokens-per-step", s.max_tokens_per_step, "token budget of one step")
      ->check(CLI::Range(1, 1 << 20));
  auto& c = f.engine.cascade;
  cmd.add_option("--cascade-min-shared-tokens", c.min_shared_tokens,
                 "shortest shared span worth a cascade level")
      ->check(CLI::Range(0, 1 << 24));
  cmd.add_option("--cascade-min-siblings", c.min_members,
                 "fewest sequences sharing a span worth a cascade level")
      ->check(CLI::Range(2, 1 << 20));
  cmd.add_option("--cascade-pass-overhead-bytes", c.pass_overhead_bytes,
                 "fixed cost of one more attention pass, in bytes of KV traffic")
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--cascade-hysteresis", c.hysteresis,
                 "a kept level stays while it clears (1 - h) x the thresholds")
      ->check(CLI::Range(0.0, 1.0));
}

Result<std::unique_ptr<Backend>> make_backend(const EngineFlags& f) {
  ModelWeights weights;
  if (!f.model_dir.empty()) {
    auto loaded = load_hf_weights(f.model_dir);
    if (!loaded.ok()) return Error{loaded.error().message};
    weights = std::move(loaded).value();
  } else {
    auto config = preset_config(f.preset);
    if (!config.ok()) return Error{config.error().message};
    if (f.preset != "tiny") {
      return Error{"the CPU backend runs only the tiny preset (llama3-8b is for the GPU)"};
    }
    weights = random_weights(*config, f.weights_seed);
  }
  return std::unique_ptr<Backend>(
      std::make_unique<CpuBackend>(std::move(weights), f.kv_blocks, f.block_size));
}

EngineConfig engine_config(const EngineFlags& f, const Backend& backend) {
  EngineConfig c = f.engine;
  c.cascade.enabled = f.attention == "cascade";
  c.scheduler.max_model_len = backend.config().max_position_embeddings;
  // A member's partial (O in fp32 + LSE) is written, read back and merged: per layer.
  const ModelConfig& m = backend.config();
  c.cascade.merge_bytes_per_member =
      int64_t{3} * m.num_hidden_layers * m.num_attention_heads * (m.head_dim + 1) * 4;
  return c;
}

}  // namespace kvc::cli
