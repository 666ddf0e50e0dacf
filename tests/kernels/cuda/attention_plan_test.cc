// The cascade plan's host-side choices (kernels/cuda/attention_plan.cc): prefix CTAs per SM by
// the cost model, and decode splits that fill the GPU. No device needed.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cascade_plan.h"
#include "kernels/cuda/attention.h"

namespace kvc::kernels {
namespace {

// The seed's rollout: 2 groups of 64 siblings under 4,096-token prefixes (16-token blocks), each
// sibling `suffix` private tokens.
CascadePlan seed_example(int suffix) {
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
}

TEST(CudaAttentionPlanTest, PrefixCtasFollowTheCostModel) {
  const AttentionShape sh{32, 8, 128, 16, 0.088f};
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

// The warp-specialised prefix pass, forced (PlanOptions::ws_prefix = 1) where the device has it:
// 128-row items (the seed's 256 stacked rows of a node and KV head are two), at most one CTA per
// SM, and the suffix pass after it as flat decode plans it (8-head CTAs). Elsewhere, or not
// forced, or forbidden: the shared grid's plan.
TEST(CudaAttentionPlanTest, WarpSpecialisedPrefixPassPlan) {
  const AttentionShape sh{32, 8, 128, 16, 0.088f};
  cuda::PlanOptions ws, off;
  ws.ws_prefix = 1;
  off.ws_prefix = -1;
  for (int suffix : {16, 1024}) {
    const CascadePlan plan = seed_example(suffix);
    const cuda::DeviceCascadePlan shared = cuda::make_device_plan(plan, sh, 132);
    EXPECT_FALSE(shared.ws_prefix);
    EXPECT_FALSE(cuda::make_device_plan(plan, sh, 132, off).ws_prefix);
    const cuda::DeviceCascadePlan d = cuda::make_device_plan(plan, sh, 132, ws);
    if (!cuda::current_device_has_ws_prefix()) {
      EXPECT_FALSE(d.ws_prefix);
      EXPECT_EQ(d.host, shared.host);
      continue;
    }
    ASSERT_TRUE(d.ws_prefix);
    const int chunks = (4096 + d.node_chunk_tokens - 1) / d.node_chunk_tokens;
    EXPECT_EQ(d.node_chunk_tokens % cuda::kKvTileTokens, 0);
    EXPECT_EQ(d.num_node_items, 2 * 8 * 2 * chunks);  // nodes x KV heads x 128-row tiles x chunks
    EXPECT_LE(d.num_prefix_ctas, 132);
    EXPECT_EQ(d.num_prefix_ctas, std::min(d.num_node_items, 132));
    EXPECT_TRUE(d.wide_path);
    const cuda::DecodeSplit flat = cuda::choose_decode_split(sh, 128, suffix, 132);
    EXPECT_EQ(d.suffix.num_splits, flat.num_splits);
    EXPECT_EQ(d.suffix.split_tokens, flat.split_tokens);
    EXPECT_EQ(d.num_node_units, int64_t{2} * chunks * 64);  // chunk x member, per node
  }
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
