// The Hopper decode GEMM (kernels/cuda/decode_gemm.h) against its CPU twin (cpu::matmul on the same
// bf16 inputs, float32) and against cuBLASLt: every split count the planner can choose, rows 1 to
// 128, edges that are not multiples of the tiles, fp32 and bf16 outputs, a poisoned output
// (every element written, nothing past the end), bit-equal reruns and a CUDA-graph replay.
#include "kernels/cuda/decode_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "tests/kernels/cuda/device_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::DeviceBuffer;
using testutil::download;
using testutil::random_bf16;
using testutil::rel_l2;
using testutil::to_bits;
using testutil::to_floats;
using testutil::upload;

class CudaDecodeGemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
    cudaDeviceProp prop{};
    ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
    if (prop.major != 9 || prop.minor != 0) GTEST_SKIP() << "decode GEMM is sm_90 code";
    // On a Hopper device the kernel must run: a silent fallback would hide a broken kernel.
    ASSERT_TRUE(cuda::decode_gemm_supported());
  }

  struct Case {
    int m, n, k;
    bool f32_out;
    int splits;  // 0: the planner's choice
  };

  // Runs one case; returns the device output as floats after checking the guard past its end.
  std::vector<float> run(const Case& c, const DeviceBuffer& x, const DeviceBuffer& w,
                         cudaStream_t stream = nullptr) {
    const size_t elems = size_t(c.m) * c.n, esize = c.f32_out ? 4 : 2;
    const size_t guard = 4096;
    DeviceBuffer y(elems * esize + guard);
    y.fill_bytes(0xFF);
    EXPECT_EQ(
        cuda::decode_gemm(x.data(), w.data(), y.data(), c.m, c.n, c.k, c.f32_out, stream, c.splits),
        cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint8_t> tail = download<uint8_t>(y, elems * esize + guard);
    for (size_t i = elems * esize; i < tail.size(); ++i) {
      EXPECT_EQ(tail[i], 0xFF) << "wrote past the output at byte " << i;
      if (tail[i] != 0xFF) break;
    }
    if (c.f32_out) return download<float>(y, elems);
    return to_floats(download<uint16_t>(y, elems));
  }

  void check(const Case& c) {
    const std::string what = "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                             " k=" + std::to_string(c.k) + " splits=" + std::to_string(c.splits) +
                             (c.f32_out ? " f32" : " bf16");
    std::vector<float> xh = random_bf16(rng_, size_t(c.m) * c.k);
    std::vector<float> wh = random_bf16(rng_, size_t(c.n) * c.k, 0.05f);
    std::vector<float> want(size_t(c.m) * c.n);
    cpu::matmul(xh.data(), wh.data(), want.data(), c.m, c.n, c.k);
    DeviceBuffer x = upload(to_bits(xh)), w = upload(to_bits(wh));
    std::vector<float> got = run(c, x, w);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << what << ": element " << i << " not written";
    }
    // fp32 out: accumulation order only; bf16 out: one rounding of the output.
    EXPECT_LT(rel_l2(got, want), c.f32_out ? 1e-5 : 5e-3) << what;
    // Deterministic: the same bits again.
    std::vector<float> again = run(c, x, w);
    EXPECT_EQ(0, std::memcmp(got.data(), again.data(), got.size() * 4)) << what << " rerun";
  }

  std::mt19937 rng_{20261202};
};

TEST_F(CudaDecodeGemmTest, MatchesTheCpuTwinOverRowsAndEdges) {
  for (const Case& c : std::vector<Case>{{1, 256, 64, false, 0},
                                         {7, 520, 1000, false, 0},
                                         {128, 256, 64, false, 1},
                                         {33, 1000, 328, true, 0},
                                         {128, 768, 4096, false, 0},
                                         {100, 4104, 512, true, 0},
                                         {64, 264, 8, false, 0}}) {
    check(c);
  }
}

TEST_F(CudaDecodeGemmTest, EverySplitCountAddsUp) {
  for (int splits : {1, 2, 3, 4, 5, 6, 7, 8}) {
    check({128, 512, 2048, false, splits});
    check({17, 256, 1088, true, splits});  // 17 K steps: uneven splits, some short
  }
}

TEST_F(CudaDecodeGemmTest, PlannerFillsTheGpuAtTheLlamaShapes) {
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  // qkv, o, gate/up, down, LM head of Llama-3-8B.
  for (auto [n, k] : std::vector<std::pair<int, int>>{
           {6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}}) {
    const cuda::DecodeGemmShape s = cuda::decode_gemm_shape(n, k);
    EXPECT_EQ(s.tiles, (n + 255) / 256);
    EXPECT_GE(s.splits, 1);
    EXPECT_GE(s.chunks_per_split * s.splits * 64, k) << "n=" << n << " k=" << k;
    if (s.tiles < sms) {
      EXPECT_GT(s.tiles * s.splits, sms / 2) << "n=" << n << " k=" << k;
    }
  }
  check({128, 4096, 4096, false, 0});
  check({128, 1024, 14336, false, 0});
}

TEST_F(CudaDecodeGemmTest, AgreesWithCublasLt) {
  const int m = 128, n = 6144, k = 4096;
  std::vector<float> xh = random_bf16(rng_, size_t(m) * k);
  std::vector<float> wh = random_bf16(rng_, size_t(n) * k, 0.05f);
  DeviceBuffer x = upload(to_bits(xh)), w = upload(to_bits(wh)), y(size_t(m) * n * 2);
  cuda::Gemm g;
  ASSERT_TRUE(g.ok());
  g.set_decode_kernel(false);
  ASSERT_EQ(g.run(x.data(), w.data(), y.data(), m, n, k, cuda::GemmOut::kBF16, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> lt = to_floats(download<uint16_t>(y, size_t(m) * n));
  const std::vector<float> ours = run({m, n, k, false, 0}, x, w);
  EXPECT_LT(rel_l2(ours, lt), 5e-3);
}

TEST_F(CudaDecodeGemmTest, ReplaysInACudaGraph) {
  const Case c{128, 4096, 4096, false, 0};
  std::vector<float> xh = random_bf16(rng_, size_t(c.m) * c.k);
  std::vector<float> wh = random_bf16(rng_, size_t(c.n) * c.k, 0.05f);
  DeviceBuffer x = upload(to_bits(xh)), w = upload(to_bits(wh));
  const std::vector<float> eager = run(c, x, w);
  DeviceBuffer y(size_t(c.m) * c.n * 2);
  y.fill_bytes(0xFF);
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cuda::decode_gemm(x.data(), w.data(), y.data(), c.m, c.n, c.k, false, s), cudaSuccess);
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  const std::vector<float> replayed = to_floats(download<uint16_t>(y, size_t(c.m) * c.n));
  EXPECT_EQ(0, std::memcmp(eager.data(), replayed.data(), eager.size() * 4));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_F(CudaDecodeGemmTest, RefusesWhatItCannotRun) {
  DeviceBuffer x(1 << 20), w(1 << 20), y(1 << 20);
  EXPECT_FALSE(cuda::decode_gemm_fits(x.data(), w.data(), y.data(), 129, 256, 64));  // rows
  EXPECT_FALSE(cuda::decode_gemm_fits(x.data(), w.data(), y.data(), 8, 256, 60));    // k % 8
  EXPECT_FALSE(cuda::decode_gemm_fits(x.as<char>() + 2, w.data(), y.data(), 8, 256, 64));
  EXPECT_EQ(cuda::decode_gemm(x.data(), w.data(), y.data(), 0, 256, 64, false, nullptr),
            cudaErrorNotSupported);
}

}  // namespace
}  // namespace kvc::kernels
