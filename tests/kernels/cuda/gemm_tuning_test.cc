// cuBLASLt's candidates timed per row bucket (kernels/cuda/gemm.h Gemm::set_tuning): a tuned
// call's result is that of an untuned Gemm (an accumulating call adds once), the timing happens
// once per bucket at the bucket's row count, never inside a stream capture (the capture still
// succeeds and replays), and shapes under the weight threshold are not timed.
#include "kernels/cuda/gemm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cuda/device.h"
#include "tests/kernels/cuda/device_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::DeviceBuffer;
using cuda::GemmOut;
using testutil::download;
using testutil::random_bf16;
using testutil::rel_l2;
using testutil::to_bits;
using testutil::to_floats;
using testutil::upload;

class CudaGemmTuningTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }

  // y = x · wᵀ (or y0 + x · wᵀ) of an m x n x k bf16 GEMM through `g`, as floats.
  std::vector<float> run(cuda::Gemm& g, int m, int n, int k, const DeviceBuffer& x,
                         const DeviceBuffer& w, const std::vector<float>* y0 = nullptr,
                         cudaStream_t stream = nullptr) {
    DeviceBuffer y = y0 ? upload(to_bits(*y0)) : DeviceBuffer(size_t(m) * n * 2);
    EXPECT_EQ(g.run(x.data(), w.data(), y.data(), m, n, k, GemmOut::kBF16, stream, y0 != nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return to_floats(download<uint16_t>(y, size_t(m) * n));
  }

  std::mt19937 rng_{7};
};

TEST_F(CudaGemmTuningTest, TunedCallsGiveTheUntunedResultAndAccumulateOnce) {
  const int m = 64, n = 1024, k = 4096;
  DeviceBuffer x = upload(to_bits(random_bf16(rng_, size_t(m) * k)));
  DeviceBuffer w = upload(to_bits(random_bf16(rng_, size_t(n) * k, 0.05f)));
  const std::vector<float> y0 = random_bf16(rng_, size_t(m) * n, 4.0f);
  cuda::Gemm plain, tuned;
  ASSERT_TRUE(plain.ok() && tuned.ok());
  tuned.set_tuning(true, 0);
  const std::vector<float> want = run(plain, m, n, k, x, w);
  const std::vector<float> got = run(tuned, m, n, k, x, w);
  EXPECT_LT(rel_l2(got, want), 1e-2);
  ASSERT_EQ(tuned.tunings().size(), 1u);
  const cuda::Gemm::Tuning& t = tuned.tunings()[0];
  EXPECT_EQ(t.m, m);
  EXPECT_EQ(t.n, n);
  EXPECT_EQ(t.k, k);
  EXPECT_FALSE(t.fp8);
  EXPECT_GE(t.candidates, 1);
  EXPECT_GT(t.first_us, 0.0f);
  EXPECT_LE(t.chosen_us, t.first_us);
  // Again: timed once per shape.
  EXPECT_LT(rel_l2(run(tuned, m, n, k, x, w), want), 1e-2);
  EXPECT_EQ(tuned.tunings().size(), 1u);

  // Accumulating (its own plan, the bucket's choice): y0 + x · wᵀ, added once.
  std::vector<float> sum = want;
  for (size_t i = 0; i < sum.size(); ++i)
    sum[i] += y0[i];
  EXPECT_LT(rel_l2(run(tuned, m, n, k, x, w, &y0), sum), 1e-2);
  EXPECT_EQ(tuned.tunings().size(), 1u);
}

TEST_F(CudaGemmTuningTest, TimedOncePerRowBucketAtTheBucketsRows) {
  const int n = 1024, k = 4096;
  DeviceBuffer w = upload(to_bits(random_bf16(rng_, size_t(n) * k, 0.05f)));
  cuda::Gemm plain, tuned;
  ASSERT_TRUE(plain.ok() && tuned.ok());
  tuned.set_tuning(true, 0);
  // 50 and 33 rows share the bucket of 64, 100 goes to 128: two timings, at 64 and 128 rows.
  for (int m : {50, 33, 100, 64, 128}) {
    DeviceBuffer x = upload(to_bits(random_bf16(rng_, size_t(m) * k)));
    EXPECT_LT(rel_l2(run(tuned, m, n, k, x, w), run(plain, m, n, k, x, w)), 1e-2) << m;
  }
  ASSERT_EQ(tuned.tunings().size(), 2u);
  EXPECT_EQ(tuned.tunings()[0].m, 64);
  EXPECT_EQ(tuned.tunings()[1].m, 128);
}

TEST_F(CudaGemmTuningTest, NotTimedWhileCapturedThenOnTheNextEagerCall) {
  const int m = 32, n = 2048, k = 2048;
  DeviceBuffer x = upload(to_bits(random_bf16(rng_, size_t(m) * k)));
  DeviceBuffer w = upload(to_bits(random_bf16(rng_, size_t(n) * k, 0.05f)));
  cuda::Gemm plain, tuned;
  ASSERT_TRUE(plain.ok() && tuned.ok());
  tuned.set_tuning(true, 0);
  const std::vector<float> want = run(plain, m, n, k, x, w);

  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer y(size_t(m) * n * 2);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(tuned.run(x.data(), w.data(), y.data(), m, n, k, GemmOut::kBF16, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_TRUE(tuned.tunings().empty());
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_LT(rel_l2(to_floats(download<uint16_t>(y, size_t(m) * n)), want), 1e-2);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);

  EXPECT_LT(rel_l2(run(tuned, m, n, k, x, w, nullptr, s), want), 1e-2);
  EXPECT_EQ(tuned.tunings().size(), 1u);
  cudaStreamDestroy(s);
}

TEST_F(CudaGemmTuningTest, SmallWeightsAndManyRowsAreNotTimed) {
  cuda::Gemm g;
  ASSERT_TRUE(g.ok());
  g.set_tuning(true);  // the default threshold: 8 MiB of weights
  {
    const int m = 16, n = 256, k = 512;
    DeviceBuffer x = upload(to_bits(random_bf16(rng_, size_t(m) * k)));
    DeviceBuffer w = upload(to_bits(random_bf16(rng_, size_t(n) * k, 0.05f)));
    run(g, m, n, k, x, w);
  }
  g.set_tuning(true, 0);
  {
    const int m = cuda::Gemm::kTuneMaxRows + 1, n = 256, k = 512;  // a prefill's rows
    DeviceBuffer x = upload(to_bits(random_bf16(rng_, size_t(m) * k)));
    DeviceBuffer w = upload(to_bits(random_bf16(rng_, size_t(n) * k, 0.05f)));
    run(g, m, n, k, x, w);
  }
  EXPECT_TRUE(g.tunings().empty());
}

TEST_F(CudaGemmTuningTest, RawFp8GemmTunedGivesTheUntunedResult) {
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (prop.major < 9) GTEST_SKIP() << "FP8 GEMMs need sm_89 or later";
  const int m = 16, n = 2048, k = 4096;
  // E4M3 codes of small magnitude, both signs (0x20-0x37: 2^-4 up to about 0.9), never NaN.
  std::uniform_int_distribution<int> code(0x20, 0x37), sign(0, 1);
  auto codes = [&](size_t count) {
    std::vector<uint8_t> v(count);
    for (auto& c : v)
      c = static_cast<uint8_t>(code(rng_) | (sign(rng_) << 7));
    return v;
  };
  DeviceBuffer x = upload(codes(size_t(m) * k)), w = upload(codes(size_t(n) * k));
  cuda::Gemm plain, tuned;
  ASSERT_TRUE(plain.ok() && tuned.ok());
  tuned.set_tuning(true, 0);
  std::vector<std::vector<float>> out;
  for (cuda::Gemm* g : {&plain, &tuned}) {
    DeviceBuffer y(size_t(m) * n * 2);
    ASSERT_EQ(g->run_fp8_raw(x.data(), w.data(), y.data(), m, n, k, GemmOut::kBF16, nullptr),
              cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    out.push_back(to_floats(download<uint16_t>(y, size_t(m) * n)));
  }
  EXPECT_LT(rel_l2(out[1], out[0]), 1e-2);
  ASSERT_EQ(tuned.tunings().size(), 1u);
  EXPECT_TRUE(tuned.tunings()[0].fp8);
}

}  // namespace
}  // namespace kvc::kernels
