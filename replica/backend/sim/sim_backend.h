// The simulated backend (`--backend sim`): no math and no KV memory. Each forward takes the time
// the bandwidth model predicts for a GPU (weights + KV bytes read / bandwidth, FLOPs / peak, plus
// a measured per-step overhead), waited out on the injected Clock, and draws deterministic
// tokens. The real engine, scheduler, block pool and prefix cache run around it, so dozens of
// sim replicas on a small machine queue and cache like real ones (fleet-scale routing
// evaluation; docs/architecture.md, "Sim backend").
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "replica/backend/backend.h"
#include "replica/model/bandwidth_model.h"

namespace kvc {

// A model shape on a device: "h200-llama3-8b" (calibrated on bench/results/engine-h200.md),
// "h100-llama3-8b" (the seed's bandwidth, H100 peak, the H200's overhead), "a10g-llama3-8b" (a
// slow GPU: 600 GB/s, 125 TFLOP/s, 24 GB), "cpu-llama3-8b" (a CPU replica's proportions:
// compute-bound rows, a small fixed step cost; sim_backend.cc says how fast).
struct SimPreset {
  std::string name;
  ModelConfig model;
  Hardware hardware;
  double memory_bytes = 0;  // device memory: weights and the KV pool share it
};

Result<SimPreset> sim_preset(std::string_view name);
std::vector<std::string> sim_preset_names();

// KV blocks that fit in `utilization` x memory after the weights (at least 1).
int32_t sim_kv_blocks(const SimPreset& preset, double utilization, int32_t block_size);
// Host tier blocks that `gigabytes` (10^9 bytes) of host memory hold (at least 0).
int32_t sim_host_blocks(const SimPreset& preset, double gigabytes, int32_t block_size);

// One prefill chunk of `len` tokens after `start` cached ones: its rows, its logits row (when
// wanted), the KV it reads (its whole context) and its causal attention FLOPs.
StepWork prefill_chunk_work(const ModelConfig& model, int64_t start, int64_t len, bool logits,
                            int kv_bytes_per_element);

// A step of one prefill chunk (`chunk` tokens after `start` cached ones, with its logits row; none
// when 0) beside decode rows each reading its whole context (no shared prefix): what
// step_work_of counts for such a batch. The KV the decode rows read is decode_context_bytes.
StepWork synthetic_step_work(const ModelConfig& model, int64_t start, int64_t chunk,
                             std::span<const int64_t> decode_contexts, int kv_bytes_per_element);
int64_t decode_context_bytes(const ModelConfig& model, std::span<const int64_t> decode_contexts,
                             int kv_bytes_per_element);

// What a batch moves and computes: rows, logits rows, the KV the plan reads (each shared node
// once, each suffix per sequence), each prefill chunk's context, copy-on-write copies, host
// tier transfers.
StepWork step_work_of(const ForwardBatch& batch, const ModelConfig& model, int32_t block_size,
                      int kv_bytes_per_element);

// The token a sim sibling draws at a position: a pure function of (seed, sibling, position), a
// lower-case letter or a space (never EOS: sim sequences run to max_tokens or a stop string).
int32_t sim_token(uint64_t seed, int32_t sibling, int32_t position);

class SimBackend final : public Backend {
 public:
  // Preconditions: num_blocks > 0, block_size > 0, num_host_blocks >= 0,
  // preset.model.validate() is ok. num_host_blocks: the host tier's slots (no memory: a
  // transfer costs its bytes over Hardware::host_link_bytes_per_s).
  SimBackend(SimPreset preset, int32_t num_blocks, int32_t block_size, Clock& clock,
             int32_t num_host_blocks = 0);

  const ModelConfig& config() const override { return preset_.model; }
  int32_t num_blocks() const override { return num_blocks_; }
  int32_t block_size() const override { return block_size_; }
  int32_t num_host_blocks() const override { return num_host_blocks_; }
  std::string name() const override { return "sim"; }
  int32_t kv_bytes_per_element() const override { return preset_.hardware.kv_bytes_per_element; }
  std::string kv_cache_dtype() const override {
    return preset_.hardware.kv_bytes_per_element == 1 ? "fp8" : "";
  }
  const SimPreset& preset() const { return preset_; }

  // The predicted device time of the batch.
  Clock::Duration predict(const ForwardBatch& batch) const;
  // Waits predict(batch) from the call on the clock, then returns the tokens. Logits, when
  // asked for, are zeros.
  Status forward(const ForwardBatch& batch, ForwardOutput& out) override;
  // The clock waits what the model predicts, so the prediction is the device time: a grid of 123
  // steps (one prefill chunk of 0-512 tokens after 0, 512 or 2,048 cached, beside 0-32 decode
  // rows of 128, 512 or 2,048 tokens of context) around the reference step.
  std::vector<PredictedStep> predicted_steps() const override;

  // Simulated device time so far (sum of predictions), for tests and utilisation; safe to read
  // from another thread than the engine's.
  Clock::Duration busy() const { return Clock::Duration{busy_ns_.load()}; }
  int64_t num_forwards() const { return num_forwards_.load(); }

 private:
  SimPreset preset_;
  int32_t num_blocks_;
  int32_t block_size_;
  Clock& clock_;
  int32_t num_host_blocks_;
  std::atomic<int64_t> busy_ns_{0};
  std::atomic<int64_t> num_forwards_{0};
};

}  // namespace kvc
