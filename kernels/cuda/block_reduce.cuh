// CTA-wide reductions of one float per thread (a warp's butterfly, then the warps' partials in
// fixed order, so every thread gets the same bits), shared by the model-op kernels
// (ops_common.cuh) and the attention merge (attention.cu). Included inside each kernel file's
// anonymous namespace, like warp_ops.cuh, so every file keeps its own copy.
#pragma once

__device__ float block_sum(float v) {
  __shared__ float partial[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float sum = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w)
    sum += partial[w];
  return sum;  // the same value in every thread (fixed order)
}

__device__ float block_max(float v) {
  __shared__ float partial[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float m = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w)
    m = fmaxf(m, partial[w]);
  return m;
}
