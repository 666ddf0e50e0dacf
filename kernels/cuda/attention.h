// Decode attention on the device over a paged KV cache: flat paged decode (the baseline) and
// cascade decode that executes a kernels::CascadePlan (prefix passes on tensor cores, suffix pass,
// one merge). The CUDA twins of kernels/cpu/attention.h: same semantics, natural-log LSE, an empty
// key set gives output 0 and LSE -inf.
//
// Dtypes: q, k_cache, v_cache and out are all fp16 or all bf16 (KvDtype), or (KvQuant::fp8) q and
// out bf16 over caches of E4M3 codes; lse is fp32; partial results in the workspace are fp32.
// Layouts: kernels/attention_shape.h (NHD paged KV). Supported: head_dim 64 or 128, any GQA group,
// any block_size. Every launcher returns the launch error (cudaSuccess or the first failure) and
// allocates nothing: the caller owns the plan buffer and the workspace, so a step can be captured
// in a CUDA graph once the plan is uploaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/attention_shape.h"
#include "kernels/cascade_plan.h"

namespace kvc::kernels::cuda {

enum class KvDtype { kF16, kBF16 };

// How the caches hold keys and values. Default: in the KvDtype. fp8 (--kv-cache-dtype fp8): as
// E4M3 codes, one byte per element, under one scale for K and one for V (a layer's; the value is
// the code's value times the scale, kernels/fp8_rule.h); q and out stay bf16 (KvDtype::kBF16
// only). The attention kernels stage the codes, widen them to fp16 in shared memory (exact: every
// E4M3 value is an fp16 value) and run the products in fp16 (q rounded to fp16 once, saturating
// at +-65504) with k_scale folded into the softmax scale and v_scale into the output.
struct KvQuant {
  bool fp8 = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Tokens of one pipeline stage of every attention kernel here: node chunks and decode splits are
// multiples of it.
inline constexpr int kKvTileTokens = 64;
// Stacked query rows (members x GQA group) of one prefix-pass work item: 4 warps x 16 rows.
inline constexpr int kNodeRowTile = 64;
// CTAs of the cascade kernel resident on one SM (its launch bounds; the planner's slots).
inline constexpr int kCascadeCtasPerSm = 3;
// Stacked query rows of one item of the warp-specialised prefix pass (sm_90a: one CTA per SM, a
// producer warpgroup and two consumer warpgroups of 64 rows on the same K/V stages).
inline constexpr int kWsNodeRowTile = 128;

// How each sequence's KV range is cut across CTAs: split j of a sequence covers tokens
// [j * split_tokens, (j + 1) * split_tokens).
struct DecodeSplit {
  int32_t num_splits = 1;
  int32_t split_tokens = kKvTileTokens;
};

// The split (a multiple of kKvTileTokens) that minimises waves x split length for `rows` CTA rows
// (sequences x head groups) of max_seq_len tokens over `slots` resident CTAs (deterministic: host
// arithmetic only).
DecodeSplit choose_decode_split(int64_t rows, int max_seq_len, int slots);

// KV heads of one decode CTA. The cascade kernel's decode CTAs (4 warps, the same shared memory
// as a prefix CTA, three per SM) cover 4 consecutive KV heads; flat decode uses 8-warp CTAs over 8
// heads (one per SM at head_dim 128) when num_kv_heads % 8 == 0. Each warp owns one KV head and a
// token's heads of the CTA are one contiguous run in the NHD layout.
inline constexpr int kCascadeHeadsPerCta = 4;
inline constexpr int kDecodeHeadsPerCta = 8;
// Whether flat decode takes the 8-head CTAs (else the cascade kernel's 4-head decode CTAs).
inline bool decode_wide_path(const AttentionShape& shape) {
  return shape.num_kv_heads % kDecodeHeadsPerCta == 0;
}
// The split paged_decode uses for this shape.
DecodeSplit choose_decode_split(const AttentionShape& shape, int num_seqs, int max_seq_len,
                                int num_sms);

// SMs of the current device (queried once per process).
int current_device_sms();
// Whether the current device runs the warp-specialised prefix pass (compute capability 9.0, the
// sm_90a build); false without a device.
bool current_device_has_ws_prefix();
// PlanOptions::ws_prefix for the engine's decode steps from the environment (read once):
// KVC_WS_PREFIX=1 turns the warp-specialised prefix pass on (0 or unset: off). A knob for
// same-binary A/B runs of `kvcascade bench engine`.
int ws_prefix_override();

// A CascadePlan compiled for the device: work lists and partial-slot offsets packed into one int32
// array (`host`), copied with one cudaMemcpyAsync into a caller-owned device buffer by
// upload_plan. Plain data; rebuild it when the plan changes.
struct DeviceCascadePlan {
  int32_t num_seqs = 0;
  int32_t num_nodes = 0;
  int32_t num_node_items = 0;     // (node, kv_head, chunk, row tile) work items
  int32_t node_chunk_tokens = 0;  // every node's KV is cut into chunks of this many tokens
  int32_t num_prefix_ctas = 0;    // persistent CTAs that run the node items
  // The prefix pass runs on its own launch of warp-specialised CTAs (one per SM, items of
  // kWsNodeRowTile rows) before the suffix pass, instead of sharing the cascade kernel's grid.
  bool ws_prefix = false;
  DecodeSplit suffix;      // the suffix pass's split
  bool wide_path = false;  // num_kv_heads % 8 == 0 and no nodes (or ws_prefix): the suffix pass
                           // runs on the 8-head flat-decode CTAs
  int32_t max_suffix_len = 0;
  int64_t num_node_units = 0;  // partial units of the node passes (chunk x member)

  // Word offsets into `host` (and the uploaded copy) of each array.
  struct Offsets {
    int64_t node_block_indptr = 0, node_block_indices = 0, node_seq_indptr = 0,
            node_seq_indices = 0, node_unit_base = 0, node_items = 0, suffix_block_indptr = 0,
            suffix_block_indices = 0, suffix_len = 0, seq_unit_indptr = 0, seq_units = 0;
  } offsets;
  std::vector<int32_t> host;
  const int32_t* device = nullptr;  // set by upload_plan

  size_t device_bytes() const { return host.size() * sizeof(int32_t); }
  // Partial units: the node passes' units, then num_splits per sequence for the suffix pass. A
  // unit is [num_q_heads, head_dim] fp32 outputs plus [num_q_heads] fp32 LSE.
  int64_t num_units() const { return num_node_units + int64_t{num_seqs} * suffix.num_splits; }
};

// Planning knobs for experiments and tests; the defaults are what cascade decode should use.
struct PlanOptions {
  int prefix_ctas_per_sm = 0;  // 1..3 forces that many prefix CTAs per SM; 0: cost model
  // 1: the warp-specialised prefix pass (DeviceCascadePlan::ws_prefix) where the device has it
  // (sm_90); 0 or -1: the shared grid. Opt-in: measured at par with the shared grid, not faster
  // (docs/kernels-cuda.md, Round 8), so the cost model does not choose it.
  int ws_prefix = 0;
  bool no_wide_path = false;  // a plan without nodes still runs on the cascade kernel's CTAs
  // The cache's bytes per element (1: FP8 codes, KvQuant::fp8): the cost model's KV bytes, and
  // its prefix tiles' time (an FP8 prefix item widens its codes first).
  int kv_element_bytes = 2;
};

// Precondition: the CascadePlan's own (every node's span ends before each member's position;
// blocks in range of the cache). num_sms 0: the current device's.
DeviceCascadePlan make_device_plan(const CascadePlan& plan, const AttentionShape& shape,
                                   int num_sms = 0, const PlanOptions& options = {});

// Copies plan.host into device_buffer (at least plan.device_bytes(), 16-byte aligned) and points
// plan.device at it. The copy is asynchronous on `stream`.
cudaError_t upload_plan(DeviceCascadePlan& plan, void* device_buffer, size_t device_buffer_bytes,
                        cudaStream_t stream = nullptr);

// Bytes of workspace cascade_decode needs for this plan (fp32 partials of every unit).
size_t cascade_workspace_bytes(const DeviceCascadePlan& plan, const AttentionShape& shape);

// The attention output as an FP8 GEMM's input, written by the merge instead of `out`: each
// sequence's row (num_q_heads x head_dim values, rounded to bf16 first) as E4M3 codes at
// q + s * num_q_heads * head_dim under one scale (kernels/fp8_rule.h row_scale of the row's
// largest magnitude), stored at scales[s + b * scale_stride] for b < scale_blocks (gemm.h
// Fp8ScaleLayout): bit for bit what ops.h quantize_rows_fp8 makes of the bf16 output, with no pass
// of its own. bf16 queries only; num_q_heads <= 128.
struct Fp8RowsOut {
  uint8_t* q = nullptr;
  float* scales = nullptr;
  int64_t scale_stride = 0;
  int scale_blocks = 1;
};

// Cascade decode: one launch runs every prefix-pass item (tensor cores, on num_prefix_ctas
// persistent CTAs first in the grid) and every suffix split (4-head decode CTAs after them, which
// share the SMs with the prefix CTAs when the plan chose one prefix CTA per SM); one merge launch
// then folds, per (sequence, query head), its nodes' chunks in plan order, then its suffix splits
// in order (deterministic for a fixed plan). q, out: [num_seqs, num_q_heads, head_dim] in `dtype`;
// lse: [num_seqs, num_q_heads] fp32 or null. k_cache, v_cache: [num_blocks, block_size,
// num_kv_heads, head_dim] in `dtype` (E4M3 codes under quant.fp8). With fp8_out the output goes
// there instead of `out` (which may then be null).
cudaError_t cascade_decode(const AttentionShape& shape, KvDtype dtype,
                           const DeviceCascadePlan& plan, const void* q, const void* k_cache,
                           const void* v_cache, void* out, float* lse, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream = nullptr,
                           const KvQuant& quant = {}, const Fp8RowsOut* fp8_out = nullptr);

// Workspace of paged_decode for num_seqs sequences of at most max_seq_len tokens.
size_t paged_decode_workspace_bytes(const AttentionShape& shape, int num_seqs, int max_seq_len,
                                    int num_sms = 0);

// Flat paged decode (split-KV): query s attends the first seq_lens[s] tokens of its blocks
// block_indices[block_indptr[s] .. block_indptr[s + 1]). All index arrays are device pointers;
// max_seq_len (host) bounds every seq_lens[s] and fixes the split.
// q, out: [num_seqs, num_q_heads, head_dim] in `dtype`; lse: [num_seqs, num_q_heads] fp32 or null.
cudaError_t paged_decode(const AttentionShape& shape, KvDtype dtype, const void* q,
                         const void* k_cache, const void* v_cache, const int32_t* block_indptr,
                         const int32_t* block_indices, const int32_t* seq_lens, int num_seqs,
                         int max_seq_len, void* out, float* lse, void* workspace,
                         size_t workspace_bytes, cudaStream_t stream = nullptr,
                         const KvQuant& quant = {});

}  // namespace kvc::kernels::cuda
