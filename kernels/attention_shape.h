// The attention geometry of one layer, shared by every backend (kernels/cpu, kernels/cuda).
//
// Paged KV layout (NHD), one layer: k_cache, v_cache: [num_blocks, block_size, num_kv_heads,
// head_dim]. Token position p of a sequence lives in block table entry p / block_size, slot
// p % block_size. Query head h reads KV head h / group() (grouped-query attention).
#pragma once

namespace kvc::kernels {

struct AttentionShape {
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;  // tokens per KV block
  float scale = 0;     // multiplies q·k before the softmax, usually 1 / sqrt(head_dim)

  // Precondition: num_q_heads is a multiple of num_kv_heads.
  int group() const { return num_q_heads / num_kv_heads; }
};

}  // namespace kvc::kernels
