// Token sampling on the device: one CTA per row over the full vocabulary, no host round trip.
// The CUDA twin of kernels/cpu/sampling.h: the rule is kernels/sampling_rule.h (greedy,
// temperature, top-k, top-p, Gumbel-max with noise from (seed, sibling, position, token)) and
// both pick the same token from the same logits.
//
// Cost: greedy and plain temperature rows read their logits once (argmax, log-sum-exp and the
// Gumbel race in one pass). Top-k / top-p rows then find their cutoff by radix select over the
// order key (8 bits a pass, integer histograms: deterministic), moving the surviving candidates
// into shared memory as soon as at most 4096 remain, and run the race over the candidates.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/sampling_rule.h"

namespace kvc::kernels::cuda {

// logits: [rows, vocab_stride] fp32, the first vocab of each row sampleable (finite or -inf; NaN
// is never chosen); params: [rows]; tokens: [rows] int32; logprobs: [rows] fp32 or null, the
// chosen token's log_softmax of the raw logits. All device pointers. Allocates nothing.
// Precondition: 1 <= vocab <= vocab_stride.
cudaError_t sample(const float* logits, int rows, int vocab, int64_t vocab_stride,
                   const sampling::SampleParams* params, int32_t* tokens, float* logprobs,
                   cudaStream_t stream = nullptr);

}  // namespace kvc::kernels::cuda
