// Token sampling: greedy, temperature, top-k, top-p. Randomness is a pure function of
// (seed, sibling index, position), so a sibling draws the same tokens however batches are formed
// and after a preemption is recomputed: same seed, same output. The rule is
// kernels/sampling_rule.h (Gumbel-max over the top-k / top-p candidates), the same on the CPU
// (kernels/cpu/sampling.h, used here) and on the device (kernels/cuda/sampling.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/sampling.h"

namespace kvc {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest token id on ties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 0;
  int32_t max_tokens = 16;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any of these
  std::vector<int32_t> stop_token_ids;  // ...and at any of these tokens, as at EOS
  bool ignore_eos = false;
  // -1: no logprobs; k in 0-20: each generated token's logprob and the k most likely tokens'.
  int32_t logprobs = -1;
  // The text (vLLM's extensions): a matched stop string kept at its end; special tokens' text
  // (Tokenizer::token_bytes) instead of nothing. EOS and stop_token_ids never add text.
  bool include_stop_str = false;
  bool skip_special_tokens = true;
  // Nothing but max_tokens ends a sample (no EOS, stop string or stop id applies): its length
  // is certain.
  bool runs_to_max_tokens() const { return ignore_eos && stop.empty() && stop_token_ids.empty(); }
};

// A uniform draw in [0, 1) for sibling `sibling` at token position `position` (from the same
// per-row key as the sampler's noise; the sampler itself draws one value per token).
double sample_uniform(uint64_t seed, int32_t sibling, int32_t position);

class Sampler {
 public:
  // logits: [vocab], float32, vocab >= 1. Returns the chosen token id.
  int32_t sample(std::span<const float> logits, const SamplingParams& params, int32_t sibling,
                 int32_t position);

 private:
  kernels::cpu::SampleScratch scratch_;
};

}  // namespace kvc
