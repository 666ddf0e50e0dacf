// Each decode step: the prefix tree of the batch's block tables (shared physical blocks) becomes
// the levels of a cascade, kept only where they pay, and is emitted as a plain-data CascadePlan.
//
// A level (tree node) shares T tokens among m sequences. Cascade reads those T tokens once
// instead of m times, saving (m - 1) x T x kv_bytes_per_token per step; it costs an extra pass
// and a merge per member (cost_model below). Thresholds are flags; a level kept in the previous
// step stays while it clears (1 - hysteresis) x the thresholds, so decisions do not flap.
// A rejected level's blocks are pushed down into its children (or the members' suffixes).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "kernels/cascade_plan.h"

namespace kvc {

struct CascadeConfig {
  bool enabled = true;                   // false: --attention flat (every block in the suffix)
  int32_t min_shared_tokens = 128;       // shorter shared spans are not worth a pass
  int32_t min_members = 2;               // fewer sequences sharing are not worth a pass
  double pass_overhead_bytes = 1 << 20;  // fixed cost of one more pass, as bytes of HBM traffic
  int64_t merge_bytes_per_member = 0;    // bytes a member's partial costs to write, read, merge
  double hysteresis = 0.25;
};

// A decode sequence as the planner sees it.
struct PlannerSeq {
  std::span<const int32_t> block_table;  // physical blocks, position order
  int32_t context_len;                   // tokens attended, including the new one
};

enum class CascadeReason { kPays, kDisabled, kPrefixTooShort, kTooFewSiblings, kCostModel };
inline constexpr int kNumCascadeReasons = 5;
const char* cascade_reason_name(CascadeReason r);  // "pays", "disabled", "prefix_too_short", ...

struct LevelDecision {
  int32_t level;  // depth in the tree of kept levels: 0 = root level
  int32_t shared_tokens;
  int32_t members;
  int64_t bytes_saved;  // (members - 1) x shared_tokens x kv_bytes_per_token
  bool kept;
  CascadeReason reason;
};

struct CascadeStats {
  std::vector<LevelDecision> decisions;  // every candidate level, kept or not
  int64_t kv_bytes_flat = 0;             // what flat attention reads this step
  int64_t kv_bytes_cascade = 0;          // what the emitted plan reads
  int64_t kv_bytes_shared = 0;           // of which in shared levels (read once for all members)
  int32_t num_levels_kept() const;
};

class CascadePlanner {
 public:
  // kv_bytes_per_token: K and V of one token over all layers, in the backend's KV dtype.
  CascadePlanner(CascadeConfig config, int32_t block_size, int64_t kv_bytes_per_token);

  kernels::CascadePlan plan(std::span<const PlannerSeq> seqs, CascadeStats* stats = nullptr);
  const CascadeConfig& config() const { return config_; }

 private:
  struct Build;
  void build(Build& b, std::vector<int32_t> members, int32_t depth, int32_t pending_from,
             int32_t level);
  CascadeReason decide(int32_t tokens, int32_t members, int32_t first_block) const;

  CascadeConfig config_;
  int32_t block_size_;
  int64_t kv_bytes_per_token_;
  std::unordered_set<int32_t> kept_last_;  // first blocks of the levels kept in the last step
  std::unordered_set<int32_t> kept_now_;
};

}  // namespace kvc
