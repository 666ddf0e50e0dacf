#include "replica/backend/backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <span>

namespace kvc {

void PrefillBatch::add(const PrefillChunk& chunk) {
  tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
  token_indptr.push_back(static_cast<int32_t>(tokens.size()));
  start_pos.push_back(chunk.start_pos);
  block_indices.insert(block_indices.end(), chunk.block_table.begin(), chunk.block_table.end());
  block_indptr.push_back(static_cast<int32_t>(block_indices.size()));
  want_logits.push_back(chunk.want_logits ? 1 : 0);
}

float log_softmax_at(std::span<const float> logits, int32_t token) {
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits)
    sum += std::exp(static_cast<double>(l) - max_logit);
  return static_cast<float>(logits[token] - max_logit - std::log(sum));
}

void sample_on_host(const ForwardBatch& batch, std::span<const float> logits, int32_t vocab,
                    Sampler& sampler, std::vector<SampledToken>& out) {
  out.clear();
  const int32_t sample_vocab = batch.sample_vocab > 0 ? std::min(batch.sample_vocab, vocab) : vocab;
  for (const SampleRequest& r : batch.samples) {
    assert(r.logits_row >= 0 && r.logits_row < batch.num_logit_rows());
    const std::span<const float> row = logits.subspan(static_cast<size_t>(r.logits_row) * vocab,
                                                      static_cast<size_t>(sample_vocab));
    SamplingParams params;
    params.temperature = r.temperature;
    params.top_k = r.top_k;
    params.top_p = r.top_p;
    params.seed = r.seed;
    const int32_t token = sampler.sample(row, params, r.sibling, r.position);
    out.push_back(SampledToken{token, log_softmax_at(row, token)});
  }
}

}  // namespace kvc
