// Chunked causal prefill attention on the device over a paged KV cache, on tensor cores: the CUDA
// twin of kernels::cpu::paged_prefill for a whole mixed prefill batch in one launch. Chunk c is
// num_tokens[c] = q_indptr[c + 1] - q_indptr[c] query tokens at positions
// [start_pos[c], start_pos[c] + num_tokens[c]) of one sequence; the KV of positions
// [0, start_pos[c] + num_tokens[c]) is already in the blocks
// block_indices[block_indptr[c] ..] (the sequence's block table from position 0, so chunks of
// prefix-cached prompts may share blocks). Query token i of the chunk attends positions
// [0, start_pos[c] + i].
//
// Plan on the host, run on the device (as cascade_decode): make_prefill_plan turns host copies of
// q_indptr and start_pos into a work list of (chunk, KV head, tile of stacked query rows) items,
// heaviest first; upload_prefill_plan copies it into a caller-owned device buffer. The launch
// allocates nothing, so it can be captured in a CUDA graph once the plan is uploaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/attention_shape.h"
#include "kernels/cuda/attention.h"  // KvDtype

namespace kvc::kernels::cuda {

// Stacked query rows of one work item (a CTA: 4 warps x 16 rows). Row r of a chunk's stacked
// matrix for KV head h is token r / group, query head h * group + r % group, so each K/V tile is
// staged once for the whole GQA group.
inline constexpr int kPrefillRowTile = 64;

// The work list of one prefill launch. Plain data; rebuild it when the batch changes.
struct PrefillPlan {
  int32_t num_chunks = 0;
  int32_t num_tokens = 0;    // q_indptr[num_chunks]: rows of q and out
  int32_t num_items = 0;     // CTAs of the launch
  int64_t num_kv_tiles = 0;  // sum over items of the 64-token KV tiles each reads (work estimate)
  // num_items x {chunk, kv_head, row tile, KV tiles}, most KV tiles first (ties in chunk, row
  // tile, KV head order), so long items start first and short ones fill the tail.
  std::vector<int32_t> host;
  const int32_t* device = nullptr;  // set by upload_prefill_plan

  size_t device_bytes() const { return host.size() * sizeof(int32_t); }
};

// q_indptr: [num_chunks + 1], non-decreasing from q_indptr[0] = 0; start_pos: [num_chunks], >= 0;
// host copies of the arrays the launch reads on the device.
PrefillPlan make_prefill_plan(const AttentionShape& shape, const int32_t* q_indptr,
                              const int32_t* start_pos, int num_chunks);

// Bytes of the device buffer the plan is uploaded into (its only workspace).
size_t prefill_workspace_bytes(const PrefillPlan& plan);

// Copies plan.host into workspace (at least prefill_workspace_bytes(plan), 16-byte aligned) and
// points plan.device at it. The copy is asynchronous on `stream`.
cudaError_t upload_prefill_plan(PrefillPlan& plan, void* workspace, size_t workspace_bytes,
                                cudaStream_t stream = nullptr);

// Causal prefill of every chunk of the plan. q, out: [num_tokens, num_q_heads, head_dim] in
// `dtype` (rows in q_indptr order); lse: [num_tokens, num_q_heads] fp32, natural log, or null.
// k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim] in `dtype`, or E4M3 codes
// under quant.fp8 (attention.h KvQuant: bf16 q and out, products in fp16). q_indptr,
// block_indptr ([num_chunks + 1]), block_indices and start_pos ([num_chunks]) are device arrays
// holding the values the plan was made from.
// Supported: head_dim 64 or 128, any GQA group, any block_size; fp32 softmax and accumulation.
// Returns cudaErrorInvalidValue for an unsupported shape or a plan that was not uploaded, else
// the launch error.
cudaError_t paged_prefill(const AttentionShape& shape, KvDtype dtype, const PrefillPlan& plan,
                          const void* q, const void* k_cache, const void* v_cache,
                          const int32_t* q_indptr, const int32_t* block_indptr,
                          const int32_t* block_indices, const int32_t* start_pos, void* out,
                          float* lse, cudaStream_t stream = nullptr, const KvQuant& quant = {});

}  // namespace kvc::kernels::cuda
