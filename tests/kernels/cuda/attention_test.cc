// CUDA decode attention against the CPU twins (kernels/cpu/attention.h), which run in float32 on
// the same half-precision inputs converted back to float. Outputs and workspaces are poisoned
// (NaN) first; every case draws fresh random inputs.
#include "kernels/cuda/attention.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "kernels/fp8_rule.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::KvDtype;
using testutil::kNegInf;
using testutil::Output;
using testutil::PagedKv;
using testutil::TreeBatch;

double tolerance(KvDtype dt) {
  return dt == KvDtype::kF16 ? 1e-3 : 1e-2;
}
const char* name(KvDtype dt) {
  return dt == KvDtype::kF16 ? "fp16" : "bf16";
}

uint16_t to_bits(float x, KvDtype dt) {
  if (dt == KvDtype::kF16) return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
  // bf16: round to nearest even on the upper half (inputs here are finite).
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bits(uint16_t b, KvDtype dt) {
  if (dt == KvDtype::kF16) return static_cast<float>(std::bit_cast<_Float16>(b));
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Rounds v to the dtype in place; returns the bits.
std::vector<uint16_t> round_to(std::vector<float>& v, KvDtype dt) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = to_bits(v[i], dt);
    v[i] = from_bits(bits[i], dt);
  }
  return bits;
}

cuda::DeviceBuffer upload(const std::vector<uint16_t>& v) {
  cuda::DeviceBuffer b(v.size() * 2);
  b.upload(v.data(), v.size() * 2);
  return b;
}
cuda::DeviceBuffer upload(const std::vector<uint8_t>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(v.size(), 1));
  if (!v.empty()) b.upload(v.data(), v.size());
  return b;
}
cuda::DeviceBuffer upload(const std::vector<int32_t>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(v.size(), 1) * 4);
  if (!v.empty()) b.upload(v.data(), v.size() * 4);
  return b;
}

// A random batch on both sides: float copies (rounded to the dtype) for the twin, bits on the
// device. With an FP8 cache (quant.fp8) the twin's keys and values are E4M3 values times the
// scales and the device holds their codes.
struct Problem {
  AttentionShape shape;
  KvDtype dtype;
  cuda::KvQuant quant;
  PagedKv kv;
  std::vector<float> q;
  cuda::DeviceBuffer d_k, d_v, d_q;

 private:
  size_t elements() const {
    return static_cast<size_t>(num_blocks_) * shape.block_size * shape.num_kv_heads *
           shape.head_dim;
  }
  int num_blocks_;

 public:
  Problem(const AttentionShape& sh, KvDtype dt, int num_blocks, int num_seqs, std::mt19937& rng,
          const cuda::KvQuant& kv_quant = {})
      : shape(sh), dtype(dt), quant(kv_quant), kv(sh, num_blocks, rng), num_blocks_(num_blocks) {
    // Round the cache to the dtype in place (PagedKv owns non-const storage behind k()/v()), so
    // the twin sees exactly the device's values, copy-on-write copies included.
    for (float* p : {const_cast<float*>(kv.k()), const_cast<float*>(kv.v())}) {
      if (quant.fp8) {
        cpu::fake_quantize_scaled_fp8(p, static_cast<int64_t>(elements()),
                                      p == kv.k() ? quant.k_scale : quant.v_scale);
        continue;
      }
      for (size_t i = 0; i < elements(); ++i)
        p[i] = from_bits(to_bits(p[i], dt), dt);
    }
    q = testutil::random_queries(rng, sh, num_seqs);
    d_q = upload(round_to(q, dt));
  }

  // Uploads the cache as it is now: call after the batch is built (add_suffixes copies slots).
  void upload_kv() {
    if (quant.fp8) {  // the values are E4M3 values already: quantizing again gives their codes
      auto codes = [&](const float* x, float scale) {
        std::vector<uint8_t> c(elements());
        for (size_t i = 0; i < c.size(); ++i)
          c[i] = fp8::e4m3_from_float(x[i] * (1.0f / scale));
        return c;
      };
      d_k = upload(codes(kv.k(), quant.k_scale));
      d_v = upload(codes(kv.v(), quant.v_scale));
      return;
    }
    std::vector<float> k(kv.k(), kv.k() + elements()), v(kv.v(), kv.v() + elements());
    d_k = upload(round_to(k, dtype));
    d_v = upload(round_to(v, dtype));
  }

  Output fetch(const cuda::DeviceBuffer& out, const cuda::DeviceBuffer& lse, int num_seqs) const {
    const size_t rows = static_cast<size_t>(num_seqs) * shape.num_q_heads;
    std::vector<uint16_t> bits(rows * shape.head_dim);
    out.download(bits.data(), bits.size() * 2);
    Output o{std::vector<float>(bits.size()), std::vector<float>(rows)};
    for (size_t i = 0; i < bits.size(); ++i)
      o.out[i] = from_bits(bits[i], dtype);
    lse.download(o.lse.data(), rows * 4);
    return o;
  }

  // `launches` > 1 replays the same uploaded plan (outputs poisoned before each launch), as a
  // captured decode step does: nothing a launch leaves behind may change the next one.
  Output run_cascade(const CascadePlan& plan, const cuda::PlanOptions& options = {},
                     int launches = 1) const {
    cuda::DeviceCascadePlan dp = cuda::make_device_plan(plan, shape, 0, options);
    cuda::DeviceBuffer d_plan(std::max<size_t>(dp.device_bytes(), 16));
    EXPECT_EQ(cuda::upload_plan(dp, d_plan.data(), d_plan.bytes()), cudaSuccess);
    const size_t ws_bytes = cuda::cascade_workspace_bytes(dp, shape);
    cuda::DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    ws.fill_bytes(0xFF);
    const size_t rows = static_cast<size_t>(plan.num_seqs) * shape.num_q_heads;
    cuda::DeviceBuffer out(rows * shape.head_dim * 2), lse(rows * 4);
    for (int i = 0; i < launches; ++i) {
      out.fill_bytes(0xFF);  // NaN in fp16, bf16 and fp32
      lse.fill_bytes(0xFF);
      EXPECT_EQ(
          cuda::cascade_decode(shape, dtype, dp, d_q.data(), d_k.data(), d_v.data(), out.data(),
                               lse.as<float>(), ws.data(), ws_bytes, nullptr, quant),
          cudaSuccess);
      cuda::synchronize_or_die("cascade_decode");
    }
    return fetch(out, lse, plan.num_seqs);
  }

  Output run_flat(const TreeBatch& batch) const {
    std::vector<int32_t> indptr{0}, indices;
    int max_len = 0;
    for (const auto& t : batch.tables()) {
      indices.insert(indices.end(), t.begin(), t.end());
      indptr.push_back(static_cast<int32_t>(indices.size()));
    }
    for (int32_t len : batch.lens())
      max_len = std::max(max_len, len);
    const int num_seqs = batch.num_seqs();
    cuda::DeviceBuffer d_indptr = upload(indptr), d_indices = upload(indices),
                       d_lens = upload(batch.lens());
    const size_t ws_bytes = cuda::paged_decode_workspace_bytes(shape, num_seqs, max_len);
    cuda::DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    ws.fill_bytes(0xFF);
    const size_t rows = static_cast<size_t>(num_seqs) * shape.num_q_heads;
    cuda::DeviceBuffer out(rows * shape.head_dim * 2), lse(rows * 4);
    out.fill_bytes(0xFF);
    lse.fill_bytes(0xFF);
    EXPECT_EQ(
        cuda::paged_decode(shape, dtype, d_q.data(), d_k.data(), d_v.data(), d_indptr.as<int32_t>(),
                           d_indices.as<int32_t>(), d_lens.as<int32_t>(), num_seqs, max_len,
                           out.data(), lse.as<float>(), ws.data(), ws_bytes, nullptr, quant),
        cudaSuccess);
    cuda::synchronize_or_die("paged_decode");
    return fetch(out, lse, num_seqs);
  }
};

// got vs want (a CPU twin or another device route): relative L2 of outputs and of finite LSEs;
// rows with an empty context must be exactly (0, -inf); no NaN anywhere.
void expect_close(const Output& got, const Output& want, double tol, const std::string& what) {
  const size_t d = got.out.size() / got.lse.size();
  std::vector<float> lg, lw;
  for (size_t r = 0; r < want.lse.size(); ++r) {
    ASSERT_FALSE(std::isnan(got.lse[r])) << what << " lse row " << r;
    if (want.lse[r] == kNegInf) {
      ASSERT_EQ(got.lse[r], kNegInf) << what << " row " << r;
      for (size_t i = 0; i < d; ++i)
        ASSERT_EQ(got.out[r * d + i], 0.0f) << what << " row " << r;
    } else {
      lg.push_back(got.lse[r]);
      lw.push_back(want.lse[r]);
    }
  }
  for (size_t i = 0; i < got.out.size(); ++i)
    ASSERT_FALSE(std::isnan(got.out[i])) << what << " out index " << i;
  EXPECT_LT(testutil::rel_l2(got.out, want.out), tol) << what;
  EXPECT_LT(testutil::rel_l2(lg, lw), tol * 0.1) << what << " (lse)";
}

std::string label(KvDtype dt, const AttentionShape& sh, const char* what) {
  return std::string(what) + " " + name(dt) + " d=" + std::to_string(sh.head_dim) +
         " group=" + std::to_string(sh.group()) + " bs=" + std::to_string(sh.block_size);
}

class CudaAttentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
  std::mt19937 rng_{20261129};

  // Flat decode of one sequence per length (fresh random cache and queries) against the twin.
  void check_flat(const AttentionShape& sh, KvDtype dt, const std::vector<int32_t>& lens,
                  const char* what, const cuda::KvQuant& quant = {}) {
    int blocks = 8;
    for (int32_t l : lens)
      blocks += (l + sh.block_size - 1) / sh.block_size;
    Problem pr(sh, dt, blocks, static_cast<int>(lens.size()), rng_, quant);
    TreeBatch batch(pr.kv, static_cast<int>(lens.size()));
    batch.add_suffixes(lens);
    pr.upload_kv();
    expect_close(pr.run_flat(batch), testutil::run_flat(pr.kv, pr.q, batch), tolerance(dt),
                 label(dt, sh, what));
  }
  // Cascade decode of every tree of kTrees (fresh random cache and queries) against the twin;
  // `tag` is appended to each tree's name in failure messages.
  void check_trees(const AttentionShape& sh, KvDtype dt, const std::string& tag,
                   const cuda::KvQuant& quant = {});
};

struct Case {
  int head_dim, group;
};
constexpr Case kSweep[] = {{64, 1}, {64, 4}, {64, 8}, {128, 1}, {128, 2}, {128, 4}, {128, 8}};
constexpr KvDtype kDtypes[] = {KvDtype::kF16, KvDtype::kBF16};

TEST_F(CudaAttentionTest, FlatDecodeMatchesCpuTwin) {
  for (KvDtype dt : kDtypes) {
    for (Case c : kSweep) {
      for (int block_size : {16, 5}) {
        if (block_size == 5 && c.group != 4) continue;
        const AttentionShape sh = testutil::make_shape(c.head_dim, c.group, 2, block_size);
        // Lengths 0, 1, odd, one tile, several splits.
        check_flat(sh, dt, {0, 1, 17, 64, 203, 1000, 3001}, "flat");
      }
    }
  }
}

// The trees of the cascade sweep. Each returns a built batch over pr.kv.
struct Tree {
  const char* name;
  int num_seqs;
  int num_blocks;
  void (*build)(TreeBatch&, std::mt19937&);
};

std::vector<int32_t> random_lens(std::mt19937& rng, int n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

const Tree kTrees[] = {
    // One level; prefix 3 blocks + 5 copied tokens (not a multiple of the block size); suffixes
    // odd and one exactly the copied tokens.
    {"one-level", 6, 64,
     [](TreeBatch& b, std::mt19937&) {
       b.share({0, 1, 2, 3, 4, 5}, 3);
       b.add_suffixes({5, 6, 12, 40, 21, 77}, 5);
     }},
    // Suffix lengths 0 and 1; sequence 3 in no node.
    {"suffix-0-1", 4, 40,
     [](TreeBatch& b, std::mt19937&) {
       b.share({0, 1, 2}, 9);
       b.add_suffixes({0, 1, 3, 50});
     }},
    {"one-sibling", 1, 80,
     [](TreeBatch& b, std::mt19937&) {
       b.share({0}, 70);
       b.add_suffixes({9});
     }},
    // Unequal groups (1, 5, 40 members) with different prefix lengths.
    {"unequal-groups", 46, 400,
     [](TreeBatch& b, std::mt19937& rng) {
       std::vector<int32_t> g1{0}, g2, g3;
       for (int s = 1; s < 6; ++s)
         g2.push_back(s);
       for (int s = 6; s < 46; ++s)
         g3.push_back(s);
       b.share(g1, 2);
       b.share(g2, 11);
       b.share(g3, 40);
       b.add_suffixes(random_lens(rng, 46, 0, 37), 3);
     }},
    // Three levels: root for all, two children, a grandchild under the first.
    {"three-levels", 12, 300,
     [](TreeBatch& b, std::mt19937& rng) {
       b.share({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 7);
       b.share({0, 1, 2, 3, 4, 5}, 5);
       b.share({6, 7, 8, 9, 10, 11}, 13);
       b.share({0, 1, 2}, 3);
       b.add_suffixes(random_lens(rng, 12, 1, 70), 9);
     }},
    // Short suffixes, each at most two blocks: 0, 1, odd, a block and one token past it; two
    // levels.
    {"short-suffixes", 10, 120,
     [](TreeBatch& b, std::mt19937&) {
       b.share({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 20);
       b.share({0, 1, 2, 3, 4}, 3);
       b.add_suffixes({0, 1, 2, 7, 15, 16, 17, 31, 32, 32});
     }},
    // A long prefix: several chunks per node.
    {"long-prefix", 8, 450,
     [](TreeBatch& b, std::mt19937& rng) {
       b.share({0, 1, 2, 3, 4, 5, 6, 7}, 300);
       b.add_suffixes(random_lens(rng, 8, 0, 200));
     }},
};

void CudaAttentionTest::check_trees(const AttentionShape& sh, KvDtype dt, const std::string& tag,
                                    const cuda::KvQuant& quant) {
  for (const Tree& t : kTrees) {
    Problem pr(sh, dt, t.num_blocks, t.num_seqs, rng_, quant);
    TreeBatch batch(pr.kv, t.num_seqs);
    t.build(batch, rng_);
    pr.upload_kv();
    const CascadePlan plan = batch.plan();
    const Output want = testutil::run_cascade(pr.kv, pr.q, plan);
    expect_close(pr.run_cascade(plan), want, tolerance(dt), label(dt, sh, (t.name + tag).c_str()));
  }
}

TEST_F(CudaAttentionTest, CascadeMatchesCpuTwin) {
  for (KvDtype dt : kDtypes) {
    for (Case c : kSweep)
      check_trees(testutil::make_shape(c.head_dim, c.group), dt, "");
  }
}

TEST_F(CudaAttentionTest, ThousandSiblings) {
  for (KvDtype dt : kDtypes) {
    const AttentionShape sh = testutil::make_shape(128, 4);
    const int n = 1000;
    Problem pr(sh, dt, 8 + 2 * n, n, rng_);
    TreeBatch batch(pr.kv, n);
    std::vector<int32_t> all(n);
    for (int s = 0; s < n; ++s)
      all[s] = s;
    batch.share(all, 8);
    batch.add_suffixes(random_lens(rng_, n, 0, 20), 7);
    pr.upload_kv();
    const CascadePlan plan = batch.plan();
    const Output want = testutil::run_cascade(pr.kv, pr.q, plan);
    expect_close(pr.run_cascade(plan), want, tolerance(dt), label(dt, sh, "1000-siblings"));
  }
}

// Keys that grow along the cache (block b scaled by 1 + b / 4): every sequence's maximum score
// rises tile after tile, far past the lazy rescaling threshold, so the softmax reference moves
// many times mid-sequence, in the prefix pass (node blocks first), the suffix pass and flat
// decode, on the 4-head (2 KV heads) and 8-head (8 KV heads) decode CTAs.
TEST_F(CudaAttentionTest, RisingScoresMoveTheSoftmaxReference) {
  for (KvDtype dt : kDtypes) {
    for (int kv_heads : {2, 8}) {
      const AttentionShape sh = testutil::make_shape(128, 4, kv_heads);
      const int n = 8, blocks = 8 * 20 + 40 + 8;
      Problem pr(sh, dt, blocks, n, rng_);
      TreeBatch batch(pr.kv, n);
      std::vector<int32_t> all(n);
      for (int s = 0; s < n; ++s)
        all[s] = s;
      batch.share(all, 40);
      batch.add_suffixes(random_lens(rng_, n, 100, 300));
      float* k = const_cast<float*>(pr.kv.k());
      const size_t per_block = size_t{16} * kv_heads * 128;
      for (int b = 0; b < blocks; ++b)
        for (size_t i = 0; i < per_block; ++i) {
          float& x = k[b * per_block + i];
          x = from_bits(to_bits(x * (1.f + 0.25f * b), dt), dt);
        }
      pr.upload_kv();
      const CascadePlan plan = batch.plan();
      expect_close(pr.run_cascade(plan), testutil::run_cascade(pr.kv, pr.q, plan), tolerance(dt),
                   label(dt, sh, "rising scores, cascade"));
      expect_close(pr.run_flat(batch), testutil::run_flat(pr.kv, pr.q, batch), tolerance(dt),
                   label(dt, sh, "rising scores, flat"));
    }
  }
}

// 20 sequences under a two-level tree: 12 blocks shared by all, 9 more by the first ten, then
// suffixes of 0 to 90 tokens (4 copied-on-write slots).
void build_two_level(TreeBatch& batch, std::mt19937& rng) {
  std::vector<int32_t> all(20), half(10);
  for (int s = 0; s < 20; ++s)
    all[s] = s;
  for (int s = 0; s < 10; ++s)
    half[s] = s;
  batch.share(all, 12);
  batch.share(half, 9);
  batch.add_suffixes(random_lens(rng, 20, 0, 90), 4);
}

// Routes that must agree on the device itself: cascade == flat over the same batch, and a
// two-level tree == the same batch as one level. Also: a fixed plan gives the same bits twice,
// the second time on the third launch of one uploaded plan.
TEST_F(CudaAttentionTest, RoutesAgree) {
  for (KvDtype dt : kDtypes) {
    for (Case c : {Case{64, 2}, Case{128, 4}, Case{128, 8}}) {
      const AttentionShape sh = testutil::make_shape(c.head_dim, c.group);
      Problem pr(sh, dt, 400, 20, rng_);
      TreeBatch batch(pr.kv, 20);
      build_two_level(batch, rng_);
      pr.upload_kv();

      const Output cascade = pr.run_cascade(batch.plan());
      const Output flat = pr.run_flat(batch);
      const Output one_level = pr.run_cascade(batch.one_level_plan());
      const Output flat_plan = pr.run_cascade(batch.flat_plan());
      expect_close(cascade, flat, tolerance(dt), label(dt, sh, "cascade==flat"));
      expect_close(cascade, one_level, tolerance(dt), label(dt, sh, "two-level==one-level"));
      expect_close(flat_plan, flat, tolerance(dt), label(dt, sh, "no-node plan==flat"));
      const Output again = pr.run_cascade(batch.plan(), {}, 3);  // third launch of one upload
      EXPECT_EQ(again.out, cascade.out) << label(dt, sh, "deterministic");
      EXPECT_EQ(again.lse, cascade.lse) << label(dt, sh, "deterministic");
    }
  }
}

// 8 and 16 KV heads: flat decode (and a plan without nodes) on the 8-head CTAs, the cascade's
// suffix pass on full 4-head CTAs; the sweeps above use 2 KV heads (one half-empty 4-head CTA).
constexpr Case kHeadsSweep[] = {{64, 1}, {64, 4}, {128, 1}, {128, 2}, {128, 4}, {128, 16}};

TEST_F(CudaAttentionTest, AllHeadsFlatDecodeMatchesCpuTwin) {
  for (KvDtype dt : kDtypes) {
    for (Case c : kHeadsSweep) {
      for (int kv_heads : {8, 16}) {
        for (int block_size : {16, 5}) {
          if ((block_size == 5 || kv_heads == 16) && c.group != 4) continue;
          const AttentionShape sh = testutil::make_shape(c.head_dim, c.group, kv_heads, block_size);
          ASSERT_TRUE(cuda::decode_wide_path(sh));
          check_flat(sh, dt, {0, 1, 17, 64, 203, 1000, 3001}, "flat all-heads");
        }
      }
    }
  }
}

TEST_F(CudaAttentionTest, AllHeadsCascadeMatchesCpuTwin) {
  for (KvDtype dt : kDtypes) {
    for (Case c : {Case{64, 4}, Case{128, 1}, Case{128, 4}}) {
      check_trees(testutil::make_shape(c.head_dim, c.group, 8), dt, " all-heads");
    }
    // Routes and determinism on the all-heads path.
    const AttentionShape sh = testutil::make_shape(128, 4, 8);
    Problem pr(sh, dt, 400, 20, rng_);
    TreeBatch batch(pr.kv, 20);
    std::vector<int32_t> all(20);
    for (int s = 0; s < 20; ++s)
      all[s] = s;
    batch.share(all, 12);
    batch.add_suffixes(random_lens(rng_, 20, 0, 90), 4);
    pr.upload_kv();
    const Output cascade = pr.run_cascade(batch.plan());
    expect_close(cascade, pr.run_flat(batch), tolerance(dt),
                 label(dt, sh, "all-heads cascade==flat"));
    const Output again = pr.run_cascade(batch.plan());
    EXPECT_EQ(again.out, cascade.out) << label(dt, sh, "all-heads deterministic");
    // A plan without nodes: the suffix pass takes the all-heads path.
    ASSERT_TRUE(cuda::make_device_plan(batch.flat_plan(), sh).wide_path);
    ASSERT_FALSE(cuda::make_device_plan(batch.plan(), sh).wide_path);
    expect_close(pr.run_cascade(batch.flat_plan()), cascade, tolerance(dt),
                 label(dt, sh, "all-heads no-node plan==cascade"));
  }
}

// Decode CTAs cover 4 KV heads: 6 KV heads leave the second group half empty (idle warps, no
// loads past the last head); block sizes 1 and 3 take the multiply-high block division's d == 1
// and general paths. The cascade runs with one, two and three prefix CTAs per SM (the two grid
// shapes the cost model chooses between, and the one between) and must agree with the twin.
TEST_F(CudaAttentionTest, PartialHeadGroupsBlockSizesAndPrefixCtas) {
  for (KvDtype dt : kDtypes) {
    for (Case c : {Case{64, 2}, Case{128, 3}}) {
      for (int block_size : {1, 3, 16}) {
        const AttentionShape sh = testutil::make_shape(c.head_dim, c.group, 6, block_size);
        ASSERT_FALSE(cuda::decode_wide_path(sh));
        check_flat(sh, dt, {0, 1, 17, 130, 333}, "flat 6 kv heads");

        const int n = 24;
        Problem pr(sh, dt, 79 * 16 / block_size + n * (90 / block_size + 3) + 8, n, rng_);
        TreeBatch batch(pr.kv, n);
        std::vector<int32_t> all(n), half(n / 2);
        for (int s = 0; s < n; ++s)
          all[s] = s;
        for (int s = 0; s < n / 2; ++s)
          half[s] = s;
        batch.share(all, 70 * 16 / block_size);
        batch.share(half, 9 * 16 / block_size);
        batch.add_suffixes(random_lens(rng_, n, 0, 90), std::min(2, block_size - 1));
        pr.upload_kv();
        const CascadePlan plan = batch.plan();
        const Output want = testutil::run_cascade(pr.kv, pr.q, plan);
        for (int per_sm : {1, 2}) {
          expect_close(
              pr.run_cascade(plan, {per_sm}), want, tolerance(dt),
              label(dt, sh,
                    per_sm == 1 ? "cascade, 1 prefix CTA/SM" : "cascade, 2 prefix CTAs/SM"));
        }
      }
    }
  }
}

// An FP8 cache (KvQuant): E4M3 codes under K and V scales other than 1, widened to fp16 on the
// device, against the twin over the codes' values times the scales. Flat decode on the 4-head and
// 8-head CTAs (block size 5: a thread's rows in several blocks), every cascade tree on both
// decode CTA kinds, cascade == flat and one plan's bits twice on the device; an FP8 cache with
// fp16 queries is refused.
TEST_F(CudaAttentionTest, Fp8CacheMatchesCpuTwin) {
  const cuda::KvQuant fp8{true, 0.37f, 1.9f};
  const KvDtype dt = KvDtype::kBF16;
  for (Case c : kSweep) {
    for (int kv_heads : {2, 8}) {
      for (int block_size : {16, 5}) {
        if ((block_size == 5 || kv_heads == 8) && c.group != 4 && c.group != 1) continue;
        const AttentionShape sh = testutil::make_shape(c.head_dim, c.group, kv_heads, block_size);
        check_flat(sh, dt, {0, 1, 17, 64, 203, 1000, 3001}, "flat fp8", fp8);
      }
    }
    check_trees(testutil::make_shape(c.head_dim, c.group), dt, " fp8", fp8);
  }
  check_trees(testutil::make_shape(128, 4, 8), dt, " fp8 all-heads", fp8);

  const AttentionShape sh = testutil::make_shape(128, 4, 8);
  Problem pr(sh, dt, 400, 20, rng_, fp8);
  TreeBatch batch(pr.kv, 20);
  build_two_level(batch, rng_);
  pr.upload_kv();
  const Output cascade = pr.run_cascade(batch.plan());
  expect_close(cascade, pr.run_flat(batch), tolerance(dt), label(dt, sh, "fp8 cascade==flat"));
  const Output again = pr.run_cascade(batch.plan(), {}, 3);
  EXPECT_EQ(again.out, cascade.out) << label(dt, sh, "fp8 deterministic");

  cuda::DeviceCascadePlan dp = cuda::make_device_plan(batch.plan(), sh);
  cuda::DeviceBuffer d_plan(std::max<size_t>(dp.device_bytes(), 16));
  ASSERT_EQ(cuda::upload_plan(dp, d_plan.data(), d_plan.bytes()), cudaSuccess);
  const size_t ws_bytes = cuda::cascade_workspace_bytes(dp, sh);
  cuda::DeviceBuffer ws(ws_bytes), out(size_t{20} * sh.num_q_heads * sh.head_dim * 2);
  EXPECT_EQ(cuda::cascade_decode(sh, KvDtype::kF16, dp, pr.d_q.data(), pr.d_k.data(), pr.d_v.data(),
                                 out.data(), nullptr, ws.data(), ws_bytes, nullptr, fp8),
            cudaErrorInvalidValue);
}

// With Fp8RowsOut the merge writes each sequence's row as E4M3 codes and one scale: the same
// bytes as the bf16 output quantized by its own pass (ops.h quantize_rows_fp8), over both cache
// dtypes, cascade and flat plans, and head counts below, at and above one warp per head.
TEST_F(CudaAttentionTest, MergeWritesFp8RowsAsTheQuantizePassWould) {
  struct Shape {
    int head_dim, group, kv_heads;
  };
  const Shape shapes[] = {{128, 4, 8}, {128, 4, 2}, {64, 8, 8}, {128, 8, 5}, {128, 16, 8}};
  int checked = 0;
  for (const Shape& c : shapes) {
    for (const cuda::KvQuant& quant : {cuda::KvQuant{}, cuda::KvQuant{true, 0.37f, 1.9f}}) {
      for (const bool tree : {true, false}) {
        const AttentionShape sh = testutil::make_shape(c.head_dim, c.group, c.kv_heads);
        const int seqs = 20;
        Problem pr(sh, KvDtype::kBF16, 400, seqs, rng_, quant);
        TreeBatch batch(pr.kv, seqs);
        if (tree) {
          build_two_level(batch, rng_);
        } else {
          batch.add_suffixes(random_lens(rng_, seqs, 1, 200));
        }
        pr.upload_kv();
        const std::string what = label(KvDtype::kBF16, sh, tree ? "tree" : "flat") +
                                 " heads=" + std::to_string(sh.num_q_heads) +
                                 (quant.fp8 ? " fp8 cache" : "");
        cuda::DeviceCascadePlan dp = cuda::make_device_plan(batch.plan(), sh);
        cuda::DeviceBuffer d_plan(std::max<size_t>(dp.device_bytes(), 16));
        ASSERT_EQ(cuda::upload_plan(dp, d_plan.data(), d_plan.bytes()), cudaSuccess);
        const size_t ws_bytes = cuda::cascade_workspace_bytes(dp, sh);
        cuda::DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
        const int dim = sh.num_q_heads * sh.head_dim;
        const cuda::Fp8ScaleLayout layout = cuda::fp8_activation_scales(seqs, dim);
        const size_t codes = size_t{seqs} * dim, scales = static_cast<size_t>(layout.count());
        cuda::DeviceBuffer out(codes * 2), q_pass(codes), s_pass(scales * 4), q_merge(codes),
            s_merge(scales * 4);
        for (cuda::DeviceBuffer* b : {&q_pass, &s_pass, &q_merge, &s_merge})
          b->fill_bytes(0x5A);
        ASSERT_EQ(cuda::cascade_decode(sh, KvDtype::kBF16, dp, pr.d_q.data(), pr.d_k.data(),
                                       pr.d_v.data(), out.data(), nullptr, ws.data(), ws_bytes,
                                       nullptr, quant),
                  cudaSuccess);
        ASSERT_EQ(cuda::quantize_rows_fp8(out.data(), dim, seqs, dim, q_pass.data(),
                                          s_pass.as<float>(), layout),
                  cudaSuccess);
        const cuda::Fp8RowsOut rows{static_cast<uint8_t*>(q_merge.data()), s_merge.as<float>(),
                                    layout.stride, layout.blocks};
        ASSERT_EQ(cuda::cascade_decode(sh, KvDtype::kBF16, dp, pr.d_q.data(), pr.d_k.data(),
                                       pr.d_v.data(), nullptr, nullptr, ws.data(), ws_bytes,
                                       nullptr, quant, &rows),
                  cudaSuccess);
        cuda::synchronize_or_die("cascade_decode to FP8 rows");
        std::vector<uint8_t> a(codes), b(codes);
        q_pass.download(a.data(), codes);
        q_merge.download(b.data(), codes);
        EXPECT_EQ(a, b) << what;
        std::vector<float> sa(scales), sb(scales);
        s_pass.download(sa.data(), scales * 4);
        s_merge.download(sb.data(), scales * 4);
        EXPECT_EQ(sa, sb) << what;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 20);

  // What it cannot write: FP8 rows from fp16 queries, a scale stride shorter than the rows.
  const AttentionShape sh = testutil::make_shape(128, 4, 8);
  Problem pr(sh, KvDtype::kF16, 100, 4, rng_);
  TreeBatch batch(pr.kv, 4);
  batch.add_suffixes({3, 9, 40, 1});
  pr.upload_kv();
  cuda::DeviceCascadePlan dp = cuda::make_device_plan(batch.plan(), sh);
  cuda::DeviceBuffer d_plan(std::max<size_t>(dp.device_bytes(), 16));
  ASSERT_EQ(cuda::upload_plan(dp, d_plan.data(), d_plan.bytes()), cudaSuccess);
  const size_t ws_bytes = cuda::cascade_workspace_bytes(dp, sh);
  cuda::DeviceBuffer ws(std::max<size_t>(ws_bytes, 16)), q(4 * 4096), s(64 * 4);
  cuda::Fp8RowsOut rows{static_cast<uint8_t*>(q.data()), s.as<float>(), 4, 1};
  EXPECT_EQ(cuda::cascade_decode(sh, KvDtype::kF16, dp, pr.d_q.data(), pr.d_k.data(), pr.d_v.data(),
                                 nullptr, nullptr, ws.data(), ws_bytes, nullptr, {}, &rows),
            cudaErrorInvalidValue);
  rows.scale_stride = 3;
  EXPECT_EQ(
      cuda::cascade_decode(sh, KvDtype::kBF16, dp, pr.d_q.data(), pr.d_k.data(), pr.d_v.data(),
                           nullptr, nullptr, ws.data(), ws_bytes, nullptr, {}, &rows),
      cudaErrorInvalidValue);
}

TEST(CudaAttentionPlanTest, PrefixCtasFollowTheCostModel) {
  const AttentionShape sh{32, 8, 128, 16, 0.088f};
  auto seed_example = [&](int suffix) {
    CascadePlan p;
    int32_t next = 0;
    for (int g = 0; g < 2; ++g) {
      std::vector<int32_t> blocks, members;
      for (int b = 0; b < 256; ++b)
        blocks.push_back(next++);
      for (int m = 0; m < 64; ++m)
        members.push_back(g * 64 + m);
      p.add_node(blocks, members);
    }
    for (int s = 0; s < 128; ++s) {
      std::vector<int32_t> blocks;
      for (int b = 0; b < (suffix + 15) / 16; ++b)
        blocks.push_back(next++);
      p.add_suffix(blocks, suffix);
    }
    return p;
  };
  // A short suffix: the prefix pass dominates, prefix CTAs on every slot (3 per SM).
  const cuda::DeviceCascadePlan short_suffix = cuda::make_device_plan(seed_example(16), sh, 132);
  EXPECT_GT(short_suffix.num_prefix_ctas, 264);
  EXPECT_LE(short_suffix.num_prefix_ctas, 396);
  // A long suffix: one prefix CTA per SM beside the suffix pass's CTAs, whose splits are capped.
  const cuda::DeviceCascadePlan long_suffix = cuda::make_device_plan(seed_example(1024), sh, 132);
  EXPECT_LE(long_suffix.num_prefix_ctas, 132);
  EXPECT_GE(long_suffix.suffix.num_splits, 2);
  EXPECT_FALSE(long_suffix.wide_path);
  // A 1K root shared by 64 and four 8K documents of 16 each, S=256: the documents' KV is read by
  // one row tile each (byte-bound), so two prefix CTAs per SM with suffix CTAs in the third slot.
  {
    CascadePlan p;
    int32_t next = 0;
    auto blocks = [&](int n) {
      std::vector<int32_t> b;
      for (int i = 0; i < n; ++i)
        b.push_back(next++);
      return b;
    };
    std::vector<int32_t> all;
    for (int s = 0; s < 64; ++s)
      all.push_back(s);
    p.add_node(blocks(64), all);
    for (int doc = 0; doc < 4; ++doc) {
      std::vector<int32_t> members;
      for (int i = 0; i < 16; ++i)
        members.push_back(doc * 16 + i);
      p.add_node(blocks(512), members);
    }
    for (int s = 0; s < 64; ++s)
      p.add_suffix(blocks(16), 256);
    const cuda::DeviceCascadePlan tree = cuda::make_device_plan(p, sh, 132);
    EXPECT_GT(tree.num_prefix_ctas, 132);
    EXPECT_LE(tree.num_prefix_ctas, 264);
  }
  // An FP8 cache (kv_element_bytes 1): half the suffix's bytes and slower prefix tiles. At S = 256
  // the 16-bit model keeps one prefix CTA per SM; over FP8 codes two are faster (H100, bench
  // kernels --kv-cache-dtype fp8: 2.60 / 1.73 / 2.13 ms with 1 / 2 / 3) and are chosen. At S = 16
  // and 1024 the choices stay (3 and 1, the fastest there too).
  cuda::PlanOptions fp8;
  fp8.kv_element_bytes = 1;
  EXPECT_LE(cuda::make_device_plan(seed_example(256), sh, 132).num_prefix_ctas, 132);
  const int fp8_256 = cuda::make_device_plan(seed_example(256), sh, 132, fp8).num_prefix_ctas;
  EXPECT_GT(fp8_256, 132);
  EXPECT_LE(fp8_256, 264);
  EXPECT_GT(cuda::make_device_plan(seed_example(16), sh, 132, fp8).num_prefix_ctas, 264);
  EXPECT_LE(cuda::make_device_plan(seed_example(1024), sh, 132, fp8).num_prefix_ctas, 132);
  // Forced either way.
  EXPECT_LE(cuda::make_device_plan(seed_example(16), sh, 132, {1}).num_prefix_ctas, 132);
  EXPECT_GT(cuda::make_device_plan(seed_example(1024), sh, 132, {2}).num_prefix_ctas, 132);
}

TEST(CudaAttentionPlanTest, SplitFillsTheGpuAtSmallBatch) {
  // 16 sequences x 8 KV heads of 32K tokens: far fewer rows than 264 CTA slots, so split.
  const cuda::DecodeSplit s = cuda::choose_decode_split(int64_t{16} * 8, 32768, 264);
  EXPECT_GE(16 * 8 * s.num_splits, 132);  // every SM has work
  EXPECT_EQ(s.split_tokens % cuda::kKvTileTokens, 0);
  EXPECT_GE(s.num_splits * s.split_tokens, 32768);
  // Many rows: no split.
  EXPECT_EQ(cuda::choose_decode_split(int64_t{1024} * 8, 1024, 264).num_splits, 1);
  // All-heads path: 16 sequences x 1 head group of 32K tokens split across the SMs.
  const AttentionShape sh{32, 8, 128, 16, 0.088f};
  const cuda::DecodeSplit h = cuda::choose_decode_split(sh, 16, 32768, 132);
  EXPECT_GE(16 * h.num_splits, 128);  // one CTA per SM at head_dim 128: 128 of 132 busy
  EXPECT_LE(16 * h.num_splits, 132);
  EXPECT_GE(h.num_splits * h.split_tokens, 32768);
}

}  // namespace
}  // namespace kvc::kernels
