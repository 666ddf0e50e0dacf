// CUDA decode attention over an FP8 (E4M3) cache against the CPU twin, and the merge writing
// the o projection's FP8 rows (attention.h Fp8RowsOut) as the quantize pass would.
#include "tests/kernels/cuda/attention_test_fixture.h"

#include <algorithm>

#include "kernels/cuda/ops.h"

namespace kvc::kernels::attention_test {
namespace {

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

}  // namespace
}  // namespace kvc::kernels::attention_test
