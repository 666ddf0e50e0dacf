#include "bench/cuda/engine_bench_common.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

namespace kvc::bench {

ModelCost cost_of(const ModelConfig& c, bool fp8) {
  ModelCost m;
  m.config = c;
  const double h = c.hidden_size, q = double(c.num_attention_heads) * c.head_dim,
               kv = double(c.num_key_value_heads) * c.head_dim, ff = c.intermediate_size;
  const double per_layer = h * (q + 2 * kv) + q * h + 2 * ff * h + ff * h;
  // FP8 scales of a layer's GEMMs: one per output channel and 128-column block of k, all read at
  // decode (kernels/cuda/gemm.h fp8_weight_scales).
  auto blocks = [](double k) { return std::ceil(k / 128); };
  const double scales = (q + 2 * kv + 2 * ff) * blocks(h) + h * blocks(q) + h * blocks(ff);
  m.lm_head_params = double(c.vocab_size) * h;
  m.matmul_params = c.num_hidden_layers * per_layer + m.lm_head_params;
  m.weight_bytes =
      (fp8 ? c.num_hidden_layers * (per_layer + 4 * scales) : 2 * c.num_hidden_layers * per_layer) +
      2 * (m.lm_head_params + (2.0 * c.num_hidden_layers + 1) * h);
  m.layer_rate = fp8 ? 2 : 1;
  m.attn_flops_per_ctx_token = 4.0 * q * c.num_hidden_layers;  // QK and PV
  return m;
}

GenerationRequest random_request(std::mt19937_64& rng, int tokens, int max_tokens) {
  GenerationRequest r;
  r.prompt.resize(tokens);
  for (int32_t& t : r.prompt)
    t = 'a' + static_cast<int32_t>(rng() % 26);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

EngineConfig engine_config(const EngineBenchOptions& o, bool cascade, const ModelConfig& m) {
  EngineConfig c;
  c.cascade.enabled = cascade;
  c.scheduler.max_num_seqs = std::max(256, o.groups * o.siblings);
  c.scheduler.max_tokens_per_step = o.max_tokens_per_step;
  c.scheduler.max_model_len = m.max_position_embeddings;
  c.cascade.merge_bytes_per_member =
      int64_t{3} * m.num_hidden_layers * m.num_attention_heads * (m.head_dim + 1) * 4;
  return c;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

bool write_json(const std::string& path, const nlohmann::json& doc) {
  if (path.empty()) return true;
  std::ofstream f(path);
  f << doc.dump(1) << "\n";
  if (!f) {
    std::fprintf(stderr, "bench engine: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace kvc::bench
