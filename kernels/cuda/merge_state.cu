#include "kernels/cuda/merge_state.h"

#include <math_constants.h>

namespace kvc::kernels::cuda {
namespace {

// One block row per (row); threads stride over head_dim. The weights are computed once per row.
__global__ void merge_state_kernel(int head_dim, const float* __restrict__ o_a,
                                   const float* __restrict__ lse_a, float* __restrict__ o_b,
                                   float* __restrict__ lse_b) {
  const int row = blockIdx.x;
  const float la = lse_a[row], lb = lse_b[row];
  const float m = fmaxf(la, lb);
  float wa = 0.f, wb = 0.f;
  if (m != -CUDART_INF_F) {
    wa = la == -CUDART_INF_F ? 0.f : expf(la - m);
    wb = lb == -CUDART_INF_F ? 0.f : expf(lb - m);
  }
  const float sum = wa + wb;
  const float inv = sum > 0.f ? 1.f / sum : 0.f;
  const float* a = o_a + static_cast<size_t>(row) * head_dim;
  float* b = o_b + static_cast<size_t>(row) * head_dim;
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    // Zero weights must not pick up NaN from an identity state's unused output.
    const float va = wa > 0.f ? wa * a[d] : 0.f;
    const float vb = wb > 0.f ? wb * b[d] : 0.f;
    b[d] = (va + vb) * inv;
  }
  __syncthreads();  // every thread read lse_b[row] before it is overwritten
  if (threadIdx.x == 0) lse_b[row] = sum > 0.f ? m + logf(sum) : -CUDART_INF_F;
}

}  // namespace

cudaError_t merge_state(int rows, int head_dim, const float* o_a, const float* lse_a, float* o_b,
                        float* lse_b, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  const int threads = head_dim >= 128 ? 128 : 64;
  merge_state_kernel<<<rows, threads, 0, stream>>>(head_dim, o_a, lse_a, o_b, lse_b);
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
