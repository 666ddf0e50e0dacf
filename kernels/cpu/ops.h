// CPU model math for the Llama architecture (float32, row-major): the linear layers, RMSNorm,
// rotary embeddings and the SwiGLU activation. Attention lives in kernels/cpu/attention.h.
#pragma once

#include <cstdint>

namespace kvc::kernels::cpu {

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

}  // namespace kvc::kernels::cpu
