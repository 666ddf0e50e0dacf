// The tensors of the model as every backend stores them (HF Linear [out, in] layout, row-major):
// the checkpoint loader (replica/model/weights.h) says where each Hugging Face tensor goes, the
// device model (kernels/cuda/llama.h) takes uploads by it. kQkv is [(q_heads + 2 * kv_heads) *
// head_dim, hidden]: the q_proj rows, then k_proj, then v_proj; kGateUp is [2 * intermediate,
// hidden]: gate rows, then up rows. kQkvBias [(q_heads + 2 * kv_heads) * head_dim] exists with
// q/k/v biases (Qwen2), kQNorm and kKNorm [head_dim] with per-head q/k norms (Qwen3).
#pragma once

namespace kvc::kernels {

enum class ModelTensor {
  kEmbed,
  kAttnNorm,
  kQkv,
  kQkvBias,
  kQNorm,
  kKNorm,
  kO,
  kMlpNorm,
  kGateUp,
  kDown,
  kFinalNorm,
  kLmHead
};

// The name messages use ("qkv", "gate_up", ...).
inline const char* model_tensor_name(ModelTensor t) {
  switch (t) {
    case ModelTensor::kEmbed:
      return "embed";
    case ModelTensor::kAttnNorm:
      return "attn_norm";
    case ModelTensor::kQkv:
      return "qkv";
    case ModelTensor::kQkvBias:
      return "qkv_bias";
    case ModelTensor::kQNorm:
      return "q_norm";
    case ModelTensor::kKNorm:
      return "k_norm";
    case ModelTensor::kO:
      return "o";
    case ModelTensor::kMlpNorm:
      return "mlp_norm";
    case ModelTensor::kGateUp:
      return "gate_up";
    case ModelTensor::kDown:
      return "down";
    case ModelTensor::kFinalNorm:
      return "final_norm";
    case ModelTensor::kLmHead:
      return "lm_head";
  }
  return "?";
}

}  // namespace kvc::kernels
