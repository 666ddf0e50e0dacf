#include "kernels/cuda/llama.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/prefill_attention.h"
#include "kernels/cuda/sampling.h"

namespace kvc::kernels::cuda {
namespace {

// Returns the failed operation's name and the CUDA error from the enclosing function.
#define KVC_TRY(expr, what)                                           \
  do {                                                                \
    if (cudaError_t kvc_err_ = (expr); kvc_err_ != cudaSuccess) {     \
      return std::string(what) + ": " + cudaGetErrorString(kvc_err_); \
    }                                                                 \
  } while (0)

// An operation of the step: KVC_TRY, then a profile mark named after it.
#define KVC_OP(expr, what)  \
  do {                      \
    KVC_TRY(expr, what);    \
    I.mark(what, I.stream); \
  } while (0)

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

size_t align_up(size_t x, size_t a) {
  return (x + a - 1) / a * a;
}

}  // namespace

struct LlamaModel::Impl {
  // Weights.
  void* embed = nullptr;
  void* final_norm = nullptr;
  void* lm_head = nullptr;  // == embed when tied
  struct Layer {
    void *attn_norm, *qkv, *o, *mlp_norm, *gate_up, *down;
  };
  std::vector<Layer> layers;
  void* weights = nullptr;  // one allocation
  void* kv = nullptr;       // KvCacheLayout allocation
  KvCacheLayout kv_layout;

  // Activations [max_tokens, ...].
  float* residual = nullptr;  // fp32 [T, h]
  void *x = nullptr, *xn = nullptr, *q = nullptr, *qkv = nullptr, *attn = nullptr, *proj = nullptr,
       *gate_up = nullptr, *act = nullptr, *xs = nullptr;
  float* logits = nullptr;  // [max_samples, vocab]
  int32_t* tokens_out = nullptr;
  float* logprobs_out = nullptr;

  // Staging: one pinned host buffer and its device twin, copied in one cudaMemcpyAsync.
  char* host_stage = nullptr;
  char* dev_stage = nullptr;
  size_t stage_bytes = 0;
  int32_t* host_tokens_out = nullptr;
  float* host_logprobs_out = nullptr;

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
  std::unique_ptr<Gemm> gemm;
  RopeTable rope;
  AttentionShape shape;

  cudaError_t alloc(void** p, size_t bytes) {
    cudaError_t e = cudaMalloc(p, std::max<size_t>(bytes, 16));
    if (e == cudaSuccess) allocations.push_back(*p);
    return e;
  }
  cudaError_t grow(void** p, size_t* have, size_t need) {
    if (need <= *have) return cudaSuccess;
    if (*p) {
      cudaStreamSynchronize(stream);
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
    gemm.reset();
    for (void* p : allocations)
      cudaFree(p);
    if (host_stage) cudaFreeHost(host_stage);
    if (host_tokens_out) cudaFreeHost(host_tokens_out);
    if (host_logprobs_out) cudaFreeHost(host_logprobs_out);
    for (cudaEvent_t e : marks)
      cudaEventDestroy(e);
    if (step_begin) cudaEventDestroy(step_begin);
    if (step_end) cudaEventDestroy(step_end);
    if (stream) cudaStreamDestroy(stream);
  }
};

namespace {

struct TensorSizes {
  size_t embed, attn_norm, qkv, o, mlp_norm, gate_up, down, final_norm, lm_head;
};
TensorSizes sizes_of(const LlamaDims& d) {
  const size_t h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
               kv = size_t(d.kv_heads) * d.head_dim, ff = d.intermediate;
  return {size_t(d.vocab) * h,
          h,
          (q + 2 * kv) * h,
          h * q,
          h,
          2 * ff * h,
          h * ff,
          h,
          d.tied_embeddings ? 0 : size_t(d.vocab) * h};
}
size_t layer_elements(const TensorSizes& s) {
  return s.attn_norm + s.qkv + s.o + s.mlp_norm + s.gate_up + s.down;
}

// Staging layout of one step: int32 words, the SampleParams (32-byte aligned), and last the
// prefill block tables, so a step copies only up to the end of the tables it uses.
struct StageLayout {
  size_t tokens, positions, slots, q_indptr, start_pos, block_indptr, copies, sample_act_rows,
      params, block_indices_bytes, total;
};
StageLayout stage_layout(const LlamaCapacity& c) {
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
  l.copies = take(2 * size_t(c.max_copies));
  l.sample_act_rows = take(c.max_samples);
  l.params = w * 4;  // bytes
  l.block_indices_bytes = align_up(l.params + sizeof(sampling::SampleParams) * c.max_samples, 32);
  l.total = l.block_indices_bytes + size_t(c.max_blocks) * 4;
  return l;
}

}  // namespace

LlamaModel::LlamaModel(LlamaDims dims, LlamaCapacity capacity)
    : dims_(dims), capacity_(capacity), impl_(std::make_unique<Impl>()) {}
LlamaModel::~LlamaModel() = default;

size_t LlamaModel::weight_bytes(const LlamaDims& d) {
  const TensorSizes s = sizes_of(d);
  return 2 * (s.embed + s.final_norm + s.lm_head + layer_elements(s) * d.layers);
}

size_t LlamaModel::kv_bytes(const LlamaDims& d, int num_blocks, int block_size) {
  KvCacheLayout l{d.layers, num_blocks, block_size, d.kv_heads, d.head_dim, KvDtype::kBF16};
  return l.bytes();
}

size_t LlamaModel::workspace_bytes(const LlamaDims& d, const LlamaCapacity& c) {
  const size_t t = c.max_tokens, h = d.hidden, q = size_t(d.q_heads) * d.head_dim,
               kv = size_t(d.kv_heads) * d.head_dim, ff = d.intermediate;
  size_t act = t * h * 4 + 2 * (t * h * 3 + t * q * 3 + t * 2 * kv + t * 2 * ff + t * ff);
  act += 2 * size_t(c.max_samples) * h + 4 * size_t(c.max_samples) * d.vocab;
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

std::unique_ptr<LlamaModel> LlamaModel::create(const LlamaDims& d, const LlamaCapacity& c,
                                               std::string& error) {
  if (d.head_dim != 64 && d.head_dim != 128) {
    error = "head_dim " + std::to_string(d.head_dim) + " is not supported (64 or 128)";
    return nullptr;
  }
  if (d.q_heads % d.kv_heads != 0 || d.hidden % 8 != 0 || d.intermediate % 8 != 0) {
    error = "unsupported model shape (heads, hidden or intermediate size)";
    return nullptr;
  }
  std::unique_ptr<LlamaModel> m(new LlamaModel(d, c));
  Impl& I = *m->impl_;
  auto fail = [&](const char* what, cudaError_t e) {
    error = std::string(what) + ": " + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return nullptr;
  };
  if (cudaError_t e = cudaStreamCreateWithFlags(&I.stream, cudaStreamNonBlocking); e)
    return fail("cudaStreamCreate", e);
  if (cudaError_t e = cudaEventCreate(&I.step_begin); e) return fail("cudaEventCreate", e);
  if (cudaError_t e = cudaEventCreate(&I.step_end); e) return fail("cudaEventCreate", e);
  const TensorSizes s = sizes_of(d);
  const size_t weights = weight_bytes(d);
  if (cudaError_t e = I.alloc(&I.weights, weights); e) {
    error = "cannot allocate " + std::to_string(weights >> 20) +
            " MiB of weights: " + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return nullptr;
  }
  auto* p = static_cast<__nv_bfloat16*>(I.weights);
  auto take = [&](size_t n) {
    void* at = p;
    p += n;
    return at;
  };
  I.embed = take(s.embed);
  I.final_norm = take(s.final_norm);
  I.lm_head = d.tied_embeddings ? I.embed : take(s.lm_head);
  I.layers.resize(d.layers);
  for (auto& l : I.layers) {
    l.attn_norm = take(s.attn_norm);
    l.qkv = take(s.qkv);
    l.o = take(s.o);
    l.mlp_norm = take(s.mlp_norm);
    l.gate_up = take(s.gate_up);
    l.down = take(s.down);
  }
  I.kv_layout = {d.layers, c.num_blocks, c.block_size, d.kv_heads, d.head_dim, KvDtype::kBF16};
  if (cudaError_t e = I.alloc(&I.kv, I.kv_layout.bytes()); e) {
    error = "cannot allocate " + std::to_string(I.kv_layout.bytes() >> 20) + " MiB of KV cache (" +
            std::to_string(c.num_blocks) + " blocks): " + cudaGetErrorString(e);
    (void)cudaGetLastError();
    return nullptr;
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
  a(reinterpret_cast<void**>(&I.logits), size_t(c.max_samples) * d.vocab * 4);
  a(reinterpret_cast<void**>(&I.tokens_out), size_t(c.max_samples) * 4);
  a(reinterpret_cast<void**>(&I.logprobs_out), size_t(c.max_samples) * 4);
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
  I.gemm = std::make_unique<Gemm>();
  if (!I.gemm->ok()) {
    error = "cuBLASLt could not be initialised (handle or its 32 MiB workspace)";
    return nullptr;
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
  return m;
}

size_t LlamaModel::tensor_elements(LlamaTensor t) const {
  const TensorSizes s = sizes_of(dims_);
  switch (t) {
    case LlamaTensor::kEmbed:
      return s.embed;
    case LlamaTensor::kAttnNorm:
      return s.attn_norm;
    case LlamaTensor::kQkv:
      return s.qkv;
    case LlamaTensor::kO:
      return s.o;
    case LlamaTensor::kMlpNorm:
      return s.mlp_norm;
    case LlamaTensor::kGateUp:
      return s.gate_up;
    case LlamaTensor::kDown:
      return s.down;
    case LlamaTensor::kFinalNorm:
      return s.final_norm;
    case LlamaTensor::kLmHead:
      return dims_.tied_embeddings ? s.embed : s.lm_head;
  }
  return 0;
}

namespace {

void* tensor_ptr(LlamaModel::Impl& I, LlamaTensor t, int layer) {
  switch (t) {
    case LlamaTensor::kEmbed:
      return I.embed;
    case LlamaTensor::kFinalNorm:
      return I.final_norm;
    case LlamaTensor::kLmHead:
      return I.lm_head;
    case LlamaTensor::kAttnNorm:
      return I.layers[layer].attn_norm;
    case LlamaTensor::kQkv:
      return I.layers[layer].qkv;
    case LlamaTensor::kO:
      return I.layers[layer].o;
    case LlamaTensor::kMlpNorm:
      return I.layers[layer].mlp_norm;
    case LlamaTensor::kGateUp:
      return I.layers[layer].gate_up;
    case LlamaTensor::kDown:
      return I.layers[layer].down;
  }
  return nullptr;
}

bool is_layer_tensor(LlamaTensor t) {
  return t != LlamaTensor::kEmbed && t != LlamaTensor::kFinalNorm && t != LlamaTensor::kLmHead;
}

}  // namespace

std::string LlamaModel::upload(LlamaTensor t, int layer, size_t offset, const float* host,
                               size_t count) {
  if (is_layer_tensor(t) && (layer < 0 || layer >= dims_.layers)) return "layer out of range";
  if (offset + count > tensor_elements(t)) return "upload past the end of the tensor";
  auto* dst = static_cast<__nv_bfloat16*>(tensor_ptr(*impl_, t, layer)) + offset;
  // float32 pieces go through one device staging buffer and are rounded to bf16 there.
  const size_t piece = size_t{1} << 22;
  float* staging = nullptr;
  KVC_TRY(cudaMalloc(&staging, std::min(piece, count) * sizeof(float)), "upload staging");
  std::string error;
  for (size_t i = 0; i < count && error.empty(); i += piece) {
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
    if (e != cudaSuccess) error = std::string("upload: ") + cudaGetErrorString(e);
  }
  cudaFree(staging);
  return error;
}

std::string LlamaModel::upload_half(LlamaTensor t, int layer, size_t offset, const uint16_t* host,
                                    size_t count, bool is_fp16) {
  if (is_layer_tensor(t) && (layer < 0 || layer >= dims_.layers)) return "layer out of range";
  if (offset + count > tensor_elements(t)) return "upload past the end of the tensor";
  auto* dst = static_cast<uint16_t*>(tensor_ptr(*impl_, t, layer)) + offset;
  KVC_TRY(cudaMemcpyAsync(dst, host, count * 2, cudaMemcpyHostToDevice, impl_->stream), "upload");
  KVC_TRY(cudaStreamSynchronize(impl_->stream), "upload");
  if (is_fp16) {
    fp16_to_bf16_kernel<<<1024, 256, 0, impl_->stream>>>(
        reinterpret_cast<const __half*>(dst), reinterpret_cast<__nv_bfloat16*>(dst), count);
    KVC_TRY(cudaGetLastError(), "fp16 -> bf16");
    KVC_TRY(cudaStreamSynchronize(impl_->stream), "fp16 -> bf16");
  }
  return {};
}

void LlamaModel::set_profile(bool on) {
  impl_->profile = on;
}

std::string LlamaModel::random_init(uint64_t seed) {
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

std::string LlamaModel::forward(const LlamaStep& st, LlamaOutput& out) {
  std::string error = run_step(st, out);
  if (!error.empty()) {
    // Operations already queued may still read the staging buffers the next step rewrites:
    // let them drain, and clear a non-sticky error, before anything else runs.
    cudaStreamSynchronize(impl_->stream);
    (void)cudaGetLastError();
  }
  return error;
}

std::string LlamaModel::run_step(const LlamaStep& st, LlamaOutput& out) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point entered = Clock::now();
  Impl& I = *impl_;
  const LlamaDims& d = dims_;
  const LlamaCapacity& c = capacity_;
  const int num_chunks = st.token_indptr.empty() ? 0 : static_cast<int>(st.token_indptr.size()) - 1;
  const int prefill_rows = static_cast<int>(st.prefill_tokens.size());
  const int decode_rows = static_cast<int>(st.decode_tokens.size());
  const int rows = prefill_rows + decode_rows;
  const int num_samples = static_cast<int>(st.sample_rows.size());
  const int num_copies = static_cast<int>(st.copy_pairs.size() / 2);
  if (rows > c.max_tokens || num_chunks > c.max_chunks ||
      static_cast<int>(st.block_indices.size()) > c.max_blocks || num_samples > c.max_samples ||
      num_copies > c.max_copies) {
    return "step exceeds the capacity the model was created for";
  }
  out.tokens.assign(num_samples, 0);
  out.logprobs.assign(num_samples, 0.0f);
  out.logits.clear();

  // 1. Host staging: every index array of the step, then one copy to the device.
  const StageLayout sl = stage_layout(c);
  auto* hw = reinterpret_cast<int32_t*>(I.host_stage);
  auto put = [&](size_t at, std::span<const int32_t> v) {
    std::memcpy(hw + at, v.data(), v.size() * 4);
  };
  put(sl.tokens, st.prefill_tokens);
  std::memcpy(hw + sl.tokens + prefill_rows, st.decode_tokens.data(), decode_rows * 4);
  // Positions and cache slots of the prefill rows, from the chunks.
  std::vector<int32_t> act_row_of_logit_row;
  for (int ch = 0; ch < num_chunks; ++ch) {
    const int32_t* table = st.block_indices.data() + st.block_indptr[ch];
    for (int32_t r = st.token_indptr[ch]; r < st.token_indptr[ch + 1]; ++r) {
      const int32_t pos = st.start_pos[ch] + (r - st.token_indptr[ch]);
      hw[sl.positions + r] = pos;
      hw[sl.slots + r] = table[pos / c.block_size] * c.block_size + pos % c.block_size;
    }
    if (st.want_logits[ch]) act_row_of_logit_row.push_back(st.token_indptr[ch + 1] - 1);
  }
  for (int i = 0; i < decode_rows; ++i) {
    hw[sl.positions + prefill_rows + i] = st.decode_positions[i];
    hw[sl.slots + prefill_rows + i] = st.decode_slots[i];
    act_row_of_logit_row.push_back(prefill_rows + i);
  }
  if (num_chunks > 0) {
    put(sl.q_indptr, st.token_indptr);
    put(sl.start_pos, st.start_pos);
    put(sl.block_indptr, st.block_indptr);
    std::memcpy(I.host_stage + sl.block_indices_bytes, st.block_indices.data(),
                st.block_indices.size() * 4);
  }
  put(sl.copies, st.copy_pairs);
  for (int k = 0; k < num_samples; ++k) {
    const int32_t r = st.sample_rows[k];
    if (r < 0 || r >= static_cast<int32_t>(act_row_of_logit_row.size())) {
      return "sample reads a logits row the step does not produce";
    }
    hw[sl.sample_act_rows + k] = act_row_of_logit_row[r];
  }
  std::memcpy(I.host_stage + sl.params, st.sample_params.data(),
              num_samples * sizeof(sampling::SampleParams));
  const auto* dw = reinterpret_cast<const int32_t*>(I.dev_stage);
  const auto* dparams = reinterpret_cast<const sampling::SampleParams*>(I.dev_stage + sl.params);

  // Plans: prefill work list and the cascade plan, each one more async copy.
  PrefillPlan pplan;
  if (num_chunks > 0) {
    pplan = make_prefill_plan(I.shape, st.token_indptr.data(), st.start_pos.data(), num_chunks);
    KVC_TRY(I.grow(&I.prefill_plan_buf, &I.prefill_plan_bytes, prefill_workspace_bytes(pplan)),
            "prefill plan buffer");
  }
  DeviceCascadePlan dplan;
  size_t decode_ws_need = 0;
  if (decode_rows > 0) {
    if (st.plan == nullptr || st.plan->num_seqs != decode_rows) return "decode without a plan";
    dplan = make_device_plan(*st.plan, I.shape);
    KVC_TRY(I.grow(&I.decode_plan_buf, &I.decode_plan_bytes, dplan.device_bytes()),
            "decode plan buffer");
    decode_ws_need = cascade_workspace_bytes(dplan, I.shape);
    KVC_TRY(I.grow(&I.decode_ws, &I.decode_ws_bytes, decode_ws_need), "decode workspace");
  }
  // The host work is done: from here the device runs the step (the step_begin event).
  const Clock::time_point launching = Clock::now();
  I.num_marks = 0;
  KVC_TRY(cudaEventRecord(I.step_begin, I.stream), "event");
  // Up to the end of the block tables this step uses (they come last).
  const size_t stage_used = sl.block_indices_bytes + st.block_indices.size() * 4;
  KVC_TRY(cudaMemcpyAsync(I.dev_stage, I.host_stage, stage_used, cudaMemcpyHostToDevice, I.stream),
          "staging copy");
  if (num_chunks > 0) {
    KVC_TRY(upload_prefill_plan(pplan, I.prefill_plan_buf, I.prefill_plan_bytes, I.stream),
            "prefill plan upload");
  }
  if (decode_rows > 0) {
    KVC_TRY(upload_plan(dplan, I.decode_plan_buf, I.decode_plan_bytes, I.stream),
            "decode plan upload");
  }
  I.mark("staging", I.stream);

  const int h = d.hidden, qd = d.q_heads * d.head_dim, kvd = d.kv_heads * d.head_dim,
            ff = d.intermediate;
  cudaStream_t s = I.stream;
  Gemm& g = *I.gemm;
  // 2. Copy-on-write.
  if (num_copies > 0) {
    KVC_OP(copy_blocks(I.kv, I.kv_layout, dw + sl.copies, num_copies, s), "copy_blocks");
  }
  if (rows > 0) {
    // 3. Embeddings.
    KVC_OP(embedding_gather(I.embed, d.vocab, h, dw + sl.tokens, rows, I.x, s), "embedding_gather");
    for (int layer = 0; layer < d.layers; ++layer) {
      const Impl::Layer& L = I.layers[layer];
      void* kc = I.kv_layout.k(I.kv, layer);
      void* vc = I.kv_layout.v(I.kv, layer);
      // Attention block.
      KVC_OP(add_rms_norm(layer == 0 ? I.x : I.proj, I.residual, layer > 0, L.attn_norm, I.xn, rows,
                          h, d.rms_eps, s),
             "add_rms_norm");
      // One GEMM for q, k and v; RoPE writes q contiguous for the attention kernels and
      // rotates k in place; k and v go to the cache straight from the QKV rows.
      const int64_t qkv_row = qd + 2 * kvd;
      auto* qkv = static_cast<__nv_bfloat16*>(I.qkv);
      KVC_OP(g.run(I.xn, L.qkv, qkv, rows, static_cast<int>(qkv_row), h, GemmOut::kBF16, s),
             "qkv_proj");
      KVC_OP(rope(qkv, qkv_row, d.q_heads, qkv + qd, qkv_row, d.kv_heads, dw + sl.positions, rows,
                  I.rope, s, I.q, qd),
             "rope");
      KVC_OP(kv_append(qkv + qd, qkv_row, qkv + qd + kvd, qkv_row, dw + sl.slots, rows, d.kv_heads,
                       d.head_dim, KvDtype::kBF16, kc, vc, s),
             "kv_append");
      if (num_chunks > 0) {
        KVC_OP(paged_prefill(I.shape, KvDtype::kBF16, pplan, I.q, kc, vc, dw + sl.q_indptr,
                             dw + sl.block_indptr,
                             reinterpret_cast<const int32_t*>(I.dev_stage + sl.block_indices_bytes),
                             dw + sl.start_pos, I.attn, nullptr, s),
               "paged_prefill");
      }
      if (decode_rows > 0) {
        const size_t off = size_t(prefill_rows) * qd;
        KVC_OP(
            cascade_decode(I.shape, KvDtype::kBF16, dplan, static_cast<__nv_bfloat16*>(I.q) + off,
                           kc, vc, static_cast<__nv_bfloat16*>(I.attn) + off, nullptr, I.decode_ws,
                           I.decode_ws_bytes, s),
            "cascade_decode");
      }
      KVC_OP(g.run(I.attn, L.o, I.proj, rows, h, qd, GemmOut::kBF16, s), "o_proj");
      // MLP block.
      KVC_OP(add_rms_norm(I.proj, I.residual, true, L.mlp_norm, I.xn, rows, h, d.rms_eps, s),
             "add_rms_norm");
      KVC_OP(g.run(I.xn, L.gate_up, I.gate_up, rows, 2 * ff, h, GemmOut::kBF16, s), "gate_up_proj");
      KVC_OP(silu_mul(I.gate_up, I.act, rows, ff, s), "silu_mul");
      KVC_OP(g.run(I.act, L.down, I.proj, rows, h, ff, GemmOut::kBF16, s), "down_proj");
    }
    // 4. Final norm, then the LM head over one row per sample (siblings' first tokens share a
    // row: it is gathered once per sample), then sampling.
    KVC_OP(add_rms_norm(I.proj, I.residual, true, I.final_norm, I.xn, rows, h, d.rms_eps, s),
           "final norm");
  }
  if (num_samples > 0) {
    KVC_OP(embedding_gather(I.xn, rows, h, dw + sl.sample_act_rows, num_samples, I.xs, s),
           "gather sample rows");
    KVC_OP(g.run(I.xs, I.lm_head, I.logits, num_samples, d.vocab, h, GemmOut::kF32, s), "lm_head");
    KVC_OP(sample(I.logits, num_samples, st.sample_vocab > 0 ? st.sample_vocab : d.vocab, d.vocab,
                  dparams, I.tokens_out, I.logprobs_out, s),
           "sample");
    KVC_TRY(cudaMemcpyAsync(I.host_tokens_out, I.tokens_out, num_samples * 4,
                            cudaMemcpyDeviceToHost, s),
            "tokens copy");
    KVC_OP(cudaMemcpyAsync(I.host_logprobs_out, I.logprobs_out, num_samples * 4,
                           cudaMemcpyDeviceToHost, s),
           "logprobs copy");
  }
  KVC_TRY(cudaEventRecord(I.step_end, s), "event");
  const Clock::time_point waiting = Clock::now();
  KVC_TRY(cudaStreamSynchronize(s), "step");
  const Clock::time_point done = Clock::now();
  out.host_us = std::chrono::duration<double, std::micro>(waiting - entered).count();
  out.prep_us = std::chrono::duration<double, std::micro>(launching - entered).count();
  out.profile.clear();
  if (I.profile) {
    cudaEvent_t prev = I.step_begin;
    for (size_t i = 0; i < I.num_marks; ++i) {
      float ms = 0;
      cudaEventElapsedTime(&ms, prev, I.marks[i]);
      prev = I.marks[i];
      auto it = std::find_if(out.profile.begin(), out.profile.end(),
                             [&](const auto& p) { return p.first == I.mark_names[i]; });
      if (it == out.profile.end()) {
        out.profile.emplace_back(I.mark_names[i], ms * 1e3);
      } else {
        it->second += ms * 1e3;
      }
    }
  }
  out.wait_us = std::chrono::duration<double, std::micro>(done - waiting).count();
  float device_ms = 0;
  KVC_TRY(cudaEventElapsedTime(&device_ms, I.step_begin, I.step_end), "event");
  out.device_us = device_ms * 1e3;
  std::memcpy(out.tokens.data(), I.host_tokens_out, num_samples * 4);
  std::memcpy(out.logprobs.data(), I.host_logprobs_out, num_samples * 4);
  if (st.return_logits) {
    // Row r of the output holds the logits of the first sample that reads row r.
    const size_t v = d.vocab;
    out.logits.assign(act_row_of_logit_row.size() * v, 0.0f);
    std::vector<bool> done(act_row_of_logit_row.size(), false);
    for (int k = 0; k < num_samples; ++k) {
      const int32_t r = st.sample_rows[k];
      if (done[r]) continue;
      done[r] = true;
      KVC_TRY(
          cudaMemcpy(out.logits.data() + r * v, I.logits + k * v, v * 4, cudaMemcpyDeviceToHost),
          "logits copy");
    }
  }
  return {};
}

}  // namespace kvc::kernels::cuda
