// CUDA decode attention against the CPU twins (kernels/cpu/attention.h), which run in float32 on
// the same half-precision inputs converted back to float. Outputs and workspaces are poisoned
// (NaN) first; every case draws fresh random inputs.
#include "tests/kernels/cuda/attention_test_fixture.h"

#include <array>

namespace kvc::kernels::attention_test {
namespace {

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

// Scales the keys of cache block b by 1 + rate * b (rounded to dt): every sequence's maximum
// score rises along its blocks.
void grow_keys(Problem& pr, const AttentionShape& sh, KvDtype dt, int blocks, float rate) {
  float* k = const_cast<float*>(pr.kv.k());
  const size_t per_block = size_t(sh.block_size) * sh.num_kv_heads * sh.head_dim;
  for (int b = 0; b < blocks; ++b)
    for (size_t i = 0; i < per_block; ++i) {
      float& x = k[b * per_block + i];
      x = from_bits(to_bits(x * (1.f + rate * b), dt), dt);
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
      grow_keys(pr, sh, dt, blocks, 0.25f);
      pr.upload_kv();
      const CascadePlan plan = batch.plan();
      expect_close(pr.run_cascade(plan), testutil::run_cascade(pr.kv, pr.q, plan), tolerance(dt),
                   label(dt, sh, "rising scores, cascade"));
      expect_close(pr.run_flat(batch), testutil::run_flat(pr.kv, pr.q, batch), tolerance(dt),
                   label(dt, sh, "rising scores, flat"));
    }
  }
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

// The warp-specialised prefix pass (sm_90): 128-row items over two consumer warpgroups, the
// second all padding when a node's rows end in the first; 40 tokens of 16-token blocks past the
// last whole stage; keys that grow along the cache (the softmax reference moves while P V of the
// tile before is in flight); over 16-bit and FP8 caches; and planned for 3 SMs, so that each
// persistent CTA runs many items and its stage ring wraps many times across them. Same bits on
// the third launch of one upload.
TEST_F(CudaAttentionTest, WarpSpecialisedPrefixPassMatchesCpuTwin) {
  if (!cuda::current_device_has_ws_prefix()) GTEST_SKIP() << "needs an sm_90 device";
  const cuda::KvQuant fp8{true, 0.37f, 1.9f};
  for (int variant = 0; variant < 3; ++variant) {
    const KvDtype dt = variant == 0 ? KvDtype::kF16 : KvDtype::kBF16;
    const cuda::KvQuant quant = variant == 2 ? fp8 : cuda::KvQuant{};
    // {head_dim, group, block_size}; 5-token blocks put a producer thread's 8 rows of a stage in
    // several blocks.
    for (auto [head_dim, group, block_size] :
         {std::array{64, 4, 16}, std::array{128, 1, 16}, std::array{128, 4, 16},
          std::array{128, 8, 16}, std::array{128, 4, 5}}) {
      const AttentionShape sh = testutil::make_shape(head_dim, group, 2, block_size);
      const int n = 40, blocks = 70 + 9 + n * (100 / block_size + 4) + 8;
      Problem pr(sh, dt, blocks, n, rng_, quant);
      TreeBatch batch(pr.kv, n);
      std::vector<int32_t> all(n), few(5);
      for (int s = 0; s < n; ++s)
        all[s] = s;
      for (int s = 0; s < 5; ++s)
        few[s] = 3 * s;
      batch.share(all, 70);
      batch.share(few, 9);
      batch.add_suffixes(random_lens(rng_, n, 0, 100), 3);
      if (!quant.fp8) grow_keys(pr, sh, dt, blocks, 0.05f);
      pr.upload_kv();
      const CascadePlan plan = batch.plan();
      const Output want = testutil::run_cascade(pr.kv, pr.q, plan);
      for (int sms : {0, 3}) {
        ASSERT_TRUE(cuda::make_device_plan(plan, sh, sms, ws_prefix()).ws_prefix);
        const Output got = pr.run_cascade(plan, ws_prefix(), 1, sms);
        const std::string what = std::string(quant.fp8 ? "fp8 " : "") + "ws prefix pass, " +
                                 (sms == 0 ? "all SMs" : "3 SMs");
        expect_close(got, want, tolerance(dt), label(dt, sh, what.c_str()));
        const Output again = pr.run_cascade(plan, ws_prefix(), 3, sms);
        EXPECT_EQ(again.out, got.out) << label(dt, sh, (what + ", deterministic").c_str());
        EXPECT_EQ(again.lse, got.lse) << label(dt, sh, (what + ", deterministic").c_str());
      }
    }
  }
}

}  // namespace
}  // namespace kvc::kernels::attention_test
