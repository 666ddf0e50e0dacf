// kernels/cuda/nccl_group.h: a group over every GPU this process sees (one on the single-GPU
// machine: the load, initialisation and collective calls of the tensor-parallel path all run),
// a thread per rank, all-reduce (bf16, in place) and all-gather (float32) against their sums and
// concatenations; a group of more ranks than GPUs is refused before NCCL is touched.
// Without NCCL on the library path the collective test skips with the loader's message, unless
// KVC_REQUIRE_NCCL=1 (bench/gpu_tp.sh sets it on the GPU host).
#include "kernels/cuda/nccl_group.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "tests/kernels/cuda/device_test_util.h"

namespace kvc::kernels {
namespace {

using testutil::to_bits;
using testutil::to_floats;

TEST(NcclGroup, MoreRanksThanGpusIsRefused) {
  const int visible = cuda::device_count();
  std::vector<int> devices(static_cast<size_t>(visible) + 1);
  std::iota(devices.begin(), devices.end(), 0);
  auto group = cuda::make_nccl_group(devices);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.error().message.find("this process sees " + std::to_string(visible)),
            std::string::npos)
      << group.error().message;
  if (visible > 0) {
    const std::vector<int> twice{0, 0};
    auto dup = cuda::make_nccl_group(twice);
    ASSERT_FALSE(dup.ok());
    EXPECT_NE(dup.error().message.find("twice"), std::string::npos) << dup.error().message;
  }
}

TEST(NcclGroup, AllReduceAndAllGatherOverEveryVisibleGpu) {
  if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  const int n = cuda::device_count();
  std::vector<int> devices(static_cast<size_t>(n));
  std::iota(devices.begin(), devices.end(), 0);
  auto group = cuda::make_nccl_group(devices);
  const char* require = std::getenv("KVC_REQUIRE_NCCL");
  if (!group.ok() && group.error().message.find("cannot be loaded") != std::string::npos &&
      (require == nullptr || std::string(require) != "1")) {
    GTEST_SKIP() << group.error().message;
  }
  ASSERT_TRUE(group.ok()) << group.error().message;
  std::printf("%s, %d rank(s)\n", cuda::nccl_description().c_str(), n);
  constexpr size_t kCount = 4099;  // not a multiple of anything NCCL splits by
  std::vector<std::string> failures(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      cuda::NcclComm& comm = *(*group)[static_cast<size_t>(r)];
      std::string& fail = failures[static_cast<size_t>(r)];
      if (Status s = comm.bind_thread(); !s.ok()) {
        fail = s.message();
        return;
      }
      // Small integers times (rank + 1): every partial and sum exact in bf16.
      std::vector<float> mine(kCount), want(kCount);
      for (size_t i = 0; i < kCount; ++i) {
        const float base = static_cast<float>(static_cast<int>(i % 7) - 3);
        mine[i] = base * static_cast<float>(r + 1);
        want[i] = base * static_cast<float>(n * (n + 1) / 2);
      }
      const std::vector<uint16_t> bits = to_bits(mine);
      cuda::DeviceBuffer sum(kCount * 2);
      sum.upload(bits.data(), kCount * 2);
      if (Status s = comm.all_reduce_bf16(sum.data(), kCount, nullptr); !s.ok()) {
        fail = s.message();
        return;
      }
      std::vector<float> part(kCount);
      for (size_t i = 0; i < kCount; ++i)
        part[i] = static_cast<float>(r * 100000 + static_cast<int>(i));
      cuda::DeviceBuffer in(kCount * 4), out(kCount * 4 * static_cast<size_t>(n));
      in.upload(part.data(), kCount * 4);
      if (Status s = comm.all_gather_f32(in.data(), kCount, out.data(), nullptr); !s.ok()) {
        fail = s.message();
        return;
      }
      cuda::synchronize_or_die("nccl test");
      std::vector<uint16_t> got_bits(kCount);
      sum.download(got_bits.data(), kCount * 2);
      if (to_floats(got_bits) != want) fail = "rank " + std::to_string(r) + ": wrong sums";
      std::vector<float> gathered(kCount * static_cast<size_t>(n));
      out.download(gathered.data(), gathered.size() * 4);
      for (int q = 0; q < n && fail.empty(); ++q) {
        for (size_t i = 0; i < kCount; ++i) {
          if (gathered[static_cast<size_t>(q) * kCount + i] !=
              static_cast<float>(q * 100000 + static_cast<int>(i))) {
            fail = "rank " + std::to_string(r) + ": rank " + std::to_string(q) +
                   "'s part gathered wrong";
            break;
          }
        }
      }
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (const std::string& f : failures)
    EXPECT_TRUE(f.empty()) << f;
}

}  // namespace
}  // namespace kvc::kernels
