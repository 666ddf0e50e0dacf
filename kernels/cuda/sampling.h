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
// chosen token's logprob (raw, or processed with kProcessedLogprobs); norms: [rows] or null,
// each row's sampling::LogprobNorm (what top_logprobs reads). All device pointers. Allocates
// nothing. Precondition: 1 <= vocab <= vocab_stride.
cudaError_t sample(const float* logits, int rows, int vocab, int64_t vocab_stride,
                   const sampling::SampleParams* params, int32_t* tokens, float* logprobs,
                   sampling::LogprobNorm* norms, cudaStream_t stream = nullptr);

// Each row's sampling::top_logprobs(params) first tokens in the token order, with their logprobs
// under the row's norm (from sample): ids, logprobs [rows, kMaxTopLogprobs], the entries past a
// row's count -1 and -inf. max_k: at least every row's count (the kernel keeps that many per
// thread: k <= 5 is cheaper). One CTA per row; a row asking for none only writes its defaults.
// The CUDA twin of kernels/cpu/sampling.h top_logprobs.
cudaError_t top_logprobs(const float* logits, int rows, int vocab, int64_t vocab_stride,
                         const sampling::SampleParams* params, const sampling::LogprobNorm* norms,
                         int32_t* ids, float* logprobs, int max_k = sampling::kMaxTopLogprobs,
                         cudaStream_t stream = nullptr);

}  // namespace kvc::kernels::cuda
