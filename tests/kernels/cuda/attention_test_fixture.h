// The CUDA attention tests' shared pieces (attention_test.cc, attention_fp8_test.cc): a random
// problem on both sides (the CPU twin's floats, the device's bits), the comparison, the fixture
// with its flat and tree sweeps, and the sweeps' shapes and trees.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "kernels/fp8_rule.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels::attention_test {

using cuda::KvDtype;
using testutil::kNegInf;
using testutil::Output;
using testutil::PagedKv;
using testutil::TreeBatch;

inline double tolerance(KvDtype dt) {
  return dt == KvDtype::kF16 ? 1e-3 : 1e-2;
}
inline const char* name(KvDtype dt) {
  return dt == KvDtype::kF16 ? "fp16" : "bf16";
}

inline uint16_t to_bits(float x, KvDtype dt) {
  if (dt == KvDtype::kF16) return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
  // bf16: round to nearest even on the upper half (inputs here are finite).
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float from_bits(uint16_t b, KvDtype dt) {
  if (dt == KvDtype::kF16) return static_cast<float>(std::bit_cast<_Float16>(b));
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// Rounds v to the dtype in place; returns the bits.
inline std::vector<uint16_t> round_to(std::vector<float>& v, KvDtype dt) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    bits[i] = to_bits(v[i], dt);
    v[i] = from_bits(bits[i], dt);
  }
  return bits;
}

inline cuda::DeviceBuffer upload(const std::vector<uint16_t>& v) {
  cuda::DeviceBuffer b(v.size() * 2);
  b.upload(v.data(), v.size() * 2);
  return b;
}
inline cuda::DeviceBuffer upload(const std::vector<uint8_t>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(v.size(), 1));
  if (!v.empty()) b.upload(v.data(), v.size());
  return b;
}
inline cuda::DeviceBuffer upload(const std::vector<int32_t>& v) {
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
  // num_sms > 0 plans for that many SMs (persistent prefix CTAs then loop over many items).
  Output run_cascade(const CascadePlan& plan, const cuda::PlanOptions& options = {},
                     int launches = 1, int num_sms = 0) const {
    cuda::DeviceCascadePlan dp = cuda::make_device_plan(plan, shape, num_sms, options);
    cuda::DeviceBuffer d_plan(std::max<size_t>(dp.device_bytes(), 16));
    EXPECT_EQ(cuda::upload_plan(dp, d_plan.data(), d_plan.bytes()), cudaSuccess);
    const size_t ws_bytes = cuda::cascade_workspace_bytes(dp, shape);
    cuda::DeviceBuffer ws(std::max<size_t>(ws_bytes, 16));
    const size_t rows = static_cast<size_t>(plan.num_seqs) * shape.num_q_heads;
    cuda::DeviceBuffer out(rows * shape.head_dim * 2), lse(rows * 4);
    for (int i = 0; i < launches; ++i) {
      ws.fill_bytes(0xFF);   // every partial must be written again by each launch
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
inline void expect_close(const Output& got, const Output& want, double tol,
                         const std::string& what) {
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

inline std::string label(KvDtype dt, const AttentionShape& sh, const char* what) {
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

// Plan options that force the warp-specialised prefix pass (sm_90 devices).
inline cuda::PlanOptions ws_prefix() {
  cuda::PlanOptions o;
  o.ws_prefix = 1;
  return o;
}
inline constexpr Case kSweep[] = {{64, 1},  {64, 4},  {64, 8}, {128, 1},
                                  {128, 2}, {128, 4}, {128, 8}};
inline constexpr KvDtype kDtypes[] = {KvDtype::kF16, KvDtype::kBF16};

// The trees of the cascade sweep. Each returns a built batch over pr.kv.
struct Tree {
  const char* name;
  int num_seqs;
  int num_blocks;
  void (*build)(TreeBatch&, std::mt19937&);
};

inline std::vector<int32_t> random_lens(std::mt19937& rng, int n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

inline const Tree kTrees[] = {
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

inline void CudaAttentionTest::check_trees(const AttentionShape& sh, KvDtype dt,
                                           const std::string& tag, const cuda::KvQuant& quant) {
  for (const Tree& t : kTrees) {
    Problem pr(sh, dt, t.num_blocks, t.num_seqs, rng_, quant);
    TreeBatch batch(pr.kv, t.num_seqs);
    t.build(batch, rng_);
    pr.upload_kv();
    const CascadePlan plan = batch.plan();
    const Output want = testutil::run_cascade(pr.kv, pr.q, plan);
    expect_close(pr.run_cascade(plan), want, tolerance(dt), label(dt, sh, (t.name + tag).c_str()));
    if (cuda::current_device_has_ws_prefix() && plan.num_nodes() > 0) {
      expect_close(pr.run_cascade(plan, ws_prefix()), want, tolerance(dt),
                   label(dt, sh, (t.name + tag + " ws").c_str()));
    }
  }
}

// 20 sequences under a two-level tree: 12 blocks shared by all, 9 more by the first ten, then
// suffixes of 0 to 90 tokens (4 copied-on-write slots).
inline void build_two_level(TreeBatch& batch, std::mt19937& rng) {
  std::vector<int32_t> all(20), half(10);
  for (int s = 0; s < 20; ++s)
    all[s] = s;
  for (int s = 0; s < 10; ++s)
    half[s] = s;
  batch.share(all, 12);
  batch.share(half, 9);
  batch.add_suffixes(random_lens(rng, 20, 0, 90), 4);
}

}  // namespace kvc::kernels::attention_test
