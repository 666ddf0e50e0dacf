#include "replica/backend/backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <span>
#include <string>
#include <vector>

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

Status check_forward_batch(const ForwardBatch& batch, int32_t num_blocks, int32_t block_size,
                           int32_t vocab_size) {
  const int64_t bs = block_size;
  auto valid_block = [&](int32_t b) { return b >= 0 && b < num_blocks; };
  auto valid_token = [&](int32_t t) { return t >= 0 && t < vocab_size; };
  auto refuse = [](const std::string& what) { return Error{"forward: invalid batch: " + what}; };
  // Offsets from 0, in order, ending at the end of the indices they point into (the kernels walk
  // every index, not only those inside the spans).
  auto valid_span = [](const std::vector<int32_t>& indptr, size_t size) {
    if (indptr.empty() || indptr.front() != 0 || static_cast<size_t>(indptr.back()) != size) {
      return false;
    }
    return std::is_sorted(indptr.begin(), indptr.end());
  };
  const PrefillBatch& p = batch.prefill;
  if (static_cast<int32_t>(p.token_indptr.size()) != p.num_chunks() + 1 ||
      static_cast<int32_t>(p.block_indptr.size()) != p.num_chunks() + 1 ||
      static_cast<int32_t>(p.want_logits.size()) != p.num_chunks() ||
      !valid_span(p.token_indptr, p.tokens.size()) ||
      !valid_span(p.block_indptr, p.block_indices.size())) {
    return refuse("prefill index arrays do not match its chunks");
  }
  for (int32_t c = 0; c < p.num_chunks(); ++c) {
    const int64_t end = p.start_pos[c] + int64_t{p.chunk_tokens(c)};
    if (p.chunk_tokens(c) <= 0 || p.start_pos[c] < 0) {
      return refuse("prefill chunk " + std::to_string(c) + " is empty or starts before 0");
    }
    if (int64_t{p.chunk_num_blocks(c)} * bs < end) {
      return refuse("prefill chunk " + std::to_string(c) + " has too few blocks");
    }
    for (int64_t i = 0; i < (end + bs - 1) / bs; ++i) {
      if (!valid_block(p.chunk_blocks(c)[i])) {
        return refuse("prefill chunk " + std::to_string(c) + " names a block past the cache");
      }
    }
  }
  if (!std::all_of(p.tokens.begin(), p.tokens.end(), valid_token)) {
    return refuse("a prefill token is outside the vocabulary");
  }
  const int32_t logit_rows = batch.num_logit_rows();
  for (const SampleRequest& r : batch.samples) {
    if (r.logits_row < 0 || r.logits_row >= logit_rows) {
      return refuse("a sample reads a logits row the step does not compute");
    }
  }
  const DecodeBatch& d = batch.decode;
  const kernels::CascadePlan& plan = d.plan;
  if (d.positions.size() != d.tokens.size() || d.slots.size() != d.tokens.size()) {
    return refuse("decode tokens, positions and slots differ in number");
  }
  if (!std::all_of(d.tokens.begin(), d.tokens.end(), valid_token)) {
    return refuse("a decode token is outside the vocabulary");
  }
  if (d.size() == 0) return Status::Ok();
  if (plan.num_seqs != d.size() || static_cast<int32_t>(plan.suffix_len.size()) != d.size() ||
      static_cast<int32_t>(plan.suffix_block_indptr.size()) != d.size() + 1 ||
      static_cast<int32_t>(plan.node_seq_indptr.size()) != plan.num_nodes() + 1) {
    return refuse("the decode plan does not match the batch");
  }
  if (!std::all_of(plan.node_block_indices.begin(), plan.node_block_indices.end(), valid_block) ||
      !std::all_of(plan.suffix_block_indices.begin(), plan.suffix_block_indices.end(),
                   valid_block)) {
    return refuse("the decode plan names a block past the cache");
  }
  if (!valid_span(plan.node_block_indptr, plan.node_block_indices.size()) ||
      !valid_span(plan.node_seq_indptr, plan.node_seq_indices.size()) ||
      !valid_span(plan.suffix_block_indptr, plan.suffix_block_indices.size())) {
    return refuse("the decode plan's offsets are out of order or past its indices");
  }
  // Each sequence attends exactly positions [0, position], the new token last, in its suffix.
  std::vector<int64_t> context(d.size(), 0);
  for (int n = 0; n < plan.num_nodes(); ++n) {
    const int64_t tokens = (plan.node_block_indptr[n + 1] - plan.node_block_indptr[n]) * bs;
    for (int32_t i = plan.node_seq_indptr[n]; i < plan.node_seq_indptr[n + 1]; ++i) {
      if (plan.node_seq_indices[i] < 0 || plan.node_seq_indices[i] >= d.size()) {
        return refuse("a shared prefix names a sequence the batch does not have");
      }
      context[plan.node_seq_indices[i]] += tokens;
    }
  }
  for (int32_t s = 0; s < d.size(); ++s) {
    const int32_t first = plan.suffix_block_indptr[s];
    const int64_t len = plan.suffix_len[s];
    const int64_t last = len - 1;
    if (len < 1 || len > (plan.suffix_block_indptr[s + 1] - first) * bs ||
        context[s] + len != int64_t{d.positions[s]} + 1 ||
        d.slots[s] != plan.suffix_block_indices[first + last / bs] * bs + last % bs) {
      return refuse("decode sequence " + std::to_string(s) +
                    "'s suffix, position and slot disagree");
    }
  }
  return Status::Ok();
}

int32_t host_tier_blocks(double gigabytes, double block_bytes) {
  return static_cast<int32_t>(
      std::clamp(std::floor(gigabytes * 1e9 / block_bytes), 0.0, static_cast<double>(1 << 26)));
}

}  // namespace kvc
