#include "replica/backend/sampler.h"

#include "kernels/sampling_rule.h"

namespace kvc {

double sample_uniform(uint64_t seed, int32_t sibling, int32_t position) {
  const uint64_t h = kernels::sampling::row_key(seed, sibling, position);
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& params,
                        int32_t sibling, int32_t position) {
  kernels::sampling::SampleParams p;
  p.seed = params.seed;
  p.temperature = params.temperature;
  p.top_k = params.top_k;
  p.top_p = params.top_p;
  p.sibling = sibling;
  p.position = position;
  return kernels::cpu::sample(logits.data(), static_cast<int>(logits.size()), p, scratch_).token;
}

}  // namespace kvc
