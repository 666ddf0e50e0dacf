// CPU model math for the Llama architecture (float32, row-major): the linear layers, RMSNorm,
// rotary embeddings and the SwiGLU activation, plus the twins of the device-only steps
// (kernels/cuda/ops.h: embedding gather, fused residual add + RMSNorm, KV append with the cache's
// rounding, block copies). Attention lives in kernels/cpu/attention.h.
#pragma once

#include <cstdint>

namespace kvc::kernels::cpu {

// How a value is stored on the device; the twins round to it (nearest, ties to even).
enum class StorageType { kF32, kF16, kBF16 };

// x rounded to t and back to float (fp16: overflow gives inf, subnormals kept; inf and NaN pass).
float round_to(float x, StorageType t);
void round_to(float* x, int64_t n, StorageType t);

// y = x · wᵀ (a Hugging Face Linear without bias). Threaded over n; blocked so a tile of w is
// reused from cache for every row of x.
// x: [m, k]; w: [n, k] (HF weight layout [out, in]); y: [m, n]; float32. y must not alias x or w.
void matmul(const float* x, const float* w, float* y, int m, int n, int k);

// y = x / sqrt(mean(x²) + eps) * w, per row (HF LlamaRMSNorm; the sum of squares is accumulated
// in double). x, y: [rows, dim] (may alias); w: [dim]; float32.
void rms_norm(const float* x, const float* w, float* y, int rows, int dim, float eps);

// Rotary embedding parameters (HF Llama config: rope_theta, rope_scaling of rope_type "llama3").
struct RopeConfig {
  float theta = 500000;
  bool llama3_scaling = false;
  float factor = 8;
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  int original_max_position = 8192;
};

// HF's inverse frequencies theta^(-2i / head_dim), rescaled by the llama3 formula when enabled,
// in double. inv_freq: [head_dim / 2].
void rope_inv_freq(int head_dim, const RopeConfig& cfg, double* inv_freq);

// In place, HF Llama convention (rotate_half): for i < head_dim / 2, the pair
// (x[i], x[i + head_dim / 2]) is rotated by the angle positions[t] * inv_freq[i], where
// inv_freq[i] = theta^(-2i / head_dim), rescaled by HF's llama3 formula when enabled. Angles and
// their sine/cosine are computed in double: a float angle at position 8192 is already off by ~1e-3.
// x: [tokens, heads, head_dim], float32; positions: [tokens]; head_dim even.
void rope(float* x, const int32_t* positions, int tokens, int heads, int head_dim,
          const RopeConfig& cfg);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)) (SwiGLU after the fused gate_up projection).
// gate_up: [rows, 2 * inter], each row gate then up; out: [rows, inter]; float32.
void silu_mul(const float* gate_up, float* out, int rows, int inter);

// y += x (the residual connection). x, y: [n], float32.
void add_inplace(float* y, const float* x, int64_t n);

// y[r] += bias for every row r (a Linear's bias). y: [rows, n]; bias: [n]; float32.
void add_bias(float* y, const float* bias, int rows, int n);

// The family options between the QKV projection and RoPE, on fused QKV rows (each row: q_heads
// heads of q, then kv_heads of k, then kv_heads of v, head_dim values each, `stride` apart):
// bias (null: none; [(q_heads + 2 * kv_heads) * head_dim]) is added to every value, then each q
// head is RMS-normalised with q_norm and each k head with k_norm (null: not normalised; [head_dim];
// HF Qwen3RMSNorm). With `storage` other than kF32, the values written are rounded as the device
// stores them, once at the end (the CUDA twin's rounding).
void qkv_bias_norm(float* qkv, int64_t stride, int rows, int q_heads, int kv_heads, int head_dim,
                   const float* bias, const float* q_norm, const float* k_norm, float eps,
                   StorageType storage = StorageType::kF32);

// out[t] = table[tokens[t]]; a token outside [0, vocab) gives a zero row.
// table: [vocab, hidden]; tokens: [num_tokens]; out: [num_tokens, hidden]; float32.
void embedding_gather(const float* table, int vocab, int hidden, const int32_t* tokens,
                      int num_tokens, float* out);

// residual = (accumulate ? residual : 0) + x (x null: residual unchanged), then
// y = w * residual / sqrt(mean(residual²) + eps) per row (the sum of squares in double).
// x, residual, y: [rows, dim]; w: [dim]; float32. The first layer passes accumulate = false.
void add_rms_norm(const float* x, float* residual, bool accumulate, const float* w, float* y,
                  int rows, int dim, float eps);

// Writes token t's K and V rows (kv_row = num_kv_heads * head_dim values) into the paged caches
// at row slots[t] (block_id * block_size + offset), rounded to cache_type; a negative slot skips
// the token. k, v: [tokens] rows of kv_row values, k_stride / v_stride apart;
// k_cache, v_cache: [num_blocks * block_size, kv_row] (the NHD layout of attention_shape.h).
void kv_append(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
               const int32_t* slots, int tokens, int kv_row, StorageType cache_type, float* k_cache,
               float* v_cache);

// The KV cache's block moves, one after another in the order given: moves [n, 3] (kind, block,
// other), kind 0 an offload (block `block` of caches -> slot `other` of host_caches), 1 a load
// (slot `other` -> block `block`), 2 a copy-on-write copy (block `other` -> block `block`), in
// every layer's K and V. caches: [num_layers, 2 (K, V), num_blocks, block_elems] (block_elems =
// block_size * num_kv_heads * head_dim); host_caches, the host tier: [num_layers, 2,
// num_host_blocks, block_elems] (nullptr and 0 without one: copies only). The twin of
// kernels/cuda/ops.h's, and like it checks every argument before it moves anything, in every
// build: false (nothing moved) for a negative count or layer count; n == 0 or no layers: true;
// otherwise false for a negative block count or block size, a negative slot count with a tier,
// a null cache or move list, or any move out of range (valid_block_move; an offload or a load
// without a host tier).
[[nodiscard]] bool move_blocks(float* caches, int num_blocks, float* host_caches,
                               int num_host_blocks, int num_layers, int64_t block_elems,
                               const int32_t* moves, int n);
// Whether (kind, block, other) is a move move_blocks takes with num_blocks blocks and
// num_host_blocks host slots (0: no tier): a kind of the three, block in [0, num_blocks), and
// other in [0, num_blocks) for a copy, [0, num_host_blocks) for an offload or a load.
bool valid_block_move(int32_t kind, int32_t block, int32_t other, int num_blocks,
                      int num_host_blocks);

// Tensor parallelism's vocab-parallel LM head: rank k's logits of `rows` samples over its `part`
// ids [k * part, (k + 1) * part) (the last rank's padded past the vocabulary), as an all-gather
// leaves them (ranks[k][row][j], rank-major), into out[row][id] for id < vocab. ranks:
// [num_ranks, rows, part]; out: [rows, vocab]. The twin of kernels/cuda/ops.h's.
void gather_vocab_parts(const float* ranks, int num_ranks, int rows, int part, int vocab,
                        float* out);

}  // namespace kvc::kernels::cpu
