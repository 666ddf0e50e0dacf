// Runs an engine over requests with logprobs and checks every generated token's logprob and top
// entries against the logits row it was drawn from (the engine's logits observer), recomputed
// in double here: raw (log_softmax over the sampled vocabulary) or processed (log_softmax of
// x / T over the top-k candidates; greedy: a point mass). Shared by the CPU and CUDA backend
// tests: the backends' own sampler twins are not the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "replica/core/engine.h"

namespace kvc::testing {

struct LogprobCheck {
  int tokens = 0;       // generated tokens checked
  int top_entries = 0;  // top entries checked
};

// The order of a row (logit descending, id ascending).
inline std::vector<int32_t> token_order(const std::vector<float>& x) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return ids;
}

// The reference logprob of `id` in row x for a request's parameters (top_p must be 1 here).
inline double reference_logprob(const std::vector<float>& x, int32_t id, const SamplingParams& p,
                                bool processed) {
  const std::vector<int32_t> order = token_order(x);
  if (!processed) {
    double sum = 0;
    for (float v : x)
      sum += std::exp(static_cast<double>(v) - x[order[0]]);
    return x[id] - x[order[0]] - std::log(sum);
  }
  if (!(p.temperature > 0) || p.top_k == 1) return id == order[0] ? 0.0 : -INFINITY;
  const size_t k = p.top_k > 0 ? std::min<size_t>(p.top_k, order.size()) : order.size();
  if (std::find(order.begin(), order.begin() + k, id) == order.begin() + k) return -INFINITY;
  double sum = 0;
  for (size_t i = 0; i < k; ++i)
    sum += std::exp((static_cast<double>(x[order[i]]) - x[order[0]]) / p.temperature);
  return (static_cast<double>(x[id]) - x[order[0]]) / p.temperature - std::log(sum);
}

inline LogprobCheck run_and_check_logprobs(Engine& engine,
                                           const std::vector<GenerationRequest>& requests,
                                           bool processed, double tolerance) {
  std::map<std::tuple<uint64_t, int32_t, int32_t>, std::vector<float>> rows;
  engine.set_logits_observer([&](uint64_t g, int32_t s, int32_t pos, std::span<const float> l) {
    rows[{g, s, pos}].assign(l.begin(), l.end());
  });
  std::map<uint64_t, const GenerationRequest*> by_group;
  for (const GenerationRequest& r : requests) {
    auto id = engine.submit(r);
    EXPECT_TRUE(id.ok());
    if (id.ok()) by_group[*id] = &r;
  }
  std::map<std::pair<uint64_t, int32_t>, int32_t> generated;  // tokens so far per sibling
  LogprobCheck check;
  while (engine.has_work()) {
    StepResult step = engine.step();
    EXPECT_TRUE(step.error.empty()) << step.error;
    if (!step.error.empty()) break;
    for (const SequenceOutput& o : step.outputs) {
      const GenerationRequest& r = *by_group.at(o.group_id);
      const GeneratedToken& t = o.token;
      const int32_t pos =
          static_cast<int32_t>(r.prompt.size()) + generated[{o.group_id, o.sibling}]++;
      const auto row = rows.find({o.group_id, o.sibling, pos});
      EXPECT_NE(row, rows.end()) << "no logits at " << pos;
      if (row == rows.end()) continue;
      const std::vector<float>& x = row->second;
      const double want = reference_logprob(x, t.id, r.params, processed);
      if (std::isinf(want)) {
        EXPECT_TRUE(std::isinf(t.logprob) && t.logprob < 0) << "token " << t.id;
      } else {
        EXPECT_NEAR(t.logprob, want, tolerance) << "token " << t.id << " at " << pos;
      }
      ++check.tokens;
      const std::vector<int32_t> order = token_order(x);
      EXPECT_EQ(t.top.size(), static_cast<size_t>(r.params.logprobs));
      for (size_t j = 0; j < t.top.size(); ++j) {
        EXPECT_EQ(t.top[j].token, order[j]) << "entry " << j << " at " << pos;
        const double w = reference_logprob(x, t.top[j].token, r.params, processed);
        if (std::isinf(w)) {
          EXPECT_TRUE(std::isinf(t.top[j].logprob)) << "entry " << j;
        } else {
          EXPECT_NEAR(t.top[j].logprob, w, tolerance) << "entry " << j << " at " << pos;
        }
        ++check.top_entries;
      }
    }
  }
  return check;
}

}  // namespace kvc::testing
