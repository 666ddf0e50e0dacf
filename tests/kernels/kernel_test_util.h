// Helpers shared by the kernel tests: random paged KV caches drawn from a shuffled block pool,
// decode batches whose block tables share prefixes (and the cascade plans that describe them),
// dense float64 attention to compare against, relative L2 error, and runners of the CPU kernels
// on poisoned outputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/attention_shape.h"
#include "kernels/cascade_plan.h"
#include "kernels/cpu/attention.h"

namespace kvc::kernels::testutil {

inline constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();
inline constexpr double kNegInfD = -std::numeric_limits<double>::infinity();
inline constexpr double kTol = 2e-5;  // float32 kernel vs float64 reference, relative L2

// num_kv_heads KV heads, `group` query heads each, scale 1 / sqrt(head_dim).
inline AttentionShape make_shape(int head_dim, int group, int num_kv_heads = 2,
                                 int block_size = 16) {
  return {num_kv_heads * group, num_kv_heads, head_dim, block_size,
          1.0f / std::sqrt(static_cast<float>(head_dim))};
}

// Normal(0, stddev) values, never exactly zero in practice (fresh inputs every call).
inline std::vector<float> random_vector(std::mt19937& rng, size_t n, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v)
    x = dist(rng);
  return v;
}

// ||a - b|| / ||b||, b the reference.
inline double rel_l2(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_l2(a, std::vector<double>(b.begin(), b.end()));
}

// A KV cache of random blocks. Blocks are handed out from a shuffled pool, so block tables are
// never the identity and a kernel that reads the wrong block reads other random data.
class PagedKv {
 public:
  PagedKv(const AttentionShape& shape, int num_blocks, std::mt19937& rng) : shape_(shape) {
    const size_t n = static_cast<size_t>(num_blocks) * shape.block_size * row_stride();
    k_ = random_vector(rng, n);
    v_ = random_vector(rng, n);
    for (int b = 0; b < num_blocks; ++b)
      pool_.push_back(b);
    std::shuffle(pool_.begin(), pool_.end(), rng);
  }
  const AttentionShape& shape() const { return shape_; }
  const float* k() const { return k_.data(); }
  const float* v() const { return v_.data(); }
  // A fresh block; the pool must not run dry (size it in the test).
  int32_t take_block() {
    int32_t b = pool_.back();
    pool_.pop_back();
    return b;
  }
  // Copies slots [0, num_tokens) of block src into block dst (copy-on-write of a partial block).
  void copy_slots(int32_t src, int32_t dst, int num_tokens) {
    const size_t n = static_cast<size_t>(num_tokens) * row_stride();
    std::copy_n(k_.begin() + offset(src), n, k_.begin() + offset(dst));
    std::copy_n(v_.begin() + offset(src), n, v_.begin() + offset(dst));
  }
  // The key/value of token position p of block table `table`, KV head kv_head: [head_dim].
  const float* k_at(const std::vector<int32_t>& table, int p, int kv_head) const {
    return k_.data() + at(table, p, kv_head);
  }
  const float* v_at(const std::vector<int32_t>& table, int p, int kv_head) const {
    return v_.data() + at(table, p, kv_head);
  }

 private:
  size_t row_stride() const { return static_cast<size_t>(shape_.num_kv_heads) * shape_.head_dim; }
  size_t offset(int32_t block) const {
    return static_cast<size_t>(block) * shape_.block_size * row_stride();
  }
  size_t at(const std::vector<int32_t>& table, int p, int kv_head) const {
    return offset(table[p / shape_.block_size]) + (p % shape_.block_size) * row_stride() +
           static_cast<size_t>(kv_head) * shape_.head_dim;
  }

  AttentionShape shape_;
  std::vector<float> k_, v_;
  std::vector<int32_t> pool_;
};

// Dense attention in double of query head `head` (q_head: [head_dim]) over positions [0, len) of
// block table `table`. o: [head_dim]; an empty range gives o = 0, lse = -inf.
inline void dense_attention(const PagedKv& kv, const float* q_head, int head,
                            const std::vector<int32_t>& table, int len, double* o, double* lse) {
  const AttentionShape& sh = kv.shape();
  const int kv_head = head / sh.group();
  std::vector<double> s(len);
  double m = kNegInfD;
  for (int p = 0; p < len; ++p) {
    const float* k = kv.k_at(table, p, kv_head);
    double acc = 0;
    for (int i = 0; i < sh.head_dim; ++i)
      acc += static_cast<double>(q_head[i]) * k[i];
    s[p] = acc * sh.scale;
    m = std::max(m, s[p]);
  }
  std::fill(o, o + sh.head_dim, 0.0);
  double sum = 0;
  for (int p = 0; p < len; ++p) {
    const double w = std::exp(s[p] - m);
    sum += w;
    const float* v = kv.v_at(table, p, kv_head);
    for (int i = 0; i < sh.head_dim; ++i)
      o[i] += w * v[i];
  }
  if (len > 0) {
    for (int i = 0; i < sh.head_dim; ++i)
      o[i] /= sum;
  }
  *lse = len > 0 ? m + std::log(sum) : kNegInfD;
}

struct DenseResult {
  std::vector<double> out;  // [num_seqs, num_q_heads, head_dim]
  std::vector<double> lse;  // [num_seqs, num_q_heads]
};

// Decode reference: query s attends the first lens[s] positions of tables[s].
inline DenseResult dense_decode(const PagedKv& kv, const std::vector<float>& q,
                                const std::vector<std::vector<int32_t>>& tables,
                                const std::vector<int32_t>& lens) {
  const AttentionShape& sh = kv.shape();
  const size_t rows = tables.size() * sh.num_q_heads;
  DenseResult r{std::vector<double>(rows * sh.head_dim), std::vector<double>(rows)};
  for (size_t s = 0; s < tables.size(); ++s) {
    for (int h = 0; h < sh.num_q_heads; ++h) {
      const size_t row = s * sh.num_q_heads + h;
      dense_attention(kv, q.data() + row * sh.head_dim, h, tables[s], lens[s],
                      r.out.data() + row * sh.head_dim, &r.lse[row]);
    }
  }
  return r;
}

// A decode batch whose block tables share prefixes. Build it top-down: share() appends a node's
// fresh blocks to every member (root first), add_suffixes() then appends private tokens.
class TreeBatch {
 public:
  TreeBatch(PagedKv& kv, int num_seqs)
      : kv_(kv), tables_(num_seqs), lens_(num_seqs, 0), paths_(num_seqs) {}

  // Appends num_blocks fresh full blocks to every member's context, as one node of the tree.
  void share(const std::vector<int32_t>& members, int num_blocks) {
    std::vector<int32_t> blocks;
    for (int i = 0; i < num_blocks; ++i)
      blocks.push_back(kv_.take_block());
    for (int32_t s : members) {
      tables_[s].insert(tables_[s].end(), blocks.begin(), blocks.end());
      lens_[s] += num_blocks * kv_.shape().block_size;
      paths_[s].push_back(static_cast<int32_t>(nodes_.size()));
    }
    nodes_.push_back({blocks, members});
  }

  // Appends suffix_lens[s] private tokens to sequence s in fresh blocks. The first
  // copied_tokens of every suffix are copies of one common source block: the partial last block
  // of a shared prompt after copy-on-write, which belongs to each sequence's suffix.
  void add_suffixes(const std::vector<int32_t>& suffix_lens, int copied_tokens = 0) {
    const int32_t source = copied_tokens > 0 ? kv_.take_block() : -1;
    for (size_t s = 0; s < tables_.size(); ++s) {
      suffix_start_.push_back(static_cast<int32_t>(tables_[s].size()));
      const int bs = kv_.shape().block_size;
      for (int i = 0; i < (suffix_lens[s] + bs - 1) / bs; ++i) {
        tables_[s].push_back(kv_.take_block());
        if (i == 0 && copied_tokens > 0) kv_.copy_slots(source, tables_[s].back(), copied_tokens);
      }
      lens_[s] += suffix_lens[s];
    }
  }

  const std::vector<std::vector<int32_t>>& tables() const { return tables_; }
  const std::vector<int32_t>& lens() const { return lens_; }
  int num_seqs() const { return static_cast<int>(tables_.size()); }

  // The tree as built: one node per share(), then each sequence's private suffix.
  CascadePlan plan() const {
    CascadePlan plan;
    for (const Node& n : nodes_)
      plan.add_node(n.blocks, n.seqs);
    add_plan_suffixes(plan);
    return plan;
  }
  // The same batch as one level: every distinct root-to-leaf path of nodes becomes one node
  // holding the concatenated blocks, shared by the sequences on that path.
  CascadePlan one_level_plan() const {
    std::map<std::vector<int32_t>, std::vector<int32_t>> by_path;
    std::vector<std::vector<int32_t>> order;
    for (int s = 0; s < num_seqs(); ++s) {
      if (paths_[s].empty()) continue;
      auto [it, added] = by_path.try_emplace(paths_[s]);
      if (added) order.push_back(paths_[s]);
      it->second.push_back(s);
    }
    CascadePlan plan;
    for (const auto& path : order) {
      std::vector<int32_t> blocks;
      for (int32_t n : path) {
        blocks.insert(blocks.end(), nodes_[n].blocks.begin(), nodes_[n].blocks.end());
      }
      plan.add_node(blocks, by_path[path]);
    }
    add_plan_suffixes(plan);
    return plan;
  }
  // No nodes: every block of a sequence is in its suffix (flat attention).
  CascadePlan flat_plan() const {
    CascadePlan plan;
    for (int s = 0; s < num_seqs(); ++s)
      plan.add_suffix(tables_[s], lens_[s]);
    return plan;
  }

 private:
  struct Node {
    std::vector<int32_t> blocks, seqs;
  };
  void add_plan_suffixes(CascadePlan& plan) const {
    const int bs = kv_.shape().block_size;
    for (int s = 0; s < num_seqs(); ++s) {
      std::vector<int32_t> blocks(tables_[s].begin() + suffix_start_[s], tables_[s].end());
      plan.add_suffix(blocks, lens_[s] - suffix_start_[s] * bs);
    }
  }

  PagedKv& kv_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> lens_;
  std::vector<std::vector<int32_t>> paths_;  // per sequence, its nodes root first
  std::vector<int32_t> suffix_start_;        // per sequence, index of its first private block
  std::vector<Node> nodes_;
};

// The shape sweep: head_dim 16, 64, 128 with GQA groups 1, 2, 4, 8.
struct ShapeCase {
  int head_dim, group;
};
inline constexpr ShapeCase kShapeSweep[] = {{16, 1}, {16, 8},  {64, 1},  {64, 2},  {64, 4},
                                            {64, 8}, {128, 1}, {128, 2}, {128, 4}, {128, 8}};

// Queries scaled up so that softmax weights are far from uniform (a wrong weight shows).
inline std::vector<float> random_queries(std::mt19937& rng, const AttentionShape& sh,
                                         int num_seqs) {
  return random_vector(rng, static_cast<size_t>(num_seqs) * sh.num_q_heads * sh.head_dim, 3.0f);
}

struct Output {
  std::vector<float> out;  // [num_seqs, num_q_heads, head_dim]
  std::vector<float> lse;  // [num_seqs, num_q_heads]
};

// NaN everywhere: a row the kernel forgets to write shows.
inline Output poisoned(const AttentionShape& sh, int num_seqs) {
  const size_t rows = static_cast<size_t>(num_seqs) * sh.num_q_heads;
  return {std::vector<float>(rows * sh.head_dim, kNaN), std::vector<float>(rows, kNaN)};
}

inline Output run_flat(const PagedKv& kv, const std::vector<float>& q, const TreeBatch& batch) {
  std::vector<int32_t> indptr{0}, indices;
  for (const auto& t : batch.tables()) {
    indices.insert(indices.end(), t.begin(), t.end());
    indptr.push_back(static_cast<int32_t>(indices.size()));
  }
  Output o = poisoned(kv.shape(), batch.num_seqs());
  cpu::paged_decode(kv.shape(), q.data(), kv.k(), kv.v(), indptr.data(), indices.data(),
                    batch.lens().data(), batch.num_seqs(), o.out.data(), o.lse.data());
  return o;
}

inline Output run_cascade(const PagedKv& kv, const std::vector<float>& q, const CascadePlan& plan) {
  cpu::CascadeWorkspace ws;
  Output o = poisoned(kv.shape(), plan.num_seqs);
  cpu::cascade_decode(kv.shape(), q.data(), kv.k(), kv.v(), plan, o.out.data(), o.lse.data(), ws);
  return o;
}

// Compares with the dense reference: outputs and LSE by relative L2; rows of an empty context
// must be exactly (0, -inf).
inline void expect_matches(const Output& got, const DenseResult& want, double tol = kTol) {
  const size_t d = got.out.size() / got.lse.size();
  std::vector<float> lse_got;
  std::vector<double> lse_want;
  for (size_t r = 0; r < want.lse.size(); ++r) {
    if (want.lse[r] == kNegInfD) {
      EXPECT_EQ(got.lse[r], kNegInf) << "row " << r;
      for (size_t i = 0; i < d; ++i)
        ASSERT_EQ(got.out[r * d + i], 0.0f) << "row " << r;
    } else {
      lse_got.push_back(got.lse[r]);
      lse_want.push_back(want.lse[r]);
    }
  }
  EXPECT_LT(rel_l2(got.out, want.out), tol);
  EXPECT_LT(rel_l2(lse_got, lse_want), tol);
}

}  // namespace kvc::kernels::testutil
