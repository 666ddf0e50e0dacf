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
// Every tensor starts 16-byte aligned (the vector loads): sizes round up to 8 bf16 values.
size_t padded(size_t n) {
  return (n + 7) / 8 * 8;
}
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
          d.tied_embeddings ? 0 : size_t(d.vocab) * h};
}
size_t layer_elements(const TensorSizes& s) {
  return padded(s.attn_norm) + s.qkv + padded(s.qkv_bias) + 2 * padded(s.qk_norm) + s.o +
         padded(s.mlp_norm) + s.gate_up + s.down;
}

}  // namespace

LlamaModel::LlamaModel(LlamaDims dims, LlamaCapacity capacity)
    : dims_(dims), capacity_(capacity), impl_(std::make_unique<Impl>()) {}
LlamaModel::~LlamaModel() = default;

size_t LlamaModel::weight_bytes(const LlamaDims& d) {
  const TensorSizes s = sizes_of(d);
  return 2 * (s.embed + padded(s.final_norm) + s.lm_head + layer_elements(s) * d.layers);
}

size_t LlamaModel::kv_bytes(const LlamaDims& d, int num_blocks, int block_size) {
  KvCacheLayout l{d.layers, num_blocks, block_size, d.kv_heads, d.head_dim, KvDtype::kBF16};
  return l.bytes();
}

size_t LlamaModel::workspace_bytes(const LlamaDims& d, const LlamaCapacity& c) {
  const size_t t = c.max_tokens, h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
               kv = size_t(d.kv_heads) * d.head_dim, ff = d.intermediate;
  size_t act = t * h * 4 + 2 * (t * h * 3 + t * q * 3 + t * 2 * kv + t * 2 * ff + t * ff) +
               t * d.head_dim / 2 * 8;  // RoPE's (cos, sin)
  act += 2 * size_t(c.max_samples) * h + 4 * size_t(c.max_samples) * d.vocab;
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
  const TensorSizes s = sizes_of(d);
  const size_t weights = weight_bytes(d);
  if (cudaError_t e = I.alloc(&I.weights, weights); e) {
    return fail("cannot allocate " + std::to_string(weights >> 20) + " MiB of weights", e);
  }
  auto* p = static_cast<__nv_bfloat16*>(I.weights);
  auto take = [&](size_t n) {
    void* at = p;
    p += padded(n);
    return at;
  };
  I.embed = take(s.embed);
  I.final_norm = take(s.final_norm);
  I.lm_head = d.tied_embeddings ? I.embed : take(s.lm_head);
  I.layers.resize(d.layers);
  for (auto& l : I.layers) {
    l.attn_norm = take(s.attn_norm);
    l.qkv = take(s.qkv);
    if (d.qkv_bias) l.qkv_bias = take(s.qkv_bias);
    if (d.qk_norm) {
      l.q_norm = take(s.qk_norm);
      l.k_norm = take(s.qk_norm);
    }
    l.o = take(s.o);
    l.mlp_norm = take(s.mlp_norm);
    l.gate_up = take(s.gate_up);
    l.down = take(s.down);
  }
  I.kv_layout = {d.layers, c.num_blocks, c.block_size, d.kv_heads, d.head_dim, KvDtype::kBF16};
  if (cudaError_t e = I.alloc(&I.kv, I.kv_layout.bytes()); e) {
    return fail("cannot allocate " + std::to_string(I.kv_layout.bytes() >> 20) +
                    " MiB of KV cache (" + std::to_string(c.num_blocks) + " blocks)",
                e);
  }
  const size_t t = c.max_tokens, h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
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
  // Initial plan buffers: a flat decode of max_tokens sequences, a prefill of max_chunks.
  if ((e = I.grow(&I.prefill_plan_buf, &I.prefill_plan_bytes, 1 << 20)) ||
      (e = I.grow(&I.decode_plan_buf, &I.decode_plan_bytes, 1 << 20)) ||
      (e = I.grow(&I.decode_ws, &I.decode_ws_bytes, 16 << 20))) {
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

}  // namespace

Status LlamaModel::upload(ModelTensor t, int layer, size_t offset, const float* host,
                          size_t count) {
  if (is_layer_tensor(t) && (layer < 0 || layer >= dims_.layers))
    return Error{"layer out of range"};
  if (offset + count > tensor_elements(t)) return Error{"upload past the end of the tensor"};
  if (count == 0) return Status::Ok();
  auto* dst = static_cast<__nv_bfloat16*>(tensor_ptr(*impl_, t, layer)) + offset;
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
  auto* dst = static_cast<uint16_t*>(tensor_ptr(I, t, layer)) + offset;
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
  return {};
}

Status LlamaModel::finish_uploads() {
  Impl& I = *impl_;
  KVC_TRY(cudaStreamSynchronize(I.stream), "upload");
  I.free_upload_stages();
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
  auto matrix = [&](void* p, size_t n, int fan_in) -> cudaError_t {
    // Uniform in [-a, a) has standard deviation a / sqrt(3).
    const float a = std::sqrt(3.0f) / std::sqrt(static_cast<float>(fan_in));
    return fill_random(p, n, KvDtype::kBF16, seed * 0x9E3779B97F4A7C15ull + ++index, a, I.stream);
  };
  auto ones = [&](void* p, size_t n) -> cudaError_t {
    fill_bf16_kernel<<<256, 256, 0, I.stream>>>(static_cast<__nv_bfloat16*>(p), n, 1.0f);
    return cudaGetLastError();
  };
  const TensorSizes s = sizes_of(dims_);
  const int h = dims_.hidden, q = dims_.q_heads * dims_.head_dim;
  KVC_TRY(matrix(I.embed, s.embed, h), "random init");
  for (auto& l : I.layers) {
    KVC_TRY(ones(l.attn_norm, s.attn_norm), "random init");
    KVC_TRY(matrix(l.qkv, s.qkv, h), "random init");
    if (dims_.qkv_bias) KVC_TRY(matrix(l.qkv_bias, s.qkv_bias, q), "random init");
    if (dims_.qk_norm) {
      KVC_TRY(ones(l.q_norm, s.qk_norm), "random init");
      KVC_TRY(ones(l.k_norm, s.qk_norm), "random init");
    }
    KVC_TRY(matrix(l.o, s.o, q), "random init");
    KVC_TRY(ones(l.mlp_norm, s.mlp_norm), "random init");
    KVC_TRY(matrix(l.gate_up, s.gate_up, h), "random init");
    KVC_TRY(matrix(l.down, s.down, dims_.intermediate), "random init");
  }
  KVC_TRY(ones(I.final_norm, s.final_norm), "random init");
  if (!dims_.tied_embeddings) KVC_TRY(matrix(I.lm_head, s.lm_head, h), "random init");
  KVC_TRY(cudaStreamSynchronize(I.stream), "random init");
  return {};
}

}  // namespace kvc::kernels::cuda
