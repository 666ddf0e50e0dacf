#include "replica/core/cascade_planner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvc {
namespace {

using ::testing::ElementsAre;

constexpr int32_t kBlock = 4;
constexpr int64_t kBytesPerToken = 1000;

CascadeConfig loose() {
  CascadeConfig c;
  c.min_shared_tokens = 1;
  c.pass_overhead_bytes = 0;
  return c;
}

// Tables as the engine would have them: siblings share prompt blocks, own the rest.
struct Batch {
  std::vector<std::vector<int32_t>> tables;
  std::vector<int32_t> lens;
  std::vector<PlannerSeq> seqs() const {
    std::vector<PlannerSeq> out;
    for (size_t i = 0; i < tables.size(); ++i)
      out.push_back({tables[i], lens[i]});
    return out;
  }
};

TEST(CascadePlanner, TwoGroupsBecomeTwoNodesAndPrivateSuffixes) {
  // Group A (seqs 0,1) shares blocks 10 11; group B (seq 2, 3) shares 20. Position 9 (len 10)
  // sits in block index 2, so only blocks 0 and 1 are eligible.
  Batch b{{{10, 11, 30}, {10, 11, 31}, {20, 32, 33}, {20, 34}}, {10, 10, 10, 6}};
  CascadePlanner planner(loose(), kBlock, kBytesPerToken);
  CascadeStats stats;
  const kernels::CascadePlan plan = planner.plan(b.seqs(), &stats);
  ASSERT_EQ(plan.num_nodes(), 2);
  EXPECT_THAT(plan.node_block_indices, ElementsAre(10, 11, 20));
  EXPECT_THAT(plan.node_block_indptr, ElementsAre(0, 2, 3));
  EXPECT_THAT(plan.node_seq_indices, ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(plan.suffix_len, ElementsAre(2, 2, 6, 2));
  EXPECT_THAT(plan.suffix_block_indices, ElementsAre(30, 31, 32, 33, 34));
  EXPECT_EQ(stats.num_levels_kept(), 2);
  EXPECT_EQ(stats.kv_bytes_flat, 36 * kBytesPerToken);
  EXPECT_EQ(stats.kv_bytes_cascade, (8 + 4 + 2 + 2 + 6 + 2) * kBytesPerToken);
}

TEST(CascadePlanner, NestedLevelsSystemPromptDocumentSamples) {
  // Block 1 shared by all four; block 2 by seqs 0,1 and block 3 by seqs 2,3.
  Batch b{{{1, 2, 40}, {1, 2, 41}, {1, 3, 42}, {1, 3, 43}}, {9, 9, 9, 9}};
  CascadePlanner planner(loose(), kBlock, kBytesPerToken);
  CascadeStats stats;
  const auto plan = planner.plan(b.seqs(), &stats);
  ASSERT_EQ(plan.num_nodes(), 3);
  EXPECT_THAT(plan.node_block_indices, ElementsAre(1, 2, 3));
  EXPECT_THAT(plan.node_seq_indices, ElementsAre(0, 1, 2, 3, 0, 1, 2, 3));
  EXPECT_THAT(plan.node_seq_indptr, ElementsAre(0, 4, 6, 8));
  ASSERT_EQ(stats.decisions.size(), 3u);
  EXPECT_EQ(stats.decisions[0].level, 0);
  EXPECT_EQ(stats.decisions[1].level, 1);
  EXPECT_EQ(stats.decisions[1].members, 2);
}

TEST(CascadePlanner, RejectedParentIsPushedIntoItsChildren) {
  // Block 1 is shared by 3 sequences, block 2 by two of them. The 3-member level (block 1 only)
  // is too short, so its block moves down into the 2-member level, which then spans blocks 1-2.
  Batch b{{{1, 2, 50}, {1, 2, 51}, {1, 60}}, {9, 9, 5}};
  CascadeConfig c = loose();
  c.min_shared_tokens = 8;  // block 1 alone (4 tokens) is too short
  CascadePlanner planner(c, kBlock, kBytesPerToken);
  CascadeStats stats;
  const auto plan = planner.plan(b.seqs(), &stats);
  // Level {1} x3 rejected (too short); pushed down, {1,2} x2 has 8 tokens and pays.
  ASSERT_EQ(plan.num_nodes(), 1);
  EXPECT_THAT(plan.node_block_indices, ElementsAre(1, 2));
  EXPECT_THAT(plan.node_seq_indices, ElementsAre(0, 1));
  EXPECT_THAT(plan.suffix_len, ElementsAre(1, 1, 5));
  ASSERT_EQ(stats.decisions.size(), 2u);
  EXPECT_EQ(stats.decisions[0].reason, CascadeReason::kPrefixTooShort);
  EXPECT_TRUE(stats.decisions[1].kept);
}

TEST(CascadePlanner, PartialAndCurrentBlocksAreNeverShared) {
  // Two siblings still sharing their partial prompt block 7 (len 6: position 5 in block 1).
  Batch b{{{5, 7}, {5, 7}}, {6, 6}};
  CascadePlanner planner(loose(), kBlock, kBytesPerToken);
  const auto plan = planner.plan(b.seqs());
  EXPECT_THAT(plan.node_block_indices, ElementsAre(5));
  EXPECT_THAT(plan.suffix_block_indices, ElementsAre(7, 7));
  EXPECT_THAT(plan.suffix_len, ElementsAre(2, 2));
}

TEST(CascadePlanner, FlatModeRecordsDisabledDecisions) {
  Batch b{{{1, 2, 3}, {1, 2, 4}}, {12, 12}};
  CascadeConfig c = loose();
  c.enabled = false;
  CascadePlanner planner(c, kBlock, kBytesPerToken);
  CascadeStats stats;
  const auto plan = planner.plan(b.seqs(), &stats);
  EXPECT_EQ(plan.num_nodes(), 0);
  EXPECT_THAT(plan.suffix_len, ElementsAre(12, 12));
  ASSERT_EQ(stats.decisions.size(), 1u);
  EXPECT_EQ(stats.decisions[0].reason, CascadeReason::kDisabled);
  EXPECT_EQ(stats.kv_bytes_flat, stats.kv_bytes_cascade);
}

TEST(CascadePlanner, CostModelWithHysteresis) {
  // Two members sharing 8 tokens save 1 x 8 x 1000 = 8000 bytes.
  Batch b{{{1, 2, 3}, {1, 2, 4}}, {12, 12}};
  CascadeConfig c = loose();
  c.pass_overhead_bytes = 9000;  // the level costs more than it saves
  c.hysteresis = 0.25;
  CascadePlanner planner(c, kBlock, kBytesPerToken);
  CascadeStats stats;
  EXPECT_EQ(planner.plan(b.seqs(), &stats).num_nodes(), 0);
  EXPECT_EQ(stats.decisions[0].reason, CascadeReason::kCostModel);

  c.pass_overhead_bytes = 7000;  // pays
  CascadePlanner sticky(c, kBlock, kBytesPerToken);
  EXPECT_EQ(sticky.plan(b.seqs()).num_nodes(), 1);
  // Hysteresis: a level kept in the last step only has to clear 75% of the bar.
  CascadeConfig c3 = loose();
  c3.min_shared_tokens = 10;  // 8 tokens: too short for a new level...
  CascadePlanner planner3(c3, kBlock, kBytesPerToken);
  Batch longer{{{1, 2, 3, 9}, {1, 2, 3, 8}}, {16, 16}};  // 12 shared tokens: taken
  EXPECT_EQ(planner3.plan(longer.seqs()).num_nodes(), 1);
  // ...but the level that starts at block 1 was kept, so 8 >= 0.75 x 10 keeps it.
  EXPECT_EQ(planner3.plan(b.seqs()).num_nodes(), 1);
  CascadePlanner planner4(c3, kBlock, kBytesPerToken);
  EXPECT_EQ(planner4.plan(b.seqs()).num_nodes(), 0);
}

TEST(CascadePlanner, TooFewSiblings) {
  Batch b{{{1, 2, 3}, {1, 2, 4}}, {12, 12}};
  CascadeConfig c = loose();
  c.min_members = 3;
  CascadePlanner planner(c, kBlock, kBytesPerToken);
  CascadeStats stats;
  EXPECT_EQ(planner.plan(b.seqs(), &stats).num_nodes(), 0);
  EXPECT_EQ(stats.decisions[0].reason, CascadeReason::kTooFewSiblings);
}

}  // namespace
}  // namespace kvc
