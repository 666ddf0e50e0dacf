// Merge of partial attention states on the device: the CUDA twin of kernels/cpu merge_state.
#pragma once

#include <cuda_runtime_api.h>

namespace kvc::kernels::cuda {

// In place: (o_b, lse_b) := merge((o_a, lse_a), (o_b, lse_b)), natural-log LSE, fp32, with the
// CPU twin's formula and its identity (lse = -inf) and empty-merge (o = 0, lse = -inf) rules.
// o_a, o_b: [rows, head_dim]; lse_a, lse_b: [rows]. Device pointers.
cudaError_t merge_state(int rows, int head_dim, const float* o_a, const float* lse_a, float* o_b,
                        float* lse_b, cudaStream_t stream = nullptr);

}  // namespace kvc::kernels::cuda
