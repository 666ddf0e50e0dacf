// CPU attention kernels against dense float64 attention, and routes that must agree
// (cascade == flat, tree == one level, no nodes == paged_decode bit for bit).
#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels::cpu {
namespace {

using testutil::kNaN;
using testutil::kNegInf;
using testutil::kNegInfD;
using testutil::kTol;
using testutil::make_shape;
using testutil::Output;
using testutil::PagedKv;
using testutil::poisoned;
using testutil::random_queries;
using testutil::random_vector;
using testutil::rel_l2;
using testutil::TreeBatch;

// ---------------------------------------------------------------------------------- merge_state

TEST(MergeState, EmptyStateIsTheIdentityExactly) {
  std::mt19937 rng(1);
  const int rows = 5, d = 64;
  std::vector<float> o = random_vector(rng, rows * d), lse = random_vector(rng, rows, 4.0f);
  std::vector<float> empty_o(rows * d, kNaN), empty_lse(rows, kNegInf);

  std::vector<float> b_o = empty_o, b_lse = empty_lse;  // merge(x, empty)
  merge_state(rows, d, o.data(), lse.data(), b_o.data(), b_lse.data());
  EXPECT_EQ(0, std::memcmp(b_o.data(), o.data(), o.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(b_lse.data(), lse.data(), lse.size() * sizeof(float)));

  b_o = o, b_lse = lse;  // merge(empty, x)
  merge_state(rows, d, empty_o.data(), empty_lse.data(), b_o.data(), b_lse.data());
  EXPECT_EQ(0, std::memcmp(b_o.data(), o.data(), o.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(b_lse.data(), lse.data(), lse.size() * sizeof(float)));
}

TEST(MergeState, TwoEmptyStatesGiveZeroNotNan) {
  const int rows = 3, d = 16;
  std::vector<float> a_o(rows * d, kNaN), a_lse(rows, kNegInf);
  std::vector<float> b_o(rows * d, kNaN), b_lse(rows, kNegInf);
  merge_state(rows, d, a_o.data(), a_lse.data(), b_o.data(), b_lse.data());
  for (float x : b_o)
    ASSERT_EQ(x, 0.0f);
  for (float x : b_lse)
    ASSERT_EQ(x, kNegInf);
}

// The merge of states over disjoint key sets, in double: softmax weights e^lse.
std::vector<double> merge_reference(const std::vector<std::vector<float>>& os,
                                    const std::vector<std::vector<float>>& lses, int rows, int d) {
  std::vector<double> out(rows * d);
  for (int r = 0; r < rows; ++r) {
    double m = kNegInfD;
    for (const auto& l : lses)
      m = std::max(m, static_cast<double>(l[r]));
    double sum = 0;
    for (size_t j = 0; j < os.size(); ++j) {
      const double w = std::exp(lses[j][r] - m);
      sum += w;
      for (int i = 0; i < d; ++i)
        out[r * d + i] += w * os[j][r * d + i];
    }
    for (int i = 0; i < d; ++i)
      out[r * d + i] /= sum;
  }
  return out;
}

TEST(MergeState, CommutativeAssociativeAndCorrect) {
  std::mt19937 rng(2);
  const int rows = 16, d = 128;
  std::vector<std::vector<float>> o, l;
  for (int j = 0; j < 3; ++j) {
    o.push_back(random_vector(rng, rows * d));
    l.push_back(random_vector(rng, rows, 3.0f));
  }
  auto merged = [&](const std::vector<float>& oa, const std::vector<float>& la,
                    std::vector<float> ob, std::vector<float> lb) {
    merge_state(rows, d, oa.data(), la.data(), ob.data(), lb.data());
    return std::pair{ob, lb};
  };
  auto [ab, l_ab] = merged(o[0], l[0], o[1], l[1]);
  auto [ba, l_ba] = merged(o[1], l[1], o[0], l[0]);
  EXPECT_LT(rel_l2(ab, ba), 1e-6);
  EXPECT_LT(rel_l2(l_ab, l_ba), 1e-6);

  auto [ab_c, l_ab_c] = merged(ab, l_ab, o[2], l[2]);
  auto [bc, l_bc] = merged(o[1], l[1], o[2], l[2]);
  auto [a_bc, l_a_bc] = merged(o[0], l[0], bc, l_bc);
  EXPECT_LT(rel_l2(ab_c, a_bc), 1e-6);
  EXPECT_LT(rel_l2(l_ab_c, l_a_bc), 1e-6);
  EXPECT_LT(rel_l2(ab_c, merge_reference(o, l, rows, d)), 1e-6);
}

TEST(MergeState, HugeLseDoesNotOverflow) {
  std::mt19937 rng(3);
  const int rows = 4, d = 32;
  std::vector<std::vector<float>> o{random_vector(rng, rows * d), random_vector(rng, rows * d)};
  std::vector<std::vector<float>> l{{1e4f, -1e4f, 1e4f, 8e3f}, {1e4f + 1.5f, 1e4f, -1e4f, 8e3f}};
  std::vector<float> b_o = o[1], b_lse = l[1];
  merge_state(rows, d, o[0].data(), l[0].data(), b_o.data(), b_lse.data());
  for (float x : b_o)
    ASSERT_TRUE(std::isfinite(x));
  EXPECT_LT(rel_l2(b_o, merge_reference(o, l, rows, d)), 1e-6);
  EXPECT_NEAR(b_lse[0], 1e4 + 1.5 + std::log1p(std::exp(-1.5)), 1e-3);
  EXPECT_EQ(b_lse[1], 1e4f);
  EXPECT_EQ(b_lse[2], 1e4f);
  EXPECT_NEAR(b_lse[3], 8e3 + std::log(2.0), 1e-3);
}

// --------------------------------------------------------------------------------- paged_decode

TEST(PagedDecode, MatchesDenseAttentionAcrossShapes) {
  std::mt19937 rng(10);
  for (const testutil::ShapeCase& c : testutil::kShapeSweep) {
    SCOPED_TRACE(::testing::Message() << "head_dim " << c.head_dim << " group " << c.group);
    const AttentionShape sh = make_shape(c.head_dim, c.group);
    PagedKv kv(sh, 64, rng);
    // Lengths: empty, one token, odd, a whole block, several blocks and a partial one.
    const std::vector<int32_t> lens{0, 1, 7, 16, 37, 100};
    TreeBatch batch(kv, static_cast<int>(lens.size()));
    batch.add_suffixes(lens);
    const std::vector<float> q = random_queries(rng, sh, batch.num_seqs());
    testutil::expect_matches(testutil::run_flat(kv, q, batch),
                             testutil::dense_decode(kv, q, batch.tables(), lens));
  }
}

TEST(PagedDecode, NullLseGivesTheSameOutput) {
  std::mt19937 rng(11);
  const AttentionShape sh = make_shape(64, 4);
  PagedKv kv(sh, 32, rng);
  TreeBatch batch(kv, 3);
  batch.add_suffixes({5, 40, 17});
  const std::vector<float> q = random_queries(rng, sh, 3);
  std::vector<int32_t> indptr{0}, indices;
  for (const auto& t : batch.tables()) {
    indices.insert(indices.end(), t.begin(), t.end());
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  Output o = poisoned(sh, 3);
  paged_decode(sh, q.data(), kv.k(), kv.v(), indptr.data(), indices.data(), batch.lens().data(), 3,
               o.out.data(), nullptr);
  EXPECT_EQ(o.out, testutil::run_flat(kv, q, batch).out);
}

// -------------------------------------------------------------------------------- paged_prefill

TEST(PagedPrefill, MatchesDenseCausalAttention) {
  std::mt19937 rng(20);
  // (start_pos, num_tokens): from the start, mid-sequence, mid-block, lengths not a block multiple.
  const std::pair<int, int> chunks[] = {{0, 1}, {0, 23}, {5, 7}, {16, 16}, {37, 23}, {50, 1}};
  for (const testutil::ShapeCase& c : testutil::kShapeSweep) {
    const AttentionShape sh = make_shape(c.head_dim, c.group);
    PagedKv kv(sh, 48, rng);
    for (auto [start, n] : chunks) {
      SCOPED_TRACE(::testing::Message() << "head_dim " << c.head_dim << " group " << c.group
                                        << " start " << start << " tokens " << n);
      std::vector<int32_t> table;
      for (int b = 0; b * sh.block_size < start + n; ++b)
        table.push_back(kv.take_block());
      const std::vector<float> q = random_queries(rng, sh, n);
      Output got = poisoned(sh, n);
      paged_prefill(sh, q.data(), kv.k(), kv.v(), table.data(), start, n, got.out.data());

      const size_t d = sh.head_dim;
      std::vector<double> want(got.out.size());
      for (int i = 0; i < n; ++i) {
        for (int h = 0; h < sh.num_q_heads; ++h) {
          const size_t row = static_cast<size_t>(i) * sh.num_q_heads + h;
          double lse;
          testutil::dense_attention(kv, q.data() + row * d, h, table, start + i + 1,
                                    want.data() + row * d, &lse);
        }
      }
      EXPECT_LT(rel_l2(got.out, want), kTol);
    }
  }
}

// Prefilling a prompt in two chunks gives the same rows as one chunk over the whole prompt.
TEST(PagedPrefill, ChunkedEqualsWhole) {
  std::mt19937 rng(21);
  const AttentionShape sh = make_shape(64, 4);
  PagedKv kv(sh, 16, rng);
  const int len = 53, split = 21;
  std::vector<int32_t> table;
  for (int b = 0; b * sh.block_size < len; ++b)
    table.push_back(kv.take_block());
  const std::vector<float> q = random_queries(rng, sh, len);
  Output whole = poisoned(sh, len), chunked = poisoned(sh, len);
  paged_prefill(sh, q.data(), kv.k(), kv.v(), table.data(), 0, len, whole.out.data());
  const size_t row = static_cast<size_t>(sh.num_q_heads) * sh.head_dim;
  paged_prefill(sh, q.data(), kv.k(), kv.v(), table.data(), 0, split, chunked.out.data());
  paged_prefill(sh, q.data() + split * row, kv.k(), kv.v(), table.data(), split, len - split,
                chunked.out.data() + split * row);
  EXPECT_LT(rel_l2(chunked.out, whole.out), 1e-6);
}

}  // namespace
}  // namespace kvc::kernels::cpu
