#include "replica/core/cascade_planner.h"

#include <algorithm>
#include <map>

namespace kvc {

const char* cascade_reason_name(CascadeReason r) {
  switch (r) {
    case CascadeReason::kPays:
      return "pays";
    case CascadeReason::kDisabled:
      return "disabled";
    case CascadeReason::kPrefixTooShort:
      return "prefix_too_short";
    case CascadeReason::kTooFewSiblings:
      return "too_few_siblings";
    case CascadeReason::kCostModel:
      return "cost_model";
  }
  return "";
}

int32_t CascadeStats::num_levels_kept() const {
  return static_cast<int32_t>(
      std::count_if(decisions.begin(), decisions.end(), [](const auto& d) { return d.kept; }));
}

struct CascadePlanner::Build {
  std::span<const PlannerSeq> seqs;
  std::vector<int32_t> eligible;  // full blocks before each sequence's new token
  std::vector<int32_t> covered;   // leading blocks of each sequence inside kept levels
  kernels::CascadePlan plan;
  CascadeStats* stats;
};

CascadePlanner::CascadePlanner(CascadeConfig config, int32_t block_size, int64_t kv_bytes_per_token)
    : config_(config), block_size_(block_size), kv_bytes_per_token_(kv_bytes_per_token) {}

CascadeReason CascadePlanner::decide(int32_t tokens, int32_t members, int32_t first_block) const {
  if (!config_.enabled) return CascadeReason::kDisabled;
  // A level kept last step only has to clear a lower bar (hysteresis).
  const double bar = kept_last_.contains(first_block) ? 1.0 - config_.hysteresis : 1.0;
  if (members < config_.min_members) return CascadeReason::kTooFewSiblings;
  if (tokens < bar * config_.min_shared_tokens) return CascadeReason::kPrefixTooShort;
  const double saved = static_cast<double>(members - 1) * tokens * kv_bytes_per_token_;
  const double cost =
      config_.pass_overhead_bytes + static_cast<double>(members) * config_.merge_bytes_per_member;
  if (saved < bar * cost) return CascadeReason::kCostModel;
  return CascadeReason::kPays;
}

// `members` share blocks [pending_from, depth) (not yet in a kept level) and have more
// eligible blocks to compare from `depth` on.
void CascadePlanner::build(Build& b, std::vector<int32_t> members, int32_t depth,
                           int32_t pending_from, int32_t level) {
  // Group by the block at `depth`; keep first-appearance order so plans are deterministic.
  std::map<int32_t, std::vector<int32_t>> by_block;
  std::vector<int32_t> order;
  for (int32_t s : members) {
    if (b.eligible[s] <= depth) continue;
    const int32_t block = b.seqs[s].block_table[depth];
    auto [it, fresh] = by_block.try_emplace(block);
    if (fresh) order.push_back(block);
    it->second.push_back(s);
  }
  for (int32_t block : order) {
    std::vector<int32_t>& group = by_block[block];
    if (group.size() < 2) continue;  // a lone sequence keeps the rest in its suffix
    int32_t end = depth + 1;
    while (std::all_of(group.begin(), group.end(), [&](int32_t s) {
      return b.eligible[s] > end && b.seqs[s].block_table[end] == b.seqs[group[0]].block_table[end];
    })) {
      ++end;
    }
    const int32_t from = std::min(pending_from, depth);
    const int32_t tokens = (end - from) * block_size_;
    const int32_t first_block = b.seqs[group[0]].block_table[from];
    const CascadeReason reason = decide(tokens, static_cast<int32_t>(group.size()), first_block);
    const bool keep = reason == CascadeReason::kPays;
    if (b.stats) {
      b.stats->decisions.push_back(LevelDecision{
          level, tokens, static_cast<int32_t>(group.size()),
          static_cast<int64_t>(group.size() - 1) * tokens * kv_bytes_per_token_, keep, reason});
    }
    if (keep) {
      const auto& table = b.seqs[group[0]].block_table;
      b.plan.add_node(std::vector<int32_t>(table.begin() + from, table.begin() + end), group);
      for (int32_t s : group)
        b.covered[s] = end;
      kept_now_.insert(first_block);
      build(b, group, end, end, level + 1);
    } else {
      build(b, group, end, from, level);
    }
  }
}

kernels::CascadePlan CascadePlanner::plan(std::span<const PlannerSeq> seqs, CascadeStats* stats) {
  Build b{seqs, {}, std::vector<int32_t>(seqs.size(), 0), {}, stats};
  if (stats) *stats = CascadeStats{};
  std::vector<int32_t> all(seqs.size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    all[s] = static_cast<int32_t>(s);
    // Only blocks wholly before the new token's position can be shared (the pass is not causal).
    b.eligible.push_back((seqs[s].context_len - 1) / block_size_);
  }
  kept_now_.clear();
  build(b, std::move(all), 0, 0, 0);
  kept_last_.swap(kept_now_);

  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& table = seqs[s].block_table;
    const int32_t used = (seqs[s].context_len + block_size_ - 1) / block_size_;
    b.plan.add_suffix(std::vector<int32_t>(table.begin() + b.covered[s], table.begin() + used),
                      seqs[s].context_len - b.covered[s] * block_size_);
  }
  if (stats) {
    for (const PlannerSeq& s : seqs)
      stats->kv_bytes_flat += s.context_len * kv_bytes_per_token_;
    for (int32_t n = 0; n < b.plan.num_nodes(); ++n) {
      const int32_t blocks = b.plan.node_block_indptr[n + 1] - b.plan.node_block_indptr[n];
      stats->kv_bytes_cascade += int64_t{blocks} * block_size_ * kv_bytes_per_token_;
      stats->kv_bytes_shared += int64_t{blocks} * block_size_ * kv_bytes_per_token_;
    }
    for (int32_t len : b.plan.suffix_len)
      stats->kv_bytes_cascade += len * kv_bytes_per_token_;
  }
  return std::move(b.plan);
}

}  // namespace kvc
