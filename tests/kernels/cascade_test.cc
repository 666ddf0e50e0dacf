// cascade_decode and cascade_node_pass against dense float64 attention, and routes that must agree:
// cascade == flat paged_decode, a tree == the same batch as one level, no nodes == flat bit for
// bit.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kernels/cpu/attention.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels::cpu {
namespace {

using testutil::kNaN;
using testutil::kTol;
using testutil::make_shape;
using testutil::Output;
using testutil::PagedKv;
using testutil::random_queries;
using testutil::rel_l2;
using testutil::TreeBatch;

constexpr double kRouteTol = 1e-5;  // two float32 routes, relative L2

std::vector<int32_t> iota(int first, int last) {  // [first, last)
  std::vector<int32_t> v(last - first);
  std::iota(v.begin(), v.end(), first);
  return v;
}

bool bit_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A plan against dense attention over the batch's block tables, and against flat paged decode.
void check_plan(const PagedKv& kv, const TreeBatch& batch, const CascadePlan& plan,
                const std::vector<float>& q) {
  const Output cascade = testutil::run_cascade(kv, q, plan);
  const Output flat = testutil::run_flat(kv, q, batch);
  testutil::expect_matches(cascade, testutil::dense_decode(kv, q, batch.tables(), batch.lens()));
  EXPECT_LT(rel_l2(cascade.out, flat.out), kRouteTol);
  EXPECT_LT(rel_l2(cascade.lse, flat.lse), kRouteTol);
}

// Root node of 2 blocks over 9 sequences, then children of unequal size: {0}, {1..5}, {6, 7};
// sequence 8 has the root only. Suffix lengths include 0, 1 and odd ones.
TreeBatch two_level_batch(PagedKv& kv) {
  TreeBatch batch(kv, 9);
  batch.share(iota(0, 9), 2);
  batch.share({0}, 1);
  batch.share(iota(1, 6), 3);
  batch.share({6, 7}, 2);
  batch.add_suffixes({3, 0, 1, 17, 9, 33, 1, 0, 5});
  return batch;
}

TEST(CascadeDecode, OneLevelAcrossShapes) {
  std::mt19937 rng(30);
  for (const testutil::ShapeCase& c : testutil::kShapeSweep) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << c.head_dim << " group " << c.group);
    const AttentionShape sh = make_shape(c.head_dim, c.group);
    PagedKv kv(sh, 40, rng);
    TreeBatch batch(kv, 6);
    batch.share(iota(0, 6), 3);
    batch.add_suffixes({0, 1, 7, 16, 23, 40});
    check_plan(kv, batch, batch.plan(), random_queries(rng, sh, 6));
  }
}

TEST(CascadeDecode, TwoLevelsUnequalGroupsAcrossShapes) {
  std::mt19937 rng(31);
  for (const testutil::ShapeCase& c : testutil::kShapeSweep) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << c.head_dim << " group " << c.group);
    const AttentionShape sh = make_shape(c.head_dim, c.group);
    PagedKv kv(sh, 64, rng);
    const TreeBatch batch = two_level_batch(kv);
    check_plan(kv, batch, batch.plan(), random_queries(rng, sh, batch.num_seqs()));
  }
}

// Root over all 12; {0..6} and {7..11} below it; then {0, 1, 2}, {3..6} and {7, 8}; 9..11 stop at
// the second level.
TEST(CascadeDecode, ThreeLevelsAcrossShapes) {
  std::mt19937 rng(32);
  for (const testutil::ShapeCase& c : testutil::kShapeSweep) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << c.head_dim << " group " << c.group);
    const AttentionShape sh = make_shape(c.head_dim, c.group);
    PagedKv kv(sh, 64, rng);
    TreeBatch batch(kv, 12);
    batch.share(iota(0, 12), 2);
    batch.share(iota(0, 7), 2);
    batch.share(iota(7, 12), 1);
    batch.share({0, 1, 2}, 1);
    batch.share(iota(3, 7), 2);
    batch.share({7, 8}, 1);
    batch.add_suffixes({1, 2, 3, 0, 5, 19, 1, 7, 11, 13, 0, 16});
    check_plan(kv, batch, batch.plan(), random_queries(rng, sh, batch.num_seqs()));
  }
}

TEST(CascadeDecode, AllSuffixesEmptyOrOneToken) {
  std::mt19937 rng(33);
  const AttentionShape sh = make_shape(128, 4);
  for (int suffix : {0, 1}) {
    SCOPED_TRACE(::testing::Message() << "suffix " << suffix);
    PagedKv kv(sh, 24, rng);
    TreeBatch batch(kv, 5);
    batch.share(iota(0, 5), 3);
    batch.share({1, 3}, 2);
    batch.add_suffixes(std::vector<int32_t>(5, suffix));
    check_plan(kv, batch, batch.plan(), random_queries(rng, sh, 5));
  }
}

TEST(CascadeDecode, OneSibling) {
  std::mt19937 rng(34);
  const AttentionShape sh = make_shape(64, 8);
  PagedKv kv(sh, 16, rng);
  TreeBatch batch(kv, 1);
  batch.share({0}, 4);
  batch.add_suffixes({9});
  check_plan(kv, batch, batch.plan(), random_queries(rng, sh, 1));
}

// 200 siblings: the stacked query matrix spans several row tiles per KV head.
TEST(CascadeDecode, ManySiblings) {
  std::mt19937 rng(35);
  const AttentionShape sh = make_shape(64, 4);
  const int n = 200;
  PagedKv kv(sh, 8 + 3 * n, rng);
  TreeBatch batch(kv, n);
  batch.share(iota(0, n), 8);
  std::vector<int32_t> suffix_lens(n);
  std::uniform_int_distribution<int32_t> len(0, 40);
  for (int32_t& l : suffix_lens)
    l = len(rng);
  batch.add_suffixes(suffix_lens);
  check_plan(kv, batch, batch.plan(), random_queries(rng, sh, n));
}

// A shared prompt of 2 blocks + 5 tokens: the node holds the 2 full blocks; the partial block,
// copied on write into every sibling, opens each sibling's suffix.
TEST(CascadeDecode, PrefixNotAMultipleOfTheBlockSize) {
  std::mt19937 rng(36);
  for (int group : {1, 4}) {
    const AttentionShape sh = make_shape(64, group);
    PagedKv kv(sh, 32, rng);
    TreeBatch batch(kv, 6);
    batch.share(iota(0, 6), 2);
    batch.add_suffixes({5, 6, 11, 16, 17, 40}, /*copied_tokens=*/5);
    const CascadePlan plan = batch.plan();
    ASSERT_EQ(plan.suffix_len[0], 5);
    check_plan(kv, batch, plan, random_queries(rng, sh, 6));
  }
}

// Two levels with the same members equal one node holding both spans.
TEST(CascadeDecode, TwoLevelChainEqualsMergedNode) {
  std::mt19937 rng(37);
  const AttentionShape sh = make_shape(128, 2);
  PagedKv kv(sh, 32, rng);
  TreeBatch batch(kv, 4);
  batch.share(iota(0, 4), 3);
  batch.share(iota(0, 4), 2);
  batch.add_suffixes({1, 8, 16, 21});
  const CascadePlan merged = batch.one_level_plan();
  ASSERT_EQ(merged.num_nodes(), 1);
  const std::vector<float> q = random_queries(rng, sh, 4);
  const Output two = testutil::run_cascade(kv, q, batch.plan());
  const Output one = testutil::run_cascade(kv, q, merged);
  EXPECT_LT(rel_l2(two.out, one.out), kRouteTol);
  EXPECT_LT(rel_l2(two.lse, one.lse), kRouteTol);
  check_plan(kv, batch, merged, q);
}

// The two-level tree equals the same batch as one level (one node per root-to-leaf path).
TEST(CascadeDecode, TreeEqualsOneLevel) {
  std::mt19937 rng(38);
  for (int group : {1, 8}) {
    const AttentionShape sh = make_shape(64, group);
    PagedKv kv(sh, 64, rng);
    const TreeBatch batch = two_level_batch(kv);
    const CascadePlan one_level = batch.one_level_plan();
    ASSERT_EQ(one_level.num_nodes(), 4);
    const std::vector<float> q = random_queries(rng, sh, batch.num_seqs());
    const Output tree = testutil::run_cascade(kv, q, batch.plan());
    const Output flat_tree = testutil::run_cascade(kv, q, one_level);
    EXPECT_LT(rel_l2(tree.out, flat_tree.out), kRouteTol);
    EXPECT_LT(rel_l2(tree.lse, flat_tree.lse), kRouteTol);
  }
}

TEST(CascadeDecode, NoNodesIsBitIdenticalToPagedDecode) {
  std::mt19937 rng(39);
  for (const testutil::ShapeCase& c : testutil::kShapeSweep) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << c.head_dim << " group " << c.group);
    const AttentionShape sh = make_shape(c.head_dim, c.group);
    PagedKv kv(sh, 64, rng);
    const TreeBatch batch = two_level_batch(kv);
    const std::vector<float> q = random_queries(rng, sh, batch.num_seqs());
    const Output cascade = testutil::run_cascade(kv, q, batch.flat_plan());
    const Output flat = testutil::run_flat(kv, q, batch);
    EXPECT_TRUE(bit_equal(cascade.out, flat.out));
    EXPECT_TRUE(bit_equal(cascade.lse, flat.lse));
  }
}

// A sequence in no node is left exactly as flat decode computes it, even in a plan with nodes.
TEST(CascadeDecode, SequenceOutsideEveryNodeIsBitIdenticalToFlat) {
  std::mt19937 rng(40);
  const AttentionShape sh = make_shape(64, 4);
  PagedKv kv(sh, 32, rng);
  TreeBatch batch(kv, 4);
  batch.share({0, 1, 2}, 2);
  batch.add_suffixes({3, 5, 7, 41});
  const std::vector<float> q = random_queries(rng, sh, 4);
  const Output cascade = testutil::run_cascade(kv, q, batch.plan());
  const Output flat = testutil::run_flat(kv, q, batch);
  const size_t row = static_cast<size_t>(sh.num_q_heads) * sh.head_dim;
  EXPECT_EQ(
      0, std::memcmp(cascade.out.data() + 3 * row, flat.out.data() + 3 * row, row * sizeof(float)));
}

TEST(CascadeDecode, NullLseGivesTheSameOutput) {
  std::mt19937 rng(41);
  const AttentionShape sh = make_shape(64, 2);
  PagedKv kv(sh, 64, rng);
  const TreeBatch batch = two_level_batch(kv);
  const std::vector<float> q = random_queries(rng, sh, batch.num_seqs());
  const CascadePlan plan = batch.plan();
  Output o = testutil::poisoned(sh, plan.num_seqs);
  CascadeWorkspace ws;
  cascade_decode(sh, q.data(), kv.k(), kv.v(), plan, o.out.data(), nullptr, ws);
  EXPECT_TRUE(bit_equal(o.out, testutil::run_cascade(kv, q, plan).out));
}

// A warmed-up workspace is reused without reallocation; a smaller plan afterwards is still right.
TEST(CascadeDecode, WorkspaceIsReused) {
  std::mt19937 rng(42);
  const AttentionShape sh = make_shape(64, 4);
  PagedKv kv(sh, 96, rng);
  const TreeBatch big = two_level_batch(kv);
  const std::vector<float> q = random_queries(rng, sh, big.num_seqs());
  const CascadePlan plan = big.plan();
  CascadeWorkspace ws;
  Output first = testutil::poisoned(sh, plan.num_seqs);
  cascade_decode(sh, q.data(), kv.k(), kv.v(), plan, first.out.data(), first.lse.data(), ws);
  const float* node_o = ws.node_o.data();
  Output second = testutil::poisoned(sh, plan.num_seqs);
  cascade_decode(sh, q.data(), kv.k(), kv.v(), plan, second.out.data(), second.lse.data(), ws);
  EXPECT_EQ(node_o, ws.node_o.data());
  EXPECT_TRUE(bit_equal(first.out, second.out));

  TreeBatch small(kv, 2);
  small.share({0, 1}, 1);
  small.add_suffixes({4, 9});
  const std::vector<float> q_small = random_queries(rng, sh, 2);
  Output o = testutil::poisoned(sh, 2);
  cascade_decode(sh, q_small.data(), kv.k(), kv.v(), small.plan(), o.out.data(), o.lse.data(), ws);
  testutil::expect_matches(o, testutil::dense_decode(kv, q_small, small.tables(), small.lens()));
}

// cascade_decode is exactly its documented composition: every node pass, the suffix pass as flat
// decode, then per sequence ((node_1 + node_2) + ...) + suffix with nodes in plan order. (Another
// merge order is just as accurate, so only bits can tell: the order is part of the contract.)
TEST(CascadeDecode, MergesNodesInPlanOrderThenTheSuffix) {
  std::mt19937 rng(44);
  const AttentionShape sh = make_shape(64, 2);
  PagedKv kv(sh, 32, rng);
  TreeBatch batch(kv, 4);
  batch.share(iota(0, 4), 2);
  batch.share({0, 1, 2}, 1);
  batch.share({1, 2}, 2);
  batch.add_suffixes({3, 9, 1, 20});
  const CascadePlan plan = batch.plan();
  const std::vector<float> q = random_queries(rng, sh, 4);

  const int slots = static_cast<int>(plan.node_seq_indices.size());
  Output partial = testutil::poisoned(sh, slots);
  for (int node = 0; node < plan.num_nodes(); ++node) {
    cascade_node_pass(sh, q.data(), kv.k(), kv.v(), plan, node, partial.out.data(),
                      partial.lse.data());
  }
  Output want = testutil::poisoned(sh, 4);
  paged_decode(sh, q.data(), kv.k(), kv.v(), plan.suffix_block_indptr.data(),
               plan.suffix_block_indices.data(), plan.suffix_len.data(), 4, want.out.data(),
               want.lse.data());
  const int hq = sh.num_q_heads, d = sh.head_dim;
  for (int s = 0; s < 4; ++s) {
    std::vector<float> acc_o, acc_lse;
    for (int slot = 0; slot < slots; ++slot) {  // slots are in plan order
      if (plan.node_seq_indices[slot] != s) continue;
      std::vector<float> o(partial.out.begin() + slot * hq * d,
                           partial.out.begin() + (slot + 1) * hq * d);
      std::vector<float> lse(partial.lse.begin() + slot * hq,
                             partial.lse.begin() + (slot + 1) * hq);
      if (!acc_o.empty()) merge_state(hq, d, acc_o.data(), acc_lse.data(), o.data(), lse.data());
      acc_o = o, acc_lse = lse;
    }
    if (!acc_o.empty()) {
      merge_state(hq, d, acc_o.data(), acc_lse.data(), want.out.data() + s * hq * d,
                  want.lse.data() + s * hq);
    }
  }
  const Output got = testutil::run_cascade(kv, q, plan);
  EXPECT_TRUE(bit_equal(got.out, want.out));
  EXPECT_TRUE(bit_equal(got.lse, want.lse));
}

// One node's pass writes the attention of each member over the node's span into the member's
// slot, and leaves other nodes' slots alone.
TEST(CascadeNodePass, WritesEachMemberSlotOnly) {
  std::mt19937 rng(43);
  for (int group : {1, 8}) {
    const AttentionShape sh = make_shape(128, group);
    PagedKv kv(sh, 64, rng);
    const TreeBatch batch = two_level_batch(kv);
    const CascadePlan plan = batch.plan();
    const std::vector<float> q = random_queries(rng, sh, batch.num_seqs());
    const int node = 2;  // members 1..5, 3 blocks
    const size_t slots = plan.node_seq_indices.size();
    Output partial = testutil::poisoned(sh, static_cast<int>(slots));
    cascade_node_pass(sh, q.data(), kv.k(), kv.v(), plan, node, partial.out.data(),
                      partial.lse.data());

    const std::vector<int32_t> blocks(
        plan.node_block_indices.begin() + plan.node_block_indptr[node],
        plan.node_block_indices.begin() + plan.node_block_indptr[node + 1]);
    const int len = static_cast<int>(blocks.size()) * sh.block_size;
    const size_t d = sh.head_dim;
    std::vector<float> got_o, got_lse;
    std::vector<double> want_o, want_lse;
    for (size_t slot = 0; slot < slots; ++slot) {
      const bool member = static_cast<int>(slot) >= plan.node_seq_indptr[node] &&
                          static_cast<int>(slot) < plan.node_seq_indptr[node + 1];
      for (int h = 0; h < sh.num_q_heads; ++h) {
        const size_t row = slot * sh.num_q_heads + h;
        if (!member) {
          ASSERT_TRUE(std::isnan(partial.lse[row]));
          ASSERT_TRUE(std::isnan(partial.out[row * d]));
          continue;
        }
        const size_t q_row = static_cast<size_t>(plan.node_seq_indices[slot]) * sh.num_q_heads + h;
        std::vector<double> o(d);
        double lse;
        testutil::dense_attention(kv, q.data() + q_row * d, h, blocks, len, o.data(), &lse);
        want_o.insert(want_o.end(), o.begin(), o.end());
        want_lse.push_back(lse);
        got_o.insert(got_o.end(), partial.out.begin() + row * d,
                     partial.out.begin() + (row + 1) * d);
        got_lse.push_back(partial.lse[row]);
      }
    }
    EXPECT_LT(rel_l2(got_o, want_o), kTol);
    EXPECT_LT(rel_l2(got_lse, want_lse), kTol);
  }
}

}  // namespace
}  // namespace kvc::kernels::cpu
