// Model ops on the device for the Llama forward: embedding gather, fused residual add + RMSNorm,
// rotary embedding, SwiGLU, KV-cache append and copy-on-write block copies. The CUDA twins of
// kernels/cpu/ops.h: same math in fp32, one rounding to the output dtype at the end.
//
// Dtypes: activations and weights are bf16 (`void*` here: this header carries no CUDA types); the
// residual stream is fp32 (it accumulates every layer's output: bf16 would round it 2 x 32 times);
// KV caches are fp16 or bf16 (KvDtype). Every launcher returns the launch error (cudaSuccess, or
// cudaErrorInvalidValue for a precondition it checks) and allocates nothing, so a forward step can
// be captured in a CUDA graph.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/gemm.h"

namespace kvc::kernels::cuda {

// out[t] = table[tokens[t]]; a token outside [0, vocab) gives a zero row (padding).
// table: [vocab, hidden] bf16; tokens: [num_tokens] int32 (device); out: [num_tokens, hidden] bf16.
cudaError_t embedding_gather(const void* table, int vocab, int hidden, const int32_t* tokens,
                             int num_tokens, void* out, cudaStream_t stream = nullptr);

// The values of a raw FP8 GEMM's output (gemm.h Gemm::run_fp8_raw: the sums of code products,
// unscaled) where the next op reads them: value(r, c) = raw(r, c) * row[r] * col[c] in fp32, row
// the activation rows' scales (the first block of gemm.h fp8_activation_scales: one per row),
// col the weight's per-output-channel scales (the first block of fp8_weight_scales). The ops
// that follow a layer GEMM take one (default: off, the input is values already), so the scales
// cost no pass of their own. Both pointers or neither (else cudaErrorInvalidValue); col 16-byte
// aligned.
struct Fp8Dequant {
  const float* row = nullptr;
  const float* col = nullptr;
  bool on() const { return row != nullptr; }
};

// Per row: residual = (accumulate ? residual : 0) + x (x null: residual unchanged), then
// y = bf16(residual / sqrt(mean(residual²) + eps) * weight), all in fp32 (HF LlamaRMSNorm, with
// one rounding at the end: HF rounds the normalised value to the input dtype before the weight).
// The first layer passes the gathered embeddings with accumulate = false; later norms pass the
// previous sublayer's output with accumulate = true; the final norm likewise.
// x: [rows, hidden] bf16 or null; residual: [rows, hidden] fp32, in/out; weight: [hidden] bf16;
// y: [rows, hidden] bf16 (must not alias x). dq: x is a raw FP8 GEMM output (its columns the
// hidden features).
cudaError_t add_rms_norm(const void* x, float* residual, bool accumulate, const void* weight,
                         void* y, int rows, int hidden, float eps, cudaStream_t stream = nullptr,
                         const Fp8Dequant& dq = {});

// FP8 activations (kernels/fp8_rule.h; CPU twins kernels/cpu/fp8.h): E4M3 codes with one fp32
// scale per row (per token), for the FP8 GEMMs (gemm.h run_fp8), written by the kernel that
// produces the values. Codes rows are densely packed ([rows, dim] bytes); the scales are laid
// out as gemm.h fp8_activation_scales(rows, dim) says (count() floats).
//
// add_rms_norm with y as E4M3 codes of the fp32 normalised row (not rounded to bf16 first) and
// its scale in y_scales.
cudaError_t add_rms_norm_fp8(const void* x, float* residual, bool accumulate, const void* weight,
                             void* y, float* y_scales, int rows, int hidden, float eps,
                             cudaStream_t stream = nullptr, const Fp8Dequant& dq = {});
// silu_mul with out as E4M3 codes of the fp32 products and each row's scale in scales. dq:
// gate_up is a raw FP8 GEMM output (columns: gate's channels, then up's).
cudaError_t silu_mul_fp8(const void* gate_up, void* out, float* scales, int rows, int inter,
                         cudaStream_t stream = nullptr, const Fp8Dequant& dq = {});
// Each row of x (bf16, `stride` elements apart) as E4M3 codes q [rows, dim] and its scale in
// scales, laid out as `layout` says: the attention output before the o projection
// (fp8_activation_scales(rows, dim)), and a weight matrix [out, in] at load (one scale per output
// channel: fp8_weight_scales(rows, dim)).
cudaError_t quantize_rows_fp8(const void* x, int64_t stride, int rows, int dim, void* q,
                              float* scales, Fp8ScaleLayout layout, cudaStream_t stream = nullptr);

// Largest head_dim rope() supports.
inline constexpr int kMaxRopeHeadDim = 256;

// The rotary inverse frequencies of one model, computed once on the host in double
// (cpu::rope_inv_freq). Passed to the kernel by value: no device table to allocate.
struct RopeTable {
  int head_dim = 0;
  double inv_freq[kMaxRopeHeadDim / 2] = {};
};
// Precondition: head_dim even and <= kMaxRopeHeadDim.
RopeTable make_rope_table(int head_dim, const cpu::RopeConfig& cfg);

// In place, HF rotate_half convention (cpu::rope): for i < head_dim / 2 the pair
// (x[i], x[i + head_dim / 2]) is rotated by positions[t] * inv_freq[i]. The angle and its sine and
// cosine are computed in double per (token, i), then rounded to fp32: exact to fp32 at any
// position (fp32 sincosf of an fp32 angle is ~1e-3 off at position 131072), and cheap since
// every head of the token reuses them. The rotation is fp32, rounded once to bf16.
// q: [tokens] rows of num_q_heads * head_dim bf16, q_stride elements apart (a fused QKV output:
// its row length); k likewise with num_kv_heads (k may be null); positions: [tokens] int32
// (device). q_out (q_out_stride elements between rows) receives q's rotated rows instead of q
// itself, e.g. a contiguous [tokens, num_q_heads, head_dim] buffer for the attention kernels
// while q and k sit in a fused QKV output; null: q in place. k is always rotated in place.
// Precondition: head_dim % 4 == 0, strides even; q_out does not overlap k.
cudaError_t rope(void* q, int64_t q_stride, int num_q_heads, void* k, int64_t k_stride,
                 int num_kv_heads, const int32_t* positions, int tokens, const RopeTable& table,
                 cudaStream_t stream = nullptr, void* q_out = nullptr, int64_t q_out_stride = 0);

// The cosines and sines rope() uses, once per token for every layer of a step: cs[t * head_dim / 2
// + i] = (cos, sin) of positions[t] * inv_freq[i], computed in double and rounded to fp32 (as
// rope()). cs: [tokens, head_dim / 2] float2 (device).
cudaError_t rope_angles(const int32_t* positions, int tokens, const RopeTable& table, void* cs,
                        cudaStream_t stream = nullptr);

// rope() and kv_append() of one layer in one launch, from the angles of rope_angles(): q's
// rotated rows go to q_out, k's rotated rows and v's rows go to the caches at slots[t] (a
// negative slot skips the token's K and V); q and k themselves are not written. Bit-equal to
// rope(q, ..., k, ..., q_out) followed by kv_append(k, v, ...) (quant included: the rotated bf16
// keys are what an FP8 cache quantizes). Preconditions: those of rope() and kv_append(), and
// head_dim % 8 == 0. dq: q, k and v are a raw FP8 GEMM output whose columns are q's channels,
// then k's, then v's (a fused QKV row): the rotation and the append start from their fp32
// values, not rounded to bf16 first (so the bit-equality with rope + kv_append above holds for
// bf16 inputs only).
cudaError_t rope_kv_append(const void* q, int64_t q_stride, int num_q_heads, const void* k,
                           int64_t k_stride, const void* v, int64_t v_stride, int num_kv_heads,
                           int head_dim, const void* cs, int tokens, void* q_out,
                           int64_t q_out_stride, const int32_t* slots, KvDtype cache_dtype,
                           void* k_cache, void* v_cache, cudaStream_t stream = nullptr,
                           const KvQuant& quant = {}, const Fp8Dequant& dq = {});

// The family options between the QKV projection and RoPE, in place on fused bf16 QKV rows (each:
// q_heads heads of q, kv_heads of k, kv_heads of v; `stride` elements apart): bias (null: none;
// [(q_heads + 2 * kv_heads) * head_dim] bf16) added, then, with q_norm and k_norm (both or
// neither; [head_dim] bf16), every q and k head RMS-normalised (HF Qwen3RMSNorm). Rounded to bf16
// after the bias, after the normalisation and after the weight; CPU twin
// kernels/cpu/ops.h qkv_bias_norm with StorageType::kBF16. head_dim <= 256. Nothing to do (no
// bias, no norms, no dq): no launch. dq: qkv is a raw FP8 GEMM output (columns: the fused row's);
// every head, v's included, is written back as bf16 values, from its fp32 values (the raw sum
// times the scales, before the bias).
cudaError_t qkv_bias_norm(void* qkv, int64_t stride, int rows, int q_heads, int kv_heads,
                          int head_dim, const void* bias, const void* q_norm, const void* k_norm,
                          float eps, cudaStream_t stream = nullptr, const Fp8Dequant& dq = {});

// out = bf16(silu(gate) * up) in fp32, silu(g) = g / (1 + exp(-g)) (HF rounds silu(gate) to bf16
// first). gate_up: [rows, 2 * inter] bf16, each row gate then up; out: [rows, inter] bf16.
cudaError_t silu_mul(const void* gate_up, void* out, int rows, int inter,
                     cudaStream_t stream = nullptr);

// Writes token t's K and V rows (num_kv_heads * head_dim bf16 values, e.g. straight from the QKV
// projection after rope) into one layer's paged caches at row slots[t] = block_id * block_size +
// offset, converted to cache_dtype (bf16 -> fp16 rounds to nearest; beyond 65504 it is inf); a
// negative slot skips the token (padding). k, v: [tokens] rows, k_stride / v_stride elements
// apart; slots: [tokens] int32 (device); k_cache, v_cache: [num_blocks, block_size, num_kv_heads,
// head_dim] in cache_dtype (kernels/attention_shape.h). Precondition: slots distinct.
// quant.fp8 (attention.h KvQuant): the caches hold E4M3 codes instead (cache_dtype is not read),
// code = e4m3(x * (1 / k_scale)) for keys and likewise for values, x the bf16 value
// (kernels/fp8_rule.h: nearest, ties to even, saturating).
cudaError_t kv_append(const void* k, int64_t k_stride, const void* v, int64_t v_stride,
                      const int32_t* slots, int tokens, int num_kv_heads, int head_dim,
                      KvDtype cache_dtype, void* k_cache, void* v_cache,
                      cudaStream_t stream = nullptr, const KvQuant& quant = {});

// Every layer's KV cache in one allocation: [num_layers, 2 (K then V), num_blocks, block_size,
// num_kv_heads, head_dim] in `dtype`, or one byte per element with fp8 (E4M3 codes, KvQuant).
// Layer l's K and V are each the paged NHD cache that attention.h and kv_append take; a block
// copy is then one strided copy over 2 * num_layers caches.
struct KvCacheLayout {
  int num_layers = 0;
  int num_blocks = 0;
  int block_size = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  KvDtype dtype = KvDtype::kBF16;
  bool fp8 = false;

  int element_bytes() const { return fp8 ? 1 : 2; }
  int64_t block_elements() const { return int64_t{block_size} * num_kv_heads * head_dim; }
  int64_t cache_elements() const { return block_elements() * num_blocks; }  // one K or V
  size_t bytes() const {
    return static_cast<size_t>(cache_elements()) * element_bytes() * 2 * num_layers;
  }
  void* k(void* base, int layer) const { return at(base, 2 * int64_t{layer}); }
  void* v(void* base, int layer) const { return at(base, 2 * int64_t{layer} + 1); }

 private:
  void* at(void* base, int64_t cache) const {
    return static_cast<char*>(base) + cache * cache_elements() * element_bytes();
  }
};

// The KV cache's block moves (kv_blocks.cu, replica/backend/backend.h KvTransfer), done in the
// order given: moves [n, 3] int32 (kind, block, other) with kind 0 an offload (device block
// `block` -> host slot `other`), 1 a load (host slot `other` -> device block `block`), 2 a
// copy-on-write copy (device block `other` -> device block `block`), every layer's K and V.
// `moves` is on the device, `host_moves` the same values on the host: runs of moves in which none
// writes what another reads or writes go as one launch (a fork's copies of one source are one
// run), the runs in order. cudaErrorInvalidValue (nothing moved) for a move out of range, or a
// null cache or move list with something to move.
// host_caches: the host tier, host memory the device can address (pinned, mapped), laid out as
// host_layout (the device layout with its slots as blocks); nullptr without a tier, when only
// copies are valid. CPU twin: kernels/cpu/ops.h move_blocks.
cudaError_t move_blocks(void* caches, const KvCacheLayout& layout, void* host_caches,
                        const KvCacheLayout& host_layout, const int32_t* moves,
                        const int32_t* host_moves, int n, cudaStream_t stream = nullptr);

// Tensor parallelism's vocab-parallel LM head: rank r's logits of `rows` samples over its
// `part` ids [r * part, (r + 1) * part) (the last rank's padded past the vocabulary), as an
// all-gather leaves them (ranks[r][row][j], rank-major), into out[row][id] for id < vocab.
// ranks: [num_ranks, rows, part] float32; out: [rows, vocab] float32. CPU twin:
// kernels/cpu/ops.h gather_vocab_parts.
cudaError_t gather_vocab_parts(const float* ranks, int num_ranks, int rows, int part, int vocab,
                               float* out, cudaStream_t stream = nullptr);

}  // namespace kvc::kernels::cuda
