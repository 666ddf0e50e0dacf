// Compiled with -ffp-contract=off (kernels/CMakeLists.txt): the rule's float operations must not
// be fused, or the CPU and CUDA samplers would round differently.
#include "kernels/cpu/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/parallel.h"

namespace kvc::kernels::cpu {
namespace {

using sampling::Cutoff;
using sampling::SampleParams;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct RowStats {
  float max = -kInf;           // largest non-NaN logit
  int32_t argmax = INT32_MAX;  // its lowest id; INT32_MAX when every logit is NaN
  double lse = -std::numeric_limits<double>::infinity();  // log(sum(exp(x))) over non-NaN x
};

RowStats row_stats(const float* x, int vocab) {
  RowStats st;
  for (int32_t i = 0; i < vocab; ++i) {
    if (x[i] == x[i] && sampling::better(x[i], i, st.max, st.argmax)) {
      st.max = x[i];
      st.argmax = i;
    }
  }
  if (st.max == -kInf) return st;
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    if (x[i] == x[i]) sum += std::exp(static_cast<double>(x[i]) - st.max);
  }
  st.lse = st.max + std::log(sum);
  return st;
}

bool is_greedy(const SampleParams& p) {
  return !(p.temperature > 0.0f) || p.top_k == 1;
}

// The candidates' cutoff for a non-greedy row whose largest logit is max_logit.
Cutoff cutoff(const float* x, int vocab, const SampleParams& p, float max_logit,
              SampleScratch& scratch) {
  Cutoff c;
  std::vector<int32_t>& ids = scratch.ids;
  auto before = [x](int32_t a, int32_t b) {
    const uint32_t ka = sampling::order_key(x[a]), kb = sampling::order_key(x[b]);
    return ka > kb || (ka == kb && a < b);
  };
  if (p.top_k > 0 && p.top_k < vocab) {
    ids.resize(vocab);
    std::iota(ids.begin(), ids.end(), 0);
    std::nth_element(ids.begin(), ids.begin() + (p.top_k - 1), ids.end(), before);
    const int32_t last = ids[p.top_k - 1];
    c = {sampling::order_key(x[last]), last};
  }
  if (p.top_p < 1.0f) {
    // Tokens of zero mass sort after every token of positive mass and never reach the target.
    const float inv_t = sampling::inverse_temperature(p.temperature);
    ids.clear();
    uint64_t total = 0;
    for (int32_t i = 0; i < vocab; ++i) {
      if (!sampling::within(sampling::order_key(x[i]), i, c)) continue;
      const uint64_t q = sampling::mass(x[i], max_logit, inv_t);
      if (q == 0) continue;
      ids.push_back(i);
      total += q;
    }
    std::sort(ids.begin(), ids.end(), before);
    const uint64_t target = sampling::top_p_target(p.top_p, total);
    uint64_t cum = 0;
    for (int32_t i : ids) {
      cum += sampling::mass(x[i], max_logit, inv_t);
      if (cum >= target) {
        c = {sampling::order_key(x[i]), i};
        break;
      }
    }
  }
  return c;
}

// Gumbel-max over the tokens within c; INT32_MAX when none is choosable.
int32_t gumbel_argmax(const float* x, int vocab, const SampleParams& p, Cutoff c) {
  const float inv_t = sampling::inverse_temperature(p.temperature);
  const uint64_t key = sampling::row_key(p.seed, p.sibling, p.position);
  float best = -kInf;
  int32_t token = INT32_MAX;
  for (int32_t i = 0; i < vocab; ++i) {
    const float xi = x[i];
    if (xi != xi || !sampling::within(sampling::order_key(xi), i, c)) continue;
    // The noise is at most kGumbelMax: skipping such a token changes nothing, on either side.
    if (sampling::fp::add(sampling::fp::mul(xi, inv_t), sampling::kGumbelMax) < best) continue;
    const float s = sampling::score(xi, inv_t, key, i);
    if (sampling::better(s, i, best, token)) {
      best = s;
      token = i;
    }
  }
  return token;
}

// The normalizer of the row's logprobs (sampling::LogprobNorm), in double.
sampling::LogprobNorm logprob_norm(const float* x, int vocab, const SampleParams& p,
                                   const RowStats& st, Cutoff c) {
  sampling::LogprobNorm n;
  if (!sampling::processed_logprobs(p)) {
    n.lse = static_cast<float>(st.lse);
    return n;
  }
  if (is_greedy(p)) {
    if (st.argmax != INT32_MAX) n.cut = {sampling::order_key(x[st.argmax]), st.argmax};
    n.scale = 0.0f;
    return n;
  }
  n.scale = sampling::inverse_temperature(p.temperature);
  n.cut = c;
  const double top = static_cast<double>(st.max) * n.scale;
  double sum = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    if (x[i] == x[i] && sampling::within(sampling::order_key(x[i]), i, c))
      sum += std::exp(static_cast<double>(x[i]) * n.scale - top);
  }
  n.lse = static_cast<float>(top + std::log(sum));
  return n;
}

}  // namespace

Cutoff candidate_cutoff(const float* logits, int vocab, const SampleParams& params,
                        SampleScratch& scratch) {
  if (is_greedy(params)) return {};
  return cutoff(logits, vocab, params, row_stats(logits, vocab).max, scratch);
}

SampleResult sample(const float* logits, int vocab, const SampleParams& params,
                    SampleScratch& scratch) {
  const RowStats st = row_stats(logits, vocab);
  int32_t token = st.argmax;
  Cutoff c;
  if (!is_greedy(params)) {
    c = cutoff(logits, vocab, params, st.max, scratch);
    token = gumbel_argmax(logits, vocab, params, c);
  }
  if (token == INT32_MAX) token = 0;
  SampleResult r;
  r.token = token;
  r.norm = logprob_norm(logits, vocab, params, st, c);
  r.logprob = sampling::processed_logprobs(params)
                  ? sampling::logprob(r.norm, logits[token], token)
                  : static_cast<float>(static_cast<double>(logits[token]) - st.lse);
  return r;
}

int top_logprobs(const float* logits, int vocab, const sampling::LogprobNorm& norm, int k,
                 int32_t* ids, float* logprobs) {
  k = std::clamp(k, 0, sampling::kMaxTopLogprobs);
  // The k best of the row, kept sorted: k is small, and most tokens lose to the k-th at once.
  int n = 0;
  for (int32_t i = 0; i < vocab && k > 0; ++i) {
    const float x = logits[i];
    if (x != x) continue;
    if (n == k && !sampling::better(x, i, logits[ids[n - 1]], ids[n - 1])) continue;
    int at = n < k ? n++ : n - 1;
    while (at > 0 && sampling::better(x, i, logits[ids[at - 1]], ids[at - 1])) {
      ids[at] = ids[at - 1];
      --at;
    }
    ids[at] = i;
  }
  for (int j = 0; j < n; ++j)
    logprobs[j] = sampling::logprob(norm, logits[ids[j]], ids[j]);
  return n;
}

void sample_rows(const float* logits, int rows, int vocab, int64_t vocab_stride,
                 const SampleParams* params, int32_t* tokens, float* logprobs, int32_t* top_ids,
                 float* top_logprobs_out) {
  constexpr int K = sampling::kMaxTopLogprobs;
  parallel_for(rows, [&](int64_t begin, int64_t end) {
    SampleScratch scratch;
    for (int64_t r = begin; r < end; ++r) {
      const float* row = logits + r * vocab_stride;
      const SampleResult res = sample(row, vocab, params[r], scratch);
      tokens[r] = res.token;
      if (logprobs != nullptr) logprobs[r] = res.logprob;
      if (top_ids == nullptr) continue;
      int32_t* ids = top_ids + r * K;
      float* lps = top_logprobs_out + r * K;
      const int n = top_logprobs(row, vocab, res.norm, sampling::top_logprobs(params[r]), ids, lps);
      for (int j = n; j < K; ++j) {
        ids[j] = -1;
        lps[j] = -std::numeric_limits<float>::infinity();
      }
    }
  });
}

}  // namespace kvc::kernels::cpu
