// The device Llama model's state, shared by its two translation units: llama.cu (allocation,
// weights) and llama_step.cu (one forward step). Private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/llama.h"
#include "kernels/cuda/ops.h"

// Returns an Error naming the failed operation and the CUDA error from the enclosing function.
#define KVC_TRY(expr, what)                                                         \
  do {                                                                              \
    if (cudaError_t kvc_err_ = (expr); kvc_err_ != cudaSuccess) {                   \
      return ::kvc::Error{std::string(what) + ": " + cudaGetErrorString(kvc_err_)}; \
    }                                                                               \
  } while (0)

// An operation of the step: KVC_TRY, then a profile mark named after it.
#define KVC_OP(expr, what)  \
  do {                      \
    KVC_TRY(expr, what);    \
    I.mark(what, I.stream); \
  } while (0)

namespace kvc::kernels::cuda {

inline size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

struct LlamaModel::Impl {
  // Weights.
  void* embed = nullptr;
  void* final_norm = nullptr;
  void* lm_head = nullptr;  // == embed when tied
  struct Layer {
    void *attn_norm, *qkv, *o, *mlp_norm, *gate_up, *down;
    void *qkv_bias = nullptr, *q_norm = nullptr, *k_norm = nullptr;  // family options
    // With fp8_weights: the four matrices above are E4M3 codes and these their per-output-channel
    // scales (fp32, laid out as gemm.h fp8_weight_scales); null otherwise.
    float *qkv_scale = nullptr, *o_scale = nullptr, *gate_up_scale = nullptr, *down_scale = nullptr;
  };
  std::vector<Layer> layers;
  void* weights = nullptr;  // one allocation
  void* kv = nullptr;       // KvCacheLayout allocation
  KvCacheLayout kv_layout;
  // The host tier (set_host_blocks): pinned, mapped host memory (host_kv; host_kv_dev the
  // device's address of it) in host_layout; and the device copy of a step's KV moves (copies
  // and the tier's).
  void* host_kv = nullptr;
  void* host_kv_dev = nullptr;
  KvCacheLayout host_layout;
  void* moves_buf = nullptr;
  size_t moves_bytes = 0;
  std::vector<KvQuant> kv_quant;  // per layer: the FP8 cache's K and V scales

  // Activations [T = max_tokens (FP8: rounded up as gemm.h fp8_gemm_rows), ...].
  float* residual = nullptr;  // fp32 [T, h]
  void *x = nullptr, *xn = nullptr, *q = nullptr, *qkv = nullptr, *attn = nullptr, *proj = nullptr,
       *gate_up = nullptr, *act = nullptr, *xs = nullptr;
  void* rope_cs = nullptr;  // float2 [T, head_dim / 2]: the step's RoPE (cos, sin), all layers
  // With fp8_weights: a GEMM's input as E4M3 codes [T, max(h, q)] (normalised rows or the
  // attention output) and SwiGLU's [T, ff], each with its per-row scales (gemm.h
  // fp8_activation_scales).
  void *xq = nullptr, *actq = nullptr;
  float *xq_scales = nullptr, *act_scales = nullptr;
  // FP8 matrices being uploaded: bf16 values gathered per (tensor, layer) until complete.
  struct PendingMatrix {
    void* values = nullptr;
    size_t filled = 0;
  };
  std::map<std::pair<int, int>, PendingMatrix> pending;
  float* logits = nullptr;  // [max_samples, vocab]
  // Tensor parallelism (set_tensor_parallel): the group, this rank's LM-head logits
  // [max_samples, lm_head_rows] and every rank's gathered [tp_size, max_samples, lm_head_rows].
  NcclComm* comm = nullptr;
  float* logits_part = nullptr;
  float* logits_ranks = nullptr;
  int32_t* tokens_out = nullptr;
  float* logprobs_out = nullptr;
  sampling::LogprobNorm* norms_out = nullptr;  // [max_samples]
  int32_t* top_ids_out = nullptr;              // [max_samples, kMaxTopLogprobs]
  float* top_logprobs_out = nullptr;           // [max_samples, kMaxTopLogprobs]

  // Staging: one pinned host buffer and its device twin, copied in one cudaMemcpyAsync.
  char* host_stage = nullptr;
  char* dev_stage = nullptr;
  size_t stage_bytes = 0;
  int32_t* host_tokens_out = nullptr;
  float* host_logprobs_out = nullptr;
  // upload_half's two pinned staging buffers (allocated on first use, freed by finish_uploads)
  // and the events that say their last DMA landed.
  static constexpr size_t kUploadStageBytes = size_t{64} << 20;
  void* upload_stage[2] = {nullptr, nullptr};
  cudaEvent_t upload_done[2] = {nullptr, nullptr};
  int upload_next = 0;
  void free_upload_stages() {
    for (int i = 0; i < 2; ++i) {
      if (upload_stage[i]) cudaFreeHost(upload_stage[i]);
      if (upload_done[i]) cudaEventDestroy(upload_done[i]);
      upload_stage[i] = nullptr;
      upload_done[i] = nullptr;
    }
  }
  int32_t* host_top_ids_out = nullptr;
  float* host_top_logprobs_out = nullptr;

  // Plans and their workspaces (grow on demand, then stay).
  void* prefill_plan_buf = nullptr;
  size_t prefill_plan_bytes = 0;
  void* decode_plan_buf = nullptr;
  size_t decode_plan_bytes = 0;
  void* decode_ws = nullptr;
  size_t decode_ws_bytes = 0;

  std::vector<void*> allocations;
  cudaStream_t stream = nullptr;
  cudaEvent_t step_begin = nullptr, step_end = nullptr;
  // Per-operation profile (set_profile): an event after each operation of the step.
  bool profile = false;
  std::vector<cudaEvent_t> marks;
  std::vector<const char*> mark_names;
  size_t num_marks = 0;
  void mark(const char* what, cudaStream_t s) {
    if (!profile) return;
    if (num_marks == marks.size()) {
      cudaEvent_t e;
      cudaEventCreate(&e);
      marks.push_back(e);
      mark_names.push_back(nullptr);
    }
    mark_names[num_marks] = what;
    cudaEventRecord(marks[num_marks++], s);
  }
  // CUDA graphs of decode steps (LlamaModel::set_graphs), least recently used evicted.
  static constexpr size_t kMaxGraphs = 16;
  struct GraphEntry {
    std::vector<int64_t> key;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };
  bool graphs_on = true;
  bool fp8_scales_in_readers = true;        // LlamaModel::set_fp8_scales_in_readers
  bool fp8_attention_rows_in_merge = true;  // LlamaModel::set_fp8_attention_rows_in_merge
  std::vector<GraphEntry> graphs;
  std::vector<int64_t> last_key;  // the previous decode step's signature
  uint64_t graph_clock = 0;
  GraphStats graph_stats;
  GraphEntry* find_graph(const std::vector<int64_t>& key) {
    for (GraphEntry& g : graphs) {
      if (g.key == key) {
        g.last_use = ++graph_clock;
        return &g;
      }
    }
    return nullptr;
  }
  void drop_graphs() {
    for (GraphEntry& g : graphs)
      cudaGraphExecDestroy(g.exec);
    graphs.clear();
    last_key.clear();
  }

  std::unique_ptr<Gemm> gemm;
  RopeTable rope;
  AttentionShape shape;

  cudaError_t alloc(void** p, size_t bytes) {
    cudaError_t e = cudaMalloc(p, std::max<size_t>(bytes, 16));
    if (e == cudaSuccess) allocations.push_back(*p);
    return e;
  }
  // graphs_read_it: the decode graphs may point into the buffer (not so the moves', which step 2
  // reads before any graph runs), so they go with the old one.
  cudaError_t grow(void** p, size_t* have, size_t need, bool graphs_read_it = true) {
    if (need <= *have) return cudaSuccess;
    if (*p) {
      cudaStreamSynchronize(stream);
      if (graphs_read_it) drop_graphs();  // they point into the old buffer
      cudaFree(*p);
      std::erase(allocations, *p);
      *p = nullptr;
      *have = 0;
    }
    need = align_up(need + need / 4, 256);
    cudaError_t e = alloc(p, need);
    if (e == cudaSuccess) {
      *have = need;
    } else {
      (void)cudaGetLastError();  // not sticky: the next step must not see it
    }
    return e;
  }
  ~Impl() {
    if (stream) cudaStreamSynchronize(stream);
    drop_graphs();
    gemm.reset();
    for (auto& [key, m] : pending)
      cudaFree(m.values);
    for (void* p : allocations)
      cudaFree(p);
    if (host_stage) cudaFreeHost(host_stage);
    if (host_kv) cudaFreeHost(host_kv);
    free_upload_stages();
    if (host_tokens_out) cudaFreeHost(host_tokens_out);
    if (host_logprobs_out) cudaFreeHost(host_logprobs_out);
    if (host_top_ids_out) cudaFreeHost(host_top_ids_out);
    if (host_top_logprobs_out) cudaFreeHost(host_top_logprobs_out);
    for (cudaEvent_t e : marks)
      cudaEventDestroy(e);
    if (step_begin) cudaEventDestroy(step_begin);
    if (step_end) cudaEventDestroy(step_end);
    if (stream) cudaStreamDestroy(stream);
  }
};

// Staging layout of one step: int32 words, the SampleParams (32-byte aligned), and last the
// prefill block tables, so a step copies only up to the end of the tables it uses.
struct StageLayout {
  size_t tokens, positions, slots, q_indptr, start_pos, block_indptr, sample_act_rows, params,
      block_indices_bytes, total;
};
inline StageLayout stage_layout(const LlamaCapacity& c) {
  StageLayout l{};
  size_t w = 0;
  auto take = [&](size_t words) {
    const size_t at = w;
    w += align_up(words, 8);
    return at;
  };
  l.tokens = take(c.max_tokens);
  l.positions = take(c.max_tokens);
  l.slots = take(c.max_tokens);
  l.q_indptr = take(c.max_chunks + 1);
  l.start_pos = take(c.max_chunks);
  l.block_indptr = take(c.max_chunks + 1);
  l.sample_act_rows = take(c.max_samples);
  l.params = w * 4;  // bytes
  l.block_indices_bytes = align_up(l.params + sizeof(sampling::SampleParams) * c.max_samples, 32);
  l.total = l.block_indices_bytes + size_t(c.max_blocks) * 4;
  return l;
}

}  // namespace kvc::kernels::cuda
