// A Llama-architecture model on the device (with the Qwen options: q/k/v biases, q/k norms): bf16
// weights (or FP8), an fp32 residual stream, a paged bf16 (or FP8) KV cache, cuBLASLt GEMMs,
// chunked causal prefill and flat/cascade decode attention, and sampling on the device (logits
// never leave it unless asked). The engine's CUDA backend (replica/cuda/) drives it through this
// header, which carries no CUDA types: replica/ never includes CUDA headers.
//
// Memory: weights, the KV cache and every workspace are allocated by create() for the capacity
// given; a step allocates only when a cascade plan outgrows the plan/workspace buffers sized at
// start-up (then they grow once and stay).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/cascade_plan.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/gemm_tuning.h"
#include "kernels/model_tensor.h"
#include "kernels/sampling_rule.h"

namespace kvc::kernels::cuda {

class NcclComm;  // kernels/cuda/nccl_group.h

struct LlamaDims {
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int q_heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int vocab = 0;
  float rms_eps = 1e-5f;
  cpu::RopeConfig rope;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // biases on the q, k and v projections (Qwen2)
  bool qk_norm = false;   // per-head RMSNorm of q and k before RoPE (Qwen3)
  // The four matrices of every layer (qkv, o, gate_up, down) stored as FP8 E4M3 with one scale
  // per output channel, quantized on the device as they are uploaded (kernels/fp8_rule.h), and
  // multiplied by FP8 activations with one scale per token (the RMSNorm and SwiGLU kernels write
  // them; the attention output is quantized before the o projection). Embeddings, norms, biases
  // and the LM head stay bf16. Needs hidden, intermediate and the q/k/v widths multiples of 16.
  bool fp8_weights = false;
  // The KV cache as E4M3 codes (--kv-cache-dtype fp8), one byte per element, one K and one V
  // scale per layer (1.0; attention.h KvQuant): twice the blocks in the same memory.
  bool fp8_kv = false;
  // Tensor parallelism (docs/architecture.md "Tensor parallelism"): the model is one
  // rank of a group of tp_size, its dims already the rank's (replica/model/tensor_parallel.h
  // rank_config: query and KV heads and the intermediate size divided), except `vocab`, the
  // whole vocabulary: the embedding is whole, the LM head holds lm_head_rows() rows (its
  // ceil(vocab / tp_size) slice, the last rank's padded; tied_embeddings must then be false) and
  // the ranks' logits are gathered into [samples, vocab] before sampling. The collectives run
  // once set_tensor_parallel gives the model its communicator; tp_size 1 with one runs the same
  // path on one device.
  int tp_size = 1;
  int lm_head_rows() const { return tp_size > 1 ? (vocab + tp_size - 1) / tp_size : vocab; }
};

struct LlamaCapacity {
  int num_blocks = 0;  // KV cache blocks
  int block_size = 16;
  int max_tokens = 512;    // rows of one step: prefill tokens + decode sequences
  int max_chunks = 256;    // prefill chunks of one step
  int max_blocks = 65536;  // prefill block-table entries of one step
  int max_samples = 1024;  // tokens drawn in one step
};

// The tensors of the model (kernels/model_tensor.h), as the device stores them: bf16 (the layer
// matrices FP8 with LlamaDims::fp8_weights). The Qwen tensors have tensor_elements 0 when dims
// lack the option.
// One step, as host arrays (views: nothing is copied until forward).
struct LlamaStep {
  // The KV moves, in order, [n, 3] (kind, block, other) as ops.h move_blocks takes them:
  // copy-on-write copies and, with a host tier (LlamaModel::set_host_blocks), its offloads and
  // loads.
  std::span<const int32_t> moves;
  // Prefill chunks, CSR (replica/backend/backend.h PrefillBatch).
  std::span<const int32_t> prefill_tokens;
  std::span<const int32_t> token_indptr;  // [num_chunks + 1] (empty: no prefill)
  std::span<const int32_t> start_pos;
  std::span<const int32_t> block_indptr;
  std::span<const int32_t> block_indices;
  std::span<const uint8_t> want_logits;
  // Decode.
  std::span<const int32_t> decode_tokens;
  std::span<const int32_t> decode_positions;
  std::span<const int32_t> decode_slots;
  const CascadePlan* plan = nullptr;  // when there are decode tokens
  // Tokens to draw: the logits row each one reads and its parameters.
  std::span<const int32_t> sample_rows;
  std::span<const sampling::SampleParams> sample_params;
  int sample_vocab = 0;  // ids below it are drawn
  // The most top logprobs a sample asks for (sampling::top_logprobs of its params); > 0: the
  // step runs the top-logprobs kernel after sampling and copies its results back.
  int top_logprobs = 0;
  bool return_logits = false;
};

struct LlamaOutput {
  std::vector<int32_t> tokens;  // one per sample
  std::vector<float> logprobs;  // one per sample
  // With LlamaStep::top_logprobs: [samples, kMaxTopLogprobs] each (unused entries -1, -inf).
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
  std::vector<float> logits;  // [logit rows, vocab] when asked
  double host_us = 0;         // forward's host work: staging, plans, launches (until the wait)
  double prep_us = 0;         // of which before the first launch (staging and plans on the host)
  double wait_us = 0;         // waiting for the device at the end of the step
  double device_us = 0;       // the step on the device, first to last operation (CUDA events)
  bool graph = false;         // the step ran as a CUDA graph replay (set_graphs)
  // With set_profile(true): device microseconds per operation name, summed over layers, in
  // order of first appearance (an event after every operation; slows the step a little).
  std::vector<std::pair<std::string, double>> profile;
};

class LlamaModel {
 public:
  // Allocates weights (uninitialised), the KV cache and the workspaces; an error when the device
  // lacks memory or the shape is unsupported (head_dim 64/128, even heads).
  static Result<std::unique_ptr<LlamaModel>> create(const LlamaDims& dims,
                                                    const LlamaCapacity& capacity);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  // Bytes of one tensor kind (per layer for the layer tensors) and of everything.
  static size_t weight_bytes(const LlamaDims& dims);
  static size_t kv_bytes(const LlamaDims& dims, int num_blocks, int block_size);
  // Device memory create() takes besides weights and KV (activations, GEMM and attention
  // workspaces, staging).
  static size_t workspace_bytes(const LlamaDims& dims, const LlamaCapacity& capacity);
  // Free device memory now (for sizing the KV pool) and the device's total.
  static std::pair<size_t, size_t> device_memory();

  // Every matrix uniform with standard deviation 1 / sqrt(fan_in), norms 1 (as
  // replica/model/weights.h random_weights, not bit-equal to it): deterministic for the seed.
  Status random_init(uint64_t seed);
  // Writes `count` values at element `offset` of a tensor (layer ignored for model tensors),
  // converting float32 to bf16 (round to nearest even) on the device, in 16 MiB pieces. An FP8
  // matrix is gathered in bf16 in a buffer of its own until all its elements have arrived (the
  // pieces must not overlap), then quantized into its storage and the buffer freed.
  Status upload(ModelTensor t, int layer, size_t offset, const float* host, size_t count);
  // Same for raw bf16 (or fp16, converted on the device) values, `host` any address (a file
  // mapping). Asynchronous: the values are copied (by several threads) into one of two pinned
  // staging buffers and their DMA queued on the step stream, so reading the next piece overlaps
  // the transfer of this one; `host` may be reused on return. finish_uploads() waits for the
  // queue and reports its errors (later steps are ordered after it in any case).
  Status upload_half(ModelTensor t, int layer, size_t offset, const void* host, size_t count,
                     bool is_fp16);
  // Also an error, naming it, when an FP8 matrix did not receive all its elements.
  Status finish_uploads();
  size_t tensor_elements(ModelTensor t) const;

  // Runs the step and draws its tokens. An error names the failed operation; the KV of the
  // step's sequences is then undefined, and the model stays usable for other sequences.
  Status forward(const LlamaStep& step, LlamaOutput& out);
  // Per-operation device times in LlamaOutput::profile (no graphs while on).
  void set_profile(bool on);
  // A host tier of `num` KV blocks (LlamaStep::moves): pinned host memory the device addresses,
  // laid out as the cache. 0 frees it. An error when the host cannot pin that much.
  Status set_host_blocks(int num);
  int host_blocks() const;
  // The FP8 KV cache's K and V scale of every layer (dims().fp8_kv; 1.0 until set): a cached key
  // is e4m3(k / k_scale[l]) x k_scale[l]. Both spans hold dims().layers positive values.
  // New scales drop the captured graphs (they hold the old ones); the KV already cached keeps the
  // codes of the old ones, so set them before serving or after flushing the prefix cache.
  void set_kv_scales(std::span<const float> k_scale, std::span<const float> v_scale);

  // CUDA graphs for decode steps (on by default). A pure decode step (no prefill chunk) is
  // enqueued as one graph: its launch signature (rows, samples, the device plan's launch shape
  // and array offsets, the buffers it points into) keys a small LRU cache of instantiated graphs.
  // The step's index arrays and plan live in fixed device buffers, filled by async copies before
  // the replay, so a batch whose composition is unchanged replays one graph every step; a
  // signature seen on two consecutive steps is captured (one-off batches run eagerly). A capture
  // that fails turns graphs off for the model (graph_stats().disabled says why) and the step
  // runs eagerly.
  void set_graphs(bool on);
  // The Hopper decode GEMM for steps of at most 128 rows (kernels/cuda/decode_gemm.h) where the
  // device runs it; off (the default: still slower than cuBLASLt on the H200): every GEMM
  // through cuBLASLt.
  void set_decode_gemm(bool on);
  bool decode_gemm() const;
  // Whether the first eager step of each decode shape times cuBLASLt's candidates for its GEMMs
  // and keeps the fastest (kernels/cuda/gemm.h Gemm::set_tuning; off by default here, on in the
  // CUDA backend). gemm_tunings(): the shapes timed so far.
  void set_gemm_tuning(bool on);
  bool gemm_tuning() const;
  std::vector<GemmTuning> gemm_tunings() const;
  // With FP8 weights: whether the op that reads each layer GEMM's output applies the per-token
  // and per-channel scales (ops.h Fp8Dequant; the GEMMs then run cuBLASLt's per-tensor kernels,
  // its fastest in the probe of bench/results/fp8-h200.md: the default) or cuBLASLt does (its
  // block-scaled and outer-vector kernels; 0.15-0.23 ms per step slower on the seed's rollout,
  // bench/results/fp8-h200.md).
  void set_fp8_scales_in_readers(bool on);
  bool fp8_scales_in_readers() const;
  // With FP8 weights: whether the decode rows' attention output reaches the o projection as E4M3
  // codes written by the attention's merge (attention.h Fp8RowsOut: the default) or as bf16 rows
  // quantized by a pass of their own (ops.h quantize_rows_fp8). The same codes either way.
  void set_fp8_attention_rows_in_merge(bool on);
  bool fp8_attention_rows_in_merge() const;
  // Tensor parallelism (LlamaDims::tp_size): this rank's communicator (comm->size() ==
  // dims().tp_size), kept, not owned. From then on every step all-reduces the o and down
  // projections' outputs and gathers the LM head's logits over the group, so every rank calls
  // forward with the same step, in lockstep, each from the thread its device is current on
  // (NcclComm::bind_thread, before create). The FP8 GEMMs' scales go into cuBLASLt (each
  // rank's activation scales differ, so raw partial sums could not be added) for the
  // row-parallel o and down projections when the group has several ranks. Drops the captured
  // graphs; with several ranks the collectives are captured with the rest of a step, and the
  // ranks vote each step (NcclComm::all_agree) on replaying, capturing or running eagerly, so
  // they do it together: a step on which they differ, or a capture that failed on any rank,
  // turns graphs off on all of them.
  Status set_tensor_parallel(NcclComm* comm);
  struct GraphStats {
    int64_t captures = 0;  // graphs captured and instantiated
    int64_t replays = 0;   // steps that ran as a graph (captures included)
    int64_t evictions = 0;
    int cached = 0;
    std::string disabled;  // why graphs were turned off after a failure (empty: they were not)
  };
  GraphStats graph_stats() const;

  const LlamaDims& dims() const { return dims_; }
  const LlamaCapacity& capacity() const { return capacity_; }

  struct Impl;  // device state (llama.cu)

 private:
  LlamaModel(LlamaDims dims, LlamaCapacity capacity);
  Status run_step(const LlamaStep& step, LlamaOutput& out);
  LlamaDims dims_;
  LlamaCapacity capacity_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvc::kernels::cuda
