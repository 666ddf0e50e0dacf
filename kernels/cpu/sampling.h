// Token sampling on the CPU: the reference twin of kernels/cuda/sampling.h. The rule (greedy,
// temperature, top-k, top-p, Gumbel-max noise from (seed, sibling, position, token)) is
// kernels/sampling_rule.h; both samplers pick the same token from the same logits.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/sampling_rule.h"

namespace kvc::kernels::cpu {

struct SampleResult {
  int32_t token = 0;
  // The token's logprob: log_softmax of the raw logits, or with kProcessedLogprobs of the
  // distribution it was drawn from (sampling::LogprobNorm).
  float logprob = 0;
  sampling::LogprobNorm norm;  // how the row's other logprobs are read (top_logprobs)
};

// Buffers sample() reuses between calls (top-k / top-p candidates).
struct SampleScratch {
  std::vector<int32_t> ids;
};

// One row. logits: [vocab], float32; vocab >= 1.
SampleResult sample(const float* logits, int vocab, const sampling::SampleParams& params,
                    SampleScratch& scratch);

// The k (<= kMaxTopLogprobs) first tokens of the row in the token order (logit descending, id
// ascending; NaN never), with their logprobs under `norm`: ids[i], logprobs[i]. Returns how many
// were written (fewer than k only when the row has fewer non-NaN logits).
int top_logprobs(const float* logits, int vocab, const sampling::LogprobNorm& norm, int k,
                 int32_t* ids, float* logprobs);

// The last token the rule keeps as a candidate, in the token order (the default Cutoff when
// neither top-k nor top-p cuts). For tests: every sampled token must lie within it.
sampling::Cutoff candidate_cutoff(const float* logits, int vocab,
                                  const sampling::SampleParams& params, SampleScratch& scratch);

// Every row, threaded over rows. logits: [rows, vocab_stride], the first vocab of each row
// sampleable; params, tokens: [rows]; logprobs: [rows] or null. top_ids, top_logprobs:
// [rows, kMaxTopLogprobs] or null: each row's top_logprobs(params) first tokens, the rest of
// its entries -1 and -inf.
void sample_rows(const float* logits, int rows, int vocab, int64_t vocab_stride,
                 const sampling::SampleParams* params, int32_t* tokens, float* logprobs,
                 int32_t* top_ids = nullptr, float* top_logprobs = nullptr);

}  // namespace kvc::kernels::cpu
