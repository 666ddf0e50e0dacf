#include "kernels/cuda/llama.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/cpu/parallel.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/nccl_group.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sampling.h"

#include "kernels/cuda/llama_impl.cuh"

namespace kvc::kernels::cuda {
namespace {

__global__ void fp16_to_bf16_kernel(const __half* in, __nv_bfloat16* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(__half2float(in[i]));
  }
}

__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void fill_bf16_kernel(__nv_bfloat16* out, size_t n, float value) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    out[i] = __float2bfloat16_rn(value);
  }
}

struct TensorSizes {
  size_t embed, attn_norm, qkv, qkv_bias, qk_norm, o, mlp_norm, gate_up, down, final_norm, lm_head;
};
TensorSizes sizes_of(const LlamaDims& d) {
  const size_t h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
               kv = size_t(d.kv_heads) * d.head_dim, ff = d.intermediate;
  return {size_t(d.vocab) * h,
          h,
          (q + 2 * kv) * h,
          d.qkv_bias ? q + 2 * kv : 0,
          d.qk_norm ? size_t(d.head_dim) : 0,
          h * q,
          h,
          2 * ff * h,
          h * ff,
          h,
          d.tied_embeddings ? 0 : size_t(d.lm_head_rows()) * h};
}
// The layer matrices FP8 weights quantize, and their rows (output channels).
bool is_fp8_matrix(const LlamaDims& d, ModelTensor t) {
  return d.fp8_weights && (t == ModelTensor::kQkv || t == ModelTensor::kO ||
                           t == ModelTensor::kGateUp || t == ModelTensor::kDown);
}
int matrix_rows(const LlamaDims& d, ModelTensor t) {
  switch (t) {
    case ModelTensor::kQkv:
      return (d.q_heads + 2 * d.kv_heads) * d.head_dim;
    case ModelTensor::kGateUp:
      return 2 * d.intermediate;
    default:  // o and down
      return d.hidden;
  }
}

// Lays the weights out in one allocation at `base` (null: only counts): every tensor 16-byte
// aligned, bf16, or with fp8_weights the layer matrices as E4M3 codes followed by their fp32
// scales. Fills I's pointers when given; returns the bytes.
size_t lay_out_weights(const LlamaDims& d, char* base, LlamaModel::Impl* I) {
  const TensorSizes s = sizes_of(d);
  size_t at = 0;
  auto take = [&](size_t bytes) -> void* {
    void* p = base != nullptr ? base + at : nullptr;
    at += (bytes + 15) / 16 * 16;
    return p;
  };
  auto half = [&](size_t n) { return take(2 * n); };
  auto matrix = [&](ModelTensor t, size_t n, void** w, float** scale) {
    if (!is_fp8_matrix(d, t)) {
      *w = half(n);
      return;
    }
    *w = take(n);
    const int rows = matrix_rows(d, t), cols = static_cast<int>(n / rows);
    *scale = static_cast<float*>(take(4 * size_t(fp8_weight_scales(rows, cols).count())));
  };
  [[maybe_unused]] void* p = nullptr;  // the sink of a count-only pass
  LlamaModel::Impl::Layer scratch{};
  (I ? I->embed : p) = half(s.embed);
  (I ? I->final_norm : p) = half(s.final_norm);
  if (d.tied_embeddings) {
    if (I) I->lm_head = I->embed;
  } else {
    (I ? I->lm_head : p) = half(s.lm_head);
  }
  for (int layer = 0; layer < d.layers; ++layer) {
    LlamaModel::Impl::Layer& l = I ? I->layers[layer] : scratch;
    l.attn_norm = half(s.attn_norm);
    matrix(ModelTensor::kQkv, s.qkv, &l.qkv, &l.qkv_scale);
    if (d.qkv_bias) l.qkv_bias = half(s.qkv_bias);
    if (d.qk_norm) {
      l.q_norm = half(s.qk_norm);
      l.k_norm = half(s.qk_norm);
    }
    matrix(ModelTensor::kO, s.o, &l.o, &l.o_scale);
    l.mlp_norm = half(s.mlp_norm);
    matrix(ModelTensor::kGateUp, s.gate_up, &l.gate_up, &l.gate_up_scale);
    matrix(ModelTensor::kDown, s.down, &l.down, &l.down_scale);
  }
  return at;
}

// Rows the activation buffers hold: a step's rows, rounded up as the FP8 GEMM runs them.
size_t activation_rows(const LlamaDims& d, const LlamaCapacity& c) {
  return d.fp8_weights ? fp8_gemm_rows(c.max_tokens) : c.max_tokens;
}

// The most activation scales a step of up to max_rows rows writes for a GEMM over k.
size_t fp8_scale_floats(int max_rows, int k) {
  const int block_scaled = std::min(max_rows, kFp8BlockScaledMaxRows);
  return std::max(fp8_activation_scales(block_scaled, k).count(),
                  fp8_activation_scales(max_rows, k).count());
}

}  // namespace

LlamaModel::LlamaModel(LlamaDims dims, LlamaCapacity capacity)
    : dims_(dims), capacity_(capacity), impl_(std::make_unique<Impl>()) {}
LlamaModel::~LlamaModel() = default;

size_t LlamaModel::weight_bytes(const LlamaDims& d) {
  return lay_out_weights(d, nullptr, nullptr);
}

size_t LlamaModel::kv_bytes(const LlamaDims& d, int num_blocks, int block_size) {
  KvCacheLayout l{d.layers,   num_blocks,     block_size, d.kv_heads,
                  d.head_dim, KvDtype::kBF16, d.fp8_kv};
  return l.bytes();
}

size_t LlamaModel::workspace_bytes(const LlamaDims& d, const LlamaCapacity& c) {
  const size_t t = activation_rows(d, c), h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
               kv = size_t(d.kv_heads) * d.head_dim, ff = d.intermediate;
  size_t act = t * h * 4 + 2 * (t * h * 3 + t * q * 3 + t * 2 * kv + t * 2 * ff + t * ff) +
               t * d.head_dim / 2 * 8;  // RoPE's (cos, sin)
  act += 2 * size_t(c.max_samples) * h + 4 * size_t(c.max_samples) * d.vocab;
  // Split: this rank's logits and every rank's, gathered (set_tensor_parallel; a group of one
  // takes its two copies of the logits out of the memory left free).
  if (d.tp_size > 1) act += 4 * size_t(c.max_samples) * d.lm_head_rows() * (1 + size_t(d.tp_size));
  if (d.fp8_weights) {  // FP8 activations and their scales
    act += t * (std::max(h, q) + ff) +
           4 * (fp8_scale_floats(c.max_tokens, static_cast<int>(std::max(h, q))) +
                fp8_scale_floats(c.max_tokens, d.intermediate));
  }
  // Sampling's outputs: token, logprob, norm, top logprobs (ids and values).
  act +=
      size_t(c.max_samples) * (8 + sizeof(sampling::LogprobNorm) + 8 * sampling::kMaxTopLogprobs);
  // + the GEMM workspace (32 MiB), the initial plan buffers (~22.5 MiB) and slack.
  return act + stage_layout(c).total + (size_t{64} << 20);
}

std::pair<size_t, size_t> LlamaModel::device_memory() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, 0};
  }
  return {free_bytes, total};
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::create(const LlamaDims& d, const LlamaCapacity& c) {
  if (d.head_dim != 64 && d.head_dim != 128) {
    return Error{"head_dim " + std::to_string(d.head_dim) + " is not supported (64 or 128)"};
  }
  if (d.q_heads % d.kv_heads != 0 || d.hidden % 8 != 0 || d.intermediate % 8 != 0) {
    return Error{"unsupported model shape (heads, hidden or intermediate size)"};
  }
  if (d.tp_size < 1 || (d.tp_size > 1 && d.tied_embeddings)) {
    return Error{"a tensor-parallel rank's LM head is its own slice: tied_embeddings must be off"};
  }
  if (d.fp8_weights &&
      (d.hidden % 16 != 0 || d.intermediate % 16 != 0 || (d.q_heads * d.head_dim) % 16 != 0 ||
       (d.kv_heads * d.head_dim) % 16 != 0)) {
    return Error{
        "FP8 weights need hidden_size, intermediate_size and the q/k/v widths to be "
        "multiples of 16 (the FP8 GEMM's leading dimensions)"};
  }
  std::unique_ptr<LlamaModel> m(new LlamaModel(d, c));
  Impl& I = *m->impl_;
  auto fail = [](const std::string& what, cudaError_t e) {
    (void)cudaGetLastError();
    return Error{what + ": " + cudaGetErrorString(e)};
  };
  if (cudaError_t e = cudaStreamCreateWithFlags(&I.stream, cudaStreamNonBlocking); e)
    return fail("cudaStreamCreate", e);
  if (cudaError_t e = cudaEventCreate(&I.step_begin); e) return fail("cudaEventCreate", e);
  if (cudaError_t e = cudaEventCreate(&I.step_end); e) return fail("cudaEventCreate", e);
  const size_t weights = weight_bytes(d);
  if (cudaError_t e = I.alloc(&I.weights, weights); e) {
    return fail("cannot allocate " + std::to_string(weights >> 20) + " MiB of weights", e);
  }
  I.layers.resize(d.layers);
  lay_out_weights(d, static_cast<char*>(I.weights), &I);
  I.kv_layout = {d.layers,   c.num_blocks,   c.block_size, d.kv_heads,
                 d.head_dim, KvDtype::kBF16, d.fp8_kv};
  I.kv_quant.assign(d.layers, KvQuant{d.fp8_kv, 1.0f, 1.0f});
  if (cudaError_t e = I.alloc(&I.kv, I.kv_layout.bytes()); e) {
    return fail("cannot allocate " + std::to_string(I.kv_layout.bytes() >> 20) +
                    " MiB of KV cache (" + std::to_string(c.num_blocks) + " blocks)",
                e);
  }
  const size_t t = activation_rows(d, c), h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
               kv = size_t(d.kv_heads) * d.head_dim, ff = d.intermediate;
  cudaError_t e = cudaSuccess;
  auto a = [&](void** ptr, size_t bytes) {
    if (e == cudaSuccess) e = I.alloc(ptr, bytes);
  };
  a(reinterpret_cast<void**>(&I.residual), t * h * 4);
  a(&I.x, t * h * 2);
  a(&I.xn, t * h * 2);
  a(&I.q, t * q * 2);
  a(&I.qkv, t * (q + 2 * kv) * 2);
  a(&I.attn, t * q * 2);
  a(&I.proj, t * h * 2);
  a(&I.gate_up, t * 2 * ff * 2);
  a(&I.act, t * ff * 2);
  a(&I.xs, size_t(c.max_samples) * h * 2);
  a(&I.rope_cs, t * d.head_dim / 2 * 8);
  if (d.fp8_weights) {
    // Zeroed: the rows a block-scaled FP8 GEMM adds (gemm.h fp8_gemm_rows) read finite values.
    auto zeroed = [&](void** ptr, size_t bytes) {
      a(ptr, bytes);
      if (e == cudaSuccess) e = cudaMemset(*ptr, 0, bytes);
    };
    zeroed(&I.xq, t * std::max(h, q));
    zeroed(&I.actq, t * ff);
    zeroed(reinterpret_cast<void**>(&I.xq_scales),
           4 * fp8_scale_floats(c.max_tokens, static_cast<int>(std::max(h, q))));
    zeroed(reinterpret_cast<void**>(&I.act_scales),
           4 * fp8_scale_floats(c.max_tokens, d.intermediate));
  }
  a(reinterpret_cast<void**>(&I.logits), size_t(c.max_samples) * d.vocab * 4);
  a(reinterpret_cast<void**>(&I.tokens_out), size_t(c.max_samples) * 4);
  a(reinterpret_cast<void**>(&I.logprobs_out), size_t(c.max_samples) * 4);
  const size_t top_entries = size_t(c.max_samples) * sampling::kMaxTopLogprobs;
  a(reinterpret_cast<void**>(&I.norms_out), size_t(c.max_samples) * sizeof(sampling::LogprobNorm));
  a(reinterpret_cast<void**>(&I.top_ids_out), top_entries * 4);
  a(reinterpret_cast<void**>(&I.top_logprobs_out), top_entries * 4);
  const StageLayout sl = stage_layout(c);
  I.stage_bytes = sl.total;
  a(reinterpret_cast<void**>(&I.dev_stage), sl.total);
  if (e != cudaSuccess) return fail("allocating activations", e);
  if ((e = cudaMallocHost(reinterpret_cast<void**>(&I.host_stage), sl.total))) {
    return fail("cudaMallocHost", e);
  }
  if ((e = cudaMallocHost(reinterpret_cast<void**>(&I.host_tokens_out), c.max_samples * 4)))
    return fail("cudaMallocHost", e);
  if ((e = cudaMallocHost(reinterpret_cast<void**>(&I.host_logprobs_out), c.max_samples * 4)))
    return fail("cudaMallocHost", e);
  if ((e = cudaMallocHost(reinterpret_cast<void**>(&I.host_top_ids_out), top_entries * 4)) ||
      (e = cudaMallocHost(reinterpret_cast<void**>(&I.host_top_logprobs_out), top_entries * 4)))
    return fail("cudaMallocHost", e);
  I.gemm = std::make_unique<Gemm>();
  if (!I.gemm->ok()) {
    return Error{"cuBLASLt could not be initialised (handle or its 32 MiB workspace)"};
  }
  I.rope = make_rope_table(d.head_dim, d.rope);
  I.shape = {d.q_heads, d.kv_heads, d.head_dim, c.block_size,
             1.0f / std::sqrt(static_cast<float>(d.head_dim))};
  // Initial plan buffers: a flat decode of max_tokens sequences, a prefill of max_chunks; room
  // for a step's copy-on-write copies (at most one per writing sequence: max_samples; the host
  // tier's moves get more in set_host_blocks).
  if ((e = I.grow(&I.prefill_plan_buf, &I.prefill_plan_bytes, 1 << 20)) ||
      (e = I.grow(&I.decode_plan_buf, &I.decode_plan_bytes, 1 << 20)) ||
      (e = I.grow(&I.decode_ws, &I.decode_ws_bytes, 16 << 20)) ||
      (e = I.grow(&I.moves_buf, &I.moves_bytes, size_t(std::max(c.max_samples, 1024)) * 3 * 4))) {
    return fail("allocating plan buffers", e);
  }
  return std::move(m);  // NOLINT: nvcc does not move into a converting return
}

size_t LlamaModel::tensor_elements(ModelTensor t) const {
  const TensorSizes s = sizes_of(dims_);
  switch (t) {
    case ModelTensor::kEmbed:
      return s.embed;
    case ModelTensor::kAttnNorm:
      return s.attn_norm;
    case ModelTensor::kQkv:
      return s.qkv;
    case ModelTensor::kQkvBias:
      return s.qkv_bias;
    case ModelTensor::kQNorm:
    case ModelTensor::kKNorm:
      return s.qk_norm;
    case ModelTensor::kO:
      return s.o;
    case ModelTensor::kMlpNorm:
      return s.mlp_norm;
    case ModelTensor::kGateUp:
      return s.gate_up;
    case ModelTensor::kDown:
      return s.down;
    case ModelTensor::kFinalNorm:
      return s.final_norm;
    case ModelTensor::kLmHead:
      return dims_.tied_embeddings ? s.embed : s.lm_head;
  }
  return 0;
}

namespace {

void* tensor_ptr(LlamaModel::Impl& I, ModelTensor t, int layer) {
  switch (t) {
    case ModelTensor::kEmbed:
      return I.embed;
    case ModelTensor::kFinalNorm:
      return I.final_norm;
    case ModelTensor::kLmHead:
      return I.lm_head;
    case ModelTensor::kAttnNorm:
      return I.layers[layer].attn_norm;
    case ModelTensor::kQkv:
      return I.layers[layer].qkv;
    case ModelTensor::kQkvBias:
      return I.layers[layer].qkv_bias;
    case ModelTensor::kQNorm:
      return I.layers[layer].q_norm;
    case ModelTensor::kKNorm:
      return I.layers[layer].k_norm;
    case ModelTensor::kO:
      return I.layers[layer].o;
    case ModelTensor::kMlpNorm:
      return I.layers[layer].mlp_norm;
    case ModelTensor::kGateUp:
      return I.layers[layer].gate_up;
    case ModelTensor::kDown:
      return I.layers[layer].down;
  }
  return nullptr;
}

bool is_layer_tensor(ModelTensor t) {
  return t != ModelTensor::kEmbed && t != ModelTensor::kFinalNorm && t != ModelTensor::kLmHead;
}

float* scale_ptr(LlamaModel::Impl& I, ModelTensor t, int layer) {
  LlamaModel::Impl::Layer& l = I.layers[layer];
  switch (t) {
    case ModelTensor::kQkv:
      return l.qkv_scale;
    case ModelTensor::kO:
      return l.o_scale;
    case ModelTensor::kGateUp:
      return l.gate_up_scale;
    case ModelTensor::kDown:
      return l.down_scale;
    default:
      return nullptr;
  }
}

// Where uploads of (t, layer) write their bf16 values: the tensor itself, or an FP8 matrix's
// pending buffer (allocated, on the stream, by its first upload).
cudaError_t bf16_target(LlamaModel::Impl& I, const LlamaDims& d, ModelTensor t, int layer,
                        size_t elements, __nv_bfloat16** out) {
  if (!is_fp8_matrix(d, t)) {
    *out = static_cast<__nv_bfloat16*>(tensor_ptr(I, t, layer));
    return cudaSuccess;
  }
  auto& m = I.pending[{static_cast<int>(t), layer}];
  if (m.values == nullptr) {
    if (cudaError_t e = cudaMallocAsync(&m.values, elements * 2, I.stream); e != cudaSuccess) {
      I.pending.erase({static_cast<int>(t), layer});
      return e;
    }
  }
  *out = static_cast<__nv_bfloat16*>(m.values);
  return cudaSuccess;
}

// After `count` more values of (t, layer) were queued: an FP8 matrix whose elements have all
// arrived is quantized (one scale per row) into its storage and its buffer freed, on the stream.
cudaError_t note_uploaded(LlamaModel::Impl& I, const LlamaDims& d, ModelTensor t, int layer,
                          size_t count, size_t elements) {
  if (!is_fp8_matrix(d, t)) return cudaSuccess;
  auto it = I.pending.find({static_cast<int>(t), layer});
  if (it == I.pending.end()) return cudaErrorInvalidValue;
  it->second.filled += count;
  if (it->second.filled < elements) return cudaSuccess;
  const int rows = matrix_rows(d, t);
  const int cols = static_cast<int>(elements / rows);
  cudaError_t e =
      quantize_rows_fp8(it->second.values, cols, rows, cols, tensor_ptr(I, t, layer),
                        scale_ptr(I, t, layer), fp8_weight_scales(rows, cols), I.stream);
  const cudaError_t f = cudaFreeAsync(it->second.values, I.stream);
  I.pending.erase(it);
  return e != cudaSuccess ? e : f;
}

}  // namespace

Status LlamaModel::upload(ModelTensor t, int layer, size_t offset, const float* host,
                          size_t count) {
  if (is_layer_tensor(t) && (layer < 0 || layer >= dims_.layers))
    return Error{"layer out of range"};
  if (offset + count > tensor_elements(t)) return Error{"upload past the end of the tensor"};
  if (count == 0) return Status::Ok();
  __nv_bfloat16* dst = nullptr;
  KVC_TRY(bf16_target(*impl_, dims_, t, layer, tensor_elements(t), &dst), "upload buffer");
  dst += offset;
  // float32 pieces go through one device staging buffer and are rounded to bf16 there.
  const size_t piece = size_t{1} << 22;
  float* staging = nullptr;
  KVC_TRY(cudaMalloc(&staging, std::min(piece, count) * sizeof(float)), "upload staging");
  std::string failed;
  for (size_t i = 0; i < count && failed.empty(); i += piece) {
    const size_t n = std::min(piece, count - i);
    // On the step stream: a plain cudaMemcpy from pageable memory may return before its DMA
    // lands, and the stream does not wait for the legacy default stream.
    cudaError_t e = cudaMemcpyAsync(staging, host + i, n * sizeof(float), cudaMemcpyHostToDevice,
                                    impl_->stream);
    if (e == cudaSuccess) {
      f32_to_bf16_kernel<<<1024, 256, 0, impl_->stream>>>(staging, dst + i, n);
      e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaStreamSynchronize(impl_->stream);
    if (e != cudaSuccess) failed = std::string("upload: ") + cudaGetErrorString(e);
  }
  cudaFree(staging);
  if (!failed.empty()) return Error{failed};
  KVC_TRY(note_uploaded(*impl_, dims_, t, layer, count, tensor_elements(t)), "FP8 quantization");
  KVC_TRY(cudaStreamSynchronize(impl_->stream), "FP8 quantization");
  return Status::Ok();
}

Status LlamaModel::upload_half(ModelTensor t, int layer, size_t offset, const void* host,
                               size_t count, bool is_fp16) {
  if (is_layer_tensor(t) && (layer < 0 || layer >= dims_.layers))
    return Error{"layer out of range"};
  if (offset + count > tensor_elements(t)) return Error{"upload past the end of the tensor"};
  if (count == 0) return Status::Ok();
  Impl& I = *impl_;
  for (int b = 0; b < 2; ++b) {
    if (I.upload_stage[b] != nullptr) continue;
    KVC_TRY(cudaMallocHost(&I.upload_stage[b], Impl::kUploadStageBytes), "upload staging");
    KVC_TRY(cudaEventCreateWithFlags(&I.upload_done[b], cudaEventDisableTiming), "upload event");
    KVC_TRY(cudaEventRecord(I.upload_done[b], I.stream), "upload event");
  }
  __nv_bfloat16* target = nullptr;
  KVC_TRY(bf16_target(I, dims_, t, layer, tensor_elements(t), &target), "upload buffer");
  auto* dst = reinterpret_cast<uint16_t*>(target) + offset;
  const auto* src = static_cast<const std::byte*>(host);
  constexpr size_t kPiece = Impl::kUploadStageBytes / 2;  // values per staging buffer
  for (size_t i = 0; i < count; i += kPiece) {
    const size_t n = std::min(kPiece, count - i);
    const int b = I.upload_next;
    I.upload_next ^= 1;
    KVC_TRY(cudaEventSynchronize(I.upload_done[b]), "upload");  // its previous DMA landed
    auto* stage = static_cast<std::byte*>(I.upload_stage[b]);
    const std::byte* from = src + i * 2;
    // Page-cache reads and the copy in 1 MiB pieces over the CPU threads.
    constexpr int64_t kChunk = int64_t{1} << 20;
    const auto bytes = static_cast<int64_t>(n * 2);
    cpu::parallel_for((bytes + kChunk - 1) / kChunk, [&](int64_t c0, int64_t c1) {
      const int64_t begin = c0 * kChunk, end = std::min(bytes, c1 * kChunk);
      std::memcpy(stage + begin, from + begin, static_cast<size_t>(end - begin));
    });
    KVC_TRY(cudaMemcpyAsync(dst + i, stage, n * 2, cudaMemcpyHostToDevice, I.stream), "upload");
    if (is_fp16) {
      fp16_to_bf16_kernel<<<1024, 256, 0, I.stream>>>(reinterpret_cast<const __half*>(dst + i),
                                                      reinterpret_cast<__nv_bfloat16*>(dst + i), n);
      KVC_TRY(cudaGetLastError(), "fp16 -> bf16");
    }
    KVC_TRY(cudaEventRecord(I.upload_done[b], I.stream), "upload event");
  }
  KVC_TRY(note_uploaded(I, dims_, t, layer, count, tensor_elements(t)), "FP8 quantization");
  return {};
}

Status LlamaModel::set_host_blocks(int num) {
  Impl& I = *impl_;
  if (num < 0) return Error{"host tier: a negative number of blocks"};
  KVC_TRY(cudaStreamSynchronize(I.stream), "host tier");
  if (I.host_kv) cudaFreeHost(I.host_kv);
  I.host_kv = I.host_kv_dev = nullptr;
  I.host_layout = I.kv_layout;
  I.host_layout.num_blocks = 0;
  if (num == 0) return {};
  KvCacheLayout layout = I.kv_layout;
  layout.num_blocks = num;
  if (cudaError_t e = cudaHostAlloc(&I.host_kv, layout.bytes(), cudaHostAllocMapped)) {
    (void)cudaGetLastError();
    I.host_kv = nullptr;
    return Error{"host tier: cannot pin " + std::to_string(layout.bytes() >> 20) +
                 " MiB of host memory: " + cudaGetErrorString(e)};
  }
  KVC_TRY(cudaHostGetDevicePointer(&I.host_kv_dev, I.host_kv, 0), "host tier");
  I.host_layout = layout;
  // Room for 16,384 moves a step up front (a long prompt's loads), so steps rarely wait to grow it.
  KVC_TRY(I.grow(&I.moves_buf, &I.moves_bytes, size_t{16384} * 3 * 4, /*graphs_read_it=*/false),
          "host tier moves");
  return {};
}

int LlamaModel::host_blocks() const {
  return impl_->host_kv ? impl_->host_layout.num_blocks : 0;
}

Status LlamaModel::finish_uploads() {
  Impl& I = *impl_;
  KVC_TRY(cudaStreamSynchronize(I.stream), "upload");
  I.free_upload_stages();
  if (!I.pending.empty()) {
    const auto [t, layer] = I.pending.begin()->first;
    const size_t filled = I.pending.begin()->second.filled;
    for (auto& [key, m] : I.pending)
      cudaFree(m.values);
    I.pending.clear();
    return Error{"FP8 weights: " + std::string(model_tensor_name(static_cast<ModelTensor>(t))) +
                 " of layer " + std::to_string(layer) + " received " + std::to_string(filled) +
                 " of its " + std::to_string(tensor_elements(static_cast<ModelTensor>(t))) +
                 " values"};
  }
  return {};
}

void LlamaModel::set_profile(bool on) {
  impl_->profile = on;
}

void LlamaModel::set_decode_gemm(bool on) {
  Impl& I = *impl_;
  cudaStreamSynchronize(I.stream);
  I.drop_graphs();  // captured launches name the GEMM kernels
  I.gemm->set_decode_kernel(on);
}

bool LlamaModel::decode_gemm() const {
  return impl_->gemm->decode_kernel();
}

void LlamaModel::set_gemm_tuning(bool on) {
  impl_->gemm->set_tuning(on);
}

bool LlamaModel::gemm_tuning() const {
  return impl_->gemm->tuning();
}

std::vector<GemmTuning> LlamaModel::gemm_tunings() const {
  return impl_->gemm->tunings();
}

void LlamaModel::set_fp8_scales_in_readers(bool on) {
  Impl& I = *impl_;
  if (I.fp8_scales_in_readers == on) return;
  cudaStreamSynchronize(I.stream);
  I.drop_graphs();  // captured launches name the GEMM kernels and the scales' readers
  I.fp8_scales_in_readers = on;
}

bool LlamaModel::fp8_scales_in_readers() const {
  return impl_->fp8_scales_in_readers;
}

void LlamaModel::set_fp8_attention_rows_in_merge(bool on) {
  Impl& I = *impl_;
  if (I.fp8_attention_rows_in_merge == on) return;
  cudaStreamSynchronize(I.stream);
  I.drop_graphs();  // captured launches name the merge kernel and the quantize pass
  I.fp8_attention_rows_in_merge = on;
}

bool LlamaModel::fp8_attention_rows_in_merge() const {
  return impl_->fp8_attention_rows_in_merge;
}

Status LlamaModel::set_tensor_parallel(NcclComm* comm) {
  Impl& I = *impl_;
  if (comm == nullptr || comm->size() != dims_.tp_size) {
    return Error{"set_tensor_parallel: the group's size is not the model's tp_size (" +
                 std::to_string(dims_.tp_size) + ")"};
  }
  cudaStreamSynchronize(I.stream);
  I.drop_graphs();  // captured steps have no collectives
  if (I.logits_part == nullptr) {
    const size_t part = size_t(capacity_.max_samples) * dims_.lm_head_rows() * 4;
    if (cudaError_t e = I.alloc(reinterpret_cast<void**>(&I.logits_part), part); e)
      return Error{std::string("allocating the rank's logits: ") + cudaGetErrorString(e)};
    if (cudaError_t e = I.alloc(reinterpret_cast<void**>(&I.logits_ranks), part * comm->size()); e)
      return Error{std::string("allocating the gathered logits: ") + cudaGetErrorString(e)};
  }
  I.comm = comm;
  return Status::Ok();
}

void LlamaModel::set_kv_scales(std::span<const float> k_scale, std::span<const float> v_scale) {
  Impl& I = *impl_;
  const size_t n = std::min({I.kv_quant.size(), k_scale.size(), v_scale.size()});
  bool same = true;
  for (size_t l = 0; l < n; ++l)
    same = same && I.kv_quant[l].k_scale == k_scale[l] && I.kv_quant[l].v_scale == v_scale[l];
  if (same) return;  // a weight update with the same scales keeps its graphs
  cudaStreamSynchronize(I.stream);
  I.drop_graphs();
  for (size_t l = 0; l < n; ++l) {
    I.kv_quant[l].k_scale = k_scale[l];
    I.kv_quant[l].v_scale = v_scale[l];
  }
}

void LlamaModel::set_graphs(bool on) {
  Impl& I = *impl_;
  if (!on) {
    cudaStreamSynchronize(I.stream);
    I.drop_graphs();
  }
  I.graphs_on = on;
  if (on) I.graph_stats.disabled.clear();
}

LlamaModel::GraphStats LlamaModel::graph_stats() const {
  GraphStats s = impl_->graph_stats;
  s.cached = static_cast<int>(impl_->graphs.size());
  return s;
}

Status LlamaModel::random_init(uint64_t seed) {
  Impl& I = *impl_;
  uint64_t index = 0;
  auto fill = [&](void* p, size_t n, int fan_in) -> cudaError_t {
    // Uniform in [-a, a) has standard deviation a / sqrt(3).
    const float a = std::sqrt(3.0f) / std::sqrt(static_cast<float>(fan_in));
    return fill_random(p, n, KvDtype::kBF16, seed * 0x9E3779B97F4A7C15ull + ++index, a, I.stream);
  };
  // A layer matrix: filled where its uploads would write (an FP8 matrix's bf16 buffer).
  auto layer_matrix = [&](ModelTensor t, int layer, int fan_in) -> cudaError_t {
    const size_t n = tensor_elements(t);
    __nv_bfloat16* dst = nullptr;
    cudaError_t e = bf16_target(I, dims_, t, layer, n, &dst);
    if (e == cudaSuccess) e = fill(dst, n, fan_in);
    if (e == cudaSuccess) e = note_uploaded(I, dims_, t, layer, n, n);
    return e;
  };
  auto ones = [&](void* p, size_t n) -> cudaError_t {
    fill_bf16_kernel<<<256, 256, 0, I.stream>>>(static_cast<__nv_bfloat16*>(p), n, 1.0f);
    return cudaGetLastError();
  };
  const TensorSizes s = sizes_of(dims_);
  const int h = dims_.hidden, q = dims_.q_heads * dims_.head_dim;
  KVC_TRY(fill(I.embed, s.embed, h), "random init");
  for (int layer = 0; layer < dims_.layers; ++layer) {
    const Impl::Layer& l = I.layers[layer];
    KVC_TRY(ones(l.attn_norm, s.attn_norm), "random init");
    KVC_TRY(layer_matrix(ModelTensor::kQkv, layer, h), "random init");
    if (dims_.qkv_bias) KVC_TRY(fill(l.qkv_bias, s.qkv_bias, q), "random init");
    if (dims_.qk_norm) {
      KVC_TRY(ones(l.q_norm, s.qk_norm), "random init");
      KVC_TRY(ones(l.k_norm, s.qk_norm), "random init");
    }
    KVC_TRY(layer_matrix(ModelTensor::kO, layer, q), "random init");
    KVC_TRY(ones(l.mlp_norm, s.mlp_norm), "random init");
    KVC_TRY(layer_matrix(ModelTensor::kGateUp, layer, h), "random init");
    KVC_TRY(layer_matrix(ModelTensor::kDown, layer, dims_.intermediate), "random init");
  }
  KVC_TRY(ones(I.final_norm, s.final_norm), "random init");
  if (!dims_.tied_embeddings) KVC_TRY(fill(I.lm_head, s.lm_head, h), "random init");
  KVC_TRY(cudaStreamSynchronize(I.stream), "random init");
  return {};
}

}  // namespace kvc::kernels::cuda
