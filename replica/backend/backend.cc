#include "replica/backend/backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <span>

#include "replica/model/weights.h"

namespace kvc {

void PrefillBatch::add(const PrefillChunk& chunk) {
  tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
  token_indptr.push_back(static_cast<int32_t>(tokens.size()));
  start_pos.push_back(chunk.start_pos);
  block_indices.insert(block_indices.end(), chunk.block_table.begin(), chunk.block_table.end());
  block_indptr.push_back(static_cast<int32_t>(block_indices.size()));
  want_logits.push_back(chunk.want_logits ? 1 : 0);
}

Status Backend::check_weights(const std::string&) const {
  return Error{"the " + name() + " backend has no weights to replace"};
}

Status Backend::check_weights_finite(const std::string& folder) const {
  if (Status s = check_weights(folder); !s.ok()) return s;
  Result<HfFolder> f = open_replacement(folder, config());
  if (!f.ok()) return Error{f.error().message};
  return f->check_finite();
}

Status Backend::load_weights(const std::string& folder) {
  return check_weights(folder);
}

kernels::sampling::SampleParams SampleRequest::params() const {
  kernels::sampling::SampleParams p;
  p.seed = seed;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.sibling = sibling;
  p.position = position;
  p.logprobs = std::clamp(top_logprobs, 0, kernels::sampling::kMaxTopLogprobs) |
               (processed_logprobs ? kernels::sampling::kProcessedLogprobs : 0);
  return p;
}

std::vector<TokenLogprob> top_logprobs_of(const SampleRequest& r, const int32_t* ids,
                                          const float* logprobs) {
  std::vector<TokenLogprob> top;
  const int k = kernels::sampling::top_logprobs(r.params());
  for (int j = 0; j < k && ids[j] >= 0; ++j)
    top.push_back(TokenLogprob{ids[j], logprobs[j]});
  return top;
}

void sample_on_host(const ForwardBatch& batch, std::span<const float> logits, int32_t vocab,
                    std::vector<SampledToken>& out) {
  out.clear();
  const int32_t sample_vocab = batch.sample_vocab > 0 ? std::min(batch.sample_vocab, vocab) : vocab;
  kernels::cpu::SampleScratch scratch;
  int32_t ids[kernels::sampling::kMaxTopLogprobs];
  float lps[kernels::sampling::kMaxTopLogprobs];
  for (const SampleRequest& r : batch.samples) {
    assert(r.logits_row >= 0 && r.logits_row < batch.num_logit_rows());
    const float* row = logits.data() + static_cast<size_t>(r.logits_row) * vocab;
    const kernels::sampling::SampleParams p = r.params();
    const kernels::cpu::SampleResult s = kernels::cpu::sample(row, sample_vocab, p, scratch);
    SampledToken t{s.token, s.logprob, {}};
    const int n = kernels::cpu::top_logprobs(row, sample_vocab, s.norm,
                                             kernels::sampling::top_logprobs(p), ids, lps);
    for (int j = 0; j < n; ++j)
      t.top.push_back(TokenLogprob{ids[j], lps[j]});
    out.push_back(std::move(t));
  }
}

int32_t host_tier_blocks(double gigabytes, double block_bytes) {
  return static_cast<int32_t>(
      std::clamp(std::floor(gigabytes * 1e9 / block_bytes), 0.0, static_cast<double>(1 << 26)));
}

}  // namespace kvc
