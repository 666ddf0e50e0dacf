#include "replica/sampler.h"

#include <algorithm>
#include <cmath>

namespace kvc {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

double sample_uniform(uint64_t seed, int32_t sibling, int32_t position) {
  const uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint32_t>(sibling)) ^
                                static_cast<uint32_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

int32_t Sampler::sample(std::span<const float> logits, const SamplingParams& params,
                        int32_t sibling, int32_t position) {
  if (params.temperature <= 0.0f || params.top_k == 1) return argmax(logits);
  // Softmax at temperature, over the candidates that survive top-k and top-p.
  scratch_.clear();
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  for (size_t i = 0; i < logits.size(); ++i) {
    scratch_.emplace_back(std::exp((logits[i] - max_logit) / params.temperature),
                          static_cast<int32_t>(i));
  }
  // Highest probability first; ties by lower token id, so the order is total and deterministic.
  auto by_prob = [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t keep = scratch_.size();
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < keep) {
    keep = static_cast<size_t>(params.top_k);
    std::partial_sort(scratch_.begin(), scratch_.begin() + keep, scratch_.end(), by_prob);
  } else {
    std::sort(scratch_.begin(), scratch_.end(), by_prob);
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += scratch_[i].first;
  if (params.top_p < 1.0f) {
    double mass = 0;
    size_t i = 0;
    while (i < keep) {
      mass += scratch_[i].first;
      ++i;
      if (mass >= params.top_p * total) break;
    }
    keep = i;
    total = mass;
  }
  const double u = sample_uniform(params.seed, sibling, position) * total;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += scratch_[i].first;
    if (u < acc) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;  // rounding left u at the very top
}

}  // namespace kvc
