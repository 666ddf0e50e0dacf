// Division by a run-time constant (a block size), on the host and the device; shared by the
// attention kernels (attention.cu, prefill_attention.cu).
#pragma once

#include <cstdint>

namespace kvc::kernels::cuda {

// t / d for 0 <= t < 2^31 by a multiply-high and a shift (mul == 0 encodes d == 1): with
// p = 31 + ceil(log2 d) and mul = ceil(2^p / d) < 2^32 the error t (mul - 2^p / d) / 2^p stays
// below 2^-ceil(log2 d) <= 1 / d, so the floor is exact.
struct FastDiv {
  uint32_t mul, shr;
  static FastDiv make(int d) {
    if (d == 1) return {0, 0};
    int log2_up = 0;
    while ((1 << log2_up) < d)
      ++log2_up;
    const int p = 31 + log2_up;
    return {static_cast<uint32_t>(((uint64_t{1} << p) + d - 1) / d), static_cast<uint32_t>(p - 32)};
  }
  __host__ __device__ int operator()(int t) const {
#ifdef __CUDA_ARCH__
    const uint32_t hi = __umulhi(static_cast<uint32_t>(t), mul);
#else
    const uint32_t hi = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(t)} * mul) >> 32);
#endif
    return mul == 0 ? t : static_cast<int>(hi >> shr);
  }
};

}  // namespace kvc::kernels::cuda
