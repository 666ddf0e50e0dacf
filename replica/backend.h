// What the engine asks of a backend: run the model over one mixed batch of prefill chunks and
// decode tokens against the paged KV cache, and return logits. The CPU backend implements it on
// kernels/cpu; the CUDA backend on kernels/cuda. The scheduler never sees a backend's memory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cascade_plan.h"
#include "prefix_index/status.h"
#include "replica/model_config.h"

namespace kvc {

// A run of one sequence's prompt (or of tokens being recomputed after preemption).
struct PrefillChunk {
  std::vector<int32_t> tokens;  // token ids at positions [start_pos, start_pos + tokens.size())
  int32_t start_pos = 0;
  // Blocks covering positions [0, start_pos + tokens.size()): position p lives in block
  // block_table[p / block_size] at slot p % block_size. KV of [0, start_pos) is already there.
  std::vector<int32_t> block_table;
  bool want_logits = false;  // logits of the chunk's last token (the prompt is complete)
};

// One new token for each of a set of sequences.
struct DecodeBatch {
  std::vector<int32_t> tokens;     // the token fed to each sequence
  std::vector<int32_t> positions;  // its position
  std::vector<int32_t> slots;      // where its KV goes: block_id * block_size + offset
  // Attention of each sequence over its context including the new token's slot; flat or cascade.
  kernels::CascadePlan plan;
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

struct ForwardBatch {
  // Copy-on-write: (src, dst) block pairs to copy, in every layer, before anything else.
  std::vector<std::pair<int32_t, int32_t>> block_copies;
  std::vector<PrefillChunk> prefill;
  DecodeBatch decode;

  // Rows of the logits output: chunks with want_logits, in order, then every decode sequence.
  int32_t num_logit_rows() const {
    int32_t n = decode.size();
    for (const auto& c : prefill)
      n += c.want_logits ? 1 : 0;
    return n;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const ModelConfig& config() const = 0;
  virtual int32_t num_blocks() const = 0;
  virtual int32_t block_size() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda"
  // logits: resized to [batch.num_logit_rows(), vocab_size], float32. An error (a failed launch,
  // device memory exhausted) leaves the KV of this batch's sequences undefined: the engine ends
  // them. Block copies are applied in order, before any KV write.
  virtual Status forward(const ForwardBatch& batch, std::vector<float>& logits) = 0;
};

}  // namespace kvc
