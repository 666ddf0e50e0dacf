#include "kernels/cuda/merge_state.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cuda/device.h"

namespace kvc::kernels {
namespace {

class CudaMergeStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
};

TEST_F(CudaMergeStateTest, MatchesCpuTwinIncludingEmptyStates) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (int head_dim : {64, 128}) {
    const int rows = 1000;
    std::vector<float> oa(rows * head_dim), ob(rows * head_dim), la(rows), lb(rows);
    for (auto& x : oa)
      x = normal(rng);
    for (auto& x : ob)
      x = normal(rng);
    for (int r = 0; r < rows; ++r) {
      la[r] = 20.f * normal(rng);
      lb[r] = 20.f * normal(rng);
      if (r % 10 == 0) la[r] = -kInf;  // identity on the left
      if (r % 15 == 0) lb[r] = -kInf;  // identity on the right (and both, every 30th)
      if (r % 30 == 0) {
        for (int d = 0; d < head_dim; ++d)
          oa[r * head_dim + d] = std::nanf("");  // never read
      }
    }
    cuda::DeviceBuffer d_oa(oa.size() * 4), d_ob(ob.size() * 4), d_la(rows * 4), d_lb(rows * 4);
    d_oa.upload(oa.data(), oa.size() * 4);
    d_ob.upload(ob.data(), ob.size() * 4);
    d_la.upload(la.data(), rows * 4);
    d_lb.upload(lb.data(), rows * 4);
    ASSERT_EQ(cuda::merge_state(rows, head_dim, d_oa.as<float>(), d_la.as<float>(),
                                d_ob.as<float>(), d_lb.as<float>()),
              cudaSuccess);
    cuda::synchronize_or_die("merge_state");
    std::vector<float> got_o(ob.size()), got_l(rows);
    d_ob.download(got_o.data(), got_o.size() * 4);
    d_lb.download(got_l.data(), rows * 4);

    cpu::merge_state(rows, head_dim, oa.data(), la.data(), ob.data(), lb.data());
    double err = 0, norm = 0;
    for (size_t i = 0; i < ob.size(); ++i) {
      ASSERT_FALSE(std::isnan(got_o[i])) << "index " << i;
      err += (got_o[i] - ob[i]) * double(got_o[i] - ob[i]);
      norm += ob[i] * double(ob[i]);
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "head_dim " << head_dim;
    for (int r = 0; r < rows; ++r) {
      if (std::isinf(lb[r])) {
        EXPECT_TRUE(std::isinf(got_l[r]) && got_l[r] < 0) << "row " << r;
      } else {
        EXPECT_NEAR(got_l[r], lb[r], 1e-4f * std::max(1.f, std::fabs(lb[r]))) << "row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace kvc::kernels
