// The decode GEMM on Hopper: y[m, n] = x[m, k] · w[n, k]ᵀ for the few rows of a decode step
// (m ≤ 128), where the weights' bytes, not the arithmetic, set the time. cuBLASLt reaches 46-74%
// of the H200's read bandwidth at 128 rows (bench/results/engine-h200.md); this kernel streams
// the weights with the copy engine (TMA, 128-byte swizzle, four stages in flight) into wgmma
// with the operands swapped (the weights' 256-row tile is wgmma's M, the ≤ 128 activation rows
// its N), and splits K over a thread-block cluster when there are too few weight tiles to fill
// the GPU: the cluster's CTAs add their fp32 partial tiles through distributed shared memory
// (fixed order: deterministic) and each stores a slice, so no partial reaches device memory.
// CPU twin: cpu::matmul (tests/kernels/cuda/decode_gemm_test.cc).
#pragma once

#include <cuda_runtime_api.h>

namespace kvc::kernels::cuda {

constexpr int kDecodeGemmMaxRows = 128;

// Whether decode_gemm runs here: a compute-capability 9.0 device (the kernel is sm_90a code).
bool decode_gemm_supported();

// How decode_gemm cuts a shape: weight tiles of 256 rows, `splits` CTAs per tile along K (one
// cluster), `chunks_per_split` 64-wide K steps each.
struct DecodeGemmShape {
  int tiles = 0;
  int splits = 0;
  int chunks_per_split = 0;
};
// The cut decode_gemm uses for n x k on this device (splits = 0: chosen to fill the GPU with
// one wave of co-resident clusters).
DecodeGemmShape decode_gemm_shape(int n, int k, int splits = 0);

// Clusters of `size` CTAs (1-8) of the kernel that fit on the device at once (0: none or no
// device).
int decode_gemm_resident_clusters(int size);

// Whether decode_gemm takes these arguments: m in [1, 128], k and n multiples of 8, x and w
// 16-byte aligned (the copy engine's rules), y 16-byte aligned.
bool decode_gemm_fits(const void* x, const void* w, const void* y, int m, int n, int k);

// y = x · wᵀ: x [m, k] bf16, w [n, k] bf16, y [m, n] bf16 (f32_out false) or fp32, row-major,
// densely packed. splits as in decode_gemm_shape. Returns cudaErrorNotSupported when the device
// or the arguments do not fit, or the launch error.
cudaError_t decode_gemm(const void* x, const void* w, void* y, int m, int n, int k, bool f32_out,
                        cudaStream_t stream, int splits = 0);

}  // namespace kvc::kernels::cuda
