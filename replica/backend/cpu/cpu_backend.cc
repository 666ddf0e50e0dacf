#include "replica/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fp8.h"

namespace kvc {

namespace cpu = kernels::cpu;

CpuBackend::CpuBackend(ModelWeights weights, int32_t num_blocks, int32_t block_size,
                       bool fp8_weights, bool fp8_kv)
    : weights_(std::move(weights)),
      fp8_weights_(fp8_weights),
      fp8_kv_(fp8_kv),
      num_blocks_(num_blocks),
      block_size_(block_size) {
  assert(check_weight_shapes(weights_).ok());
  assert(num_blocks > 0 && block_size > 0);
  const ModelConfig& c = weights_.config;
  shape_ = {c.num_attention_heads, c.num_key_value_heads, c.head_dim, block_size,
            1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  rope_ = {c.rope_theta,           c.rope_llama3,           c.rope_factor,
           c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_position};
  const size_t floats = static_cast<size_t>(num_blocks) * block_size * kv_row();
  k_cache_.assign(c.num_hidden_layers, std::vector<float>(floats));
  v_cache_.assign(c.num_hidden_layers, std::vector<float>(floats));
  adopt_weights();
}

CpuBackend::CpuBackend(RankWeights weights, Communicator& comm, int32_t num_blocks,
                       int32_t block_size, bool fp8_weights, bool fp8_kv)
    : CpuBackend(std::move(weights.weights), num_blocks, block_size, fp8_weights, fp8_kv) {
  rank_ = {&comm, std::move(weights.lm_head_rows), weights.vocab};
}

void CpuBackend::set_rank_weights(RankWeights weights) {
  assert(rank_.comm != nullptr);
  weights_ = std::move(weights.weights);
  rank_.lm_head_rows = std::move(weights.lm_head_rows);
  rank_.vocab = weights.vocab;
  adopt_weights();
}

void CpuBackend::all_reduce(std::vector<float>& partial, int64_t n) {
  if (rank_.comm != nullptr) rank_.comm->all_reduce_sum(partial.data(), n);
}

void CpuBackend::lm_head(int rows, std::vector<float>& logits) {
  const ModelConfig& c = config();
  const int h = c.hidden_size;
  if (rank_.comm == nullptr) {
    cpu::matmul(xn_.data(), weights_.output_embedding().data(), logits.data(), rows, c.vocab_size,
                h);
    return;
  }
  const int32_t padded = rank_.vocab.padded, size = rank_.comm->size();
  const int64_t part = int64_t{rows} * padded;
  rank_logits_.resize(static_cast<size_t>(part));
  gathered_.resize(static_cast<size_t>(part * size));
  cpu::matmul(xn_.data(), rank_.lm_head_rows.data(), rank_logits_.data(), rows, padded, h);
  rank_.comm->all_gather(rank_logits_.data(), part, gathered_.data());
  cpu::gather_vocab_parts(gathered_.data(), size, rows, padded, c.vocab_size, logits.data());
}

void CpuBackend::adopt_weights() {
  // The checkpoint's KV-cache scales (an FP8 checkpoint's), else 1.0.
  const int layers = weights_.config.num_hidden_layers;
  k_scales_ = weights_.kv_scales.empty() ? std::vector<float>(layers, 1.0f) : weights_.kv_scales.k;
  v_scales_ = weights_.kv_scales.empty() ? std::vector<float>(layers, 1.0f) : weights_.kv_scales.v;
  if (!fp8_weights_) return;
  const ModelConfig& c = weights_.config;
  const int64_t h = c.hidden_size;
  for (LayerWeights& l : weights_.layers) {
    for (std::vector<float>* w : {&l.wq, &l.wk, &l.wv, &l.w_gate_up}) {
      cpu::fake_quantize_rows_fp8(w->data(), static_cast<int64_t>(w->size()) / h, h);
    }
    const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim;
    cpu::fake_quantize_rows_fp8(l.wo.data(), h, qd);
    cpu::fake_quantize_rows_fp8(l.w_down.data(), h, c.intermediate_size);
  }
}

void CpuBackend::quantize_input(std::vector<float>& x, int rows, int dim) const {
  if (fp8_weights_) cpu::fake_quantize_rows_fp8(x.data(), rows, dim);
}

void CpuBackend::set_host_blocks(int32_t n) {
  assert(n >= 0);
  num_host_blocks_ = n;
  const size_t floats = static_cast<size_t>(n) * block_size_ * kv_row();
  host_k_.assign(config().num_hidden_layers, std::vector<float>(floats));
  host_v_.assign(config().num_hidden_layers, std::vector<float>(floats));
}

Status CpuBackend::move_blocks(const ForwardBatch& batch) {
  // Every move in range first, in every build, as the CUDA backend's kernel checks them: a bad one
  // would write outside the caches. Refused whole, nothing moved.
  for (size_t i = 0; i < batch.kv_moves.size(); ++i) {
    const KvTransfer& t = batch.kv_moves[i];
    if (!cpu::valid_block_move(static_cast<int32_t>(t.kind), t.block, t.other, num_blocks_,
                               num_host_blocks_)) {
      return Error{"move_blocks: invalid argument (move " + std::to_string(i) + " of " +
                   std::to_string(batch.kv_moves.size()) + ": kind " +
                   std::to_string(static_cast<int>(t.kind)) + ", block " + std::to_string(t.block) +
                   ", other " + std::to_string(t.other) + "; " + std::to_string(num_blocks_) +
                   " blocks, " + std::to_string(num_host_blocks_) + " host slots)"};
    }
  }
  const size_t block_floats = static_cast<size_t>(block_size_) * kv_row();
  const size_t block_bytes = block_floats * sizeof(float);
  // One block of every layer's K and V from `src` (a cache or the host tier) to `dst`.
  auto copy = [&](std::vector<std::vector<float>>& dst_k, std::vector<std::vector<float>>& dst_v,
                  int32_t dst, std::vector<std::vector<float>>& src_k,
                  std::vector<std::vector<float>>& src_v, int32_t src) {
    if (&dst_k == &src_k && dst == src) return;
    for (int layer = 0; layer < config().num_hidden_layers; ++layer) {
      std::memcpy(dst_k[layer].data() + dst * block_floats,
                  src_k[layer].data() + src * block_floats, block_bytes);
      std::memcpy(dst_v[layer].data() + dst * block_floats,
                  src_v[layer].data() + src * block_floats, block_bytes);
    }
  };
  for (const KvTransfer& t : batch.kv_moves) {
    switch (t.kind) {
      case KvTransfer::Kind::kOffload:
        copy(host_k_, host_v_, t.other, k_cache_, v_cache_, t.block);
        break;
      case KvTransfer::Kind::kLoad:
        copy(k_cache_, v_cache_, t.block, host_k_, host_v_, t.other);
        break;
      case KvTransfer::Kind::kCopy:
        copy(k_cache_, v_cache_, t.block, k_cache_, v_cache_, t.other);
        break;
    }
  }
  return Status::Ok();
}

void CpuBackend::gather_rows(const ForwardBatch& batch) {
  tokens_.clear();
  positions_.clear();
  kv_dst_.clear();
  logit_rows_.clear();
  const PrefillBatch& pb = batch.prefill;
  for (int32_t c = 0; c < pb.num_chunks(); ++c) {
    const int32_t* table = pb.chunk_blocks(c);
    for (int32_t i = 0; i < pb.chunk_tokens(c); ++i) {
      const int32_t p = pb.start_pos[c] + i;
      tokens_.push_back(pb.tokens[pb.token_indptr[c] + i]);
      positions_.push_back(p);
      kv_dst_.push_back(int64_t{table[p / block_size_]} * block_size_ + p % block_size_);
    }
    if (pb.want_logits[c]) logit_rows_.push_back(static_cast<int32_t>(tokens_.size()) - 1);
  }
  const DecodeBatch& d = batch.decode;
  for (int32_t i = 0; i < d.size(); ++i) {
    logit_rows_.push_back(static_cast<int32_t>(tokens_.size()));
    tokens_.push_back(d.tokens[i]);
    positions_.push_back(d.positions[i]);
    kv_dst_.push_back(d.slots[i]);
  }
}

void CpuBackend::attention(int layer, const ForwardBatch& batch) {
  const int64_t qd = int64_t{shape_.num_q_heads} * shape_.head_dim;
  int64_t row = 0;
  const PrefillBatch& pb = batch.prefill;
  for (int32_t c = 0; c < pb.num_chunks(); ++c) {
    const int n = pb.chunk_tokens(c);
    cpu::paged_prefill(shape_, q_.data() + row * qd, k_cache(layer), v_cache(layer),
                       pb.chunk_blocks(c), pb.start_pos[c], n, attn_.data() + row * qd);
    row += n;
  }
  if (batch.decode.size() > 0) {
    cpu::cascade_decode(shape_, q_.data() + row * qd, k_cache(layer), v_cache(layer),
                        batch.decode.plan, attn_.data() + row * qd, /*lse=*/nullptr, cascade_ws_);
  }
}

void CpuBackend::mlp(const LayerWeights& l, int rows) {
  const ModelConfig& c = config();
  const int h = c.hidden_size, ff = c.intermediate_size;
  cpu::rms_norm(x_.data(), l.mlp_norm.data(), xn_.data(), rows, h, c.rms_norm_eps);
  gate_up_.resize(static_cast<size_t>(rows) * 2 * ff);
  act_.resize(static_cast<size_t>(rows) * ff);
  quantize_input(xn_, rows, h);
  cpu::matmul(xn_.data(), l.w_gate_up.data(), gate_up_.data(), rows, 2 * ff, h);
  cpu::silu_mul(gate_up_.data(), act_.data(), rows, ff);
  quantize_input(act_, rows, ff);
  cpu::matmul(act_.data(), l.w_down.data(), proj_.data(), rows, h, ff);
  all_reduce(proj_, int64_t{rows} * h);
  cpu::add_inplace(x_.data(), proj_.data(), int64_t{rows} * h);
}

Status CpuBackend::check_weights(const std::string& folder) const {
  return check_replacement(folder, weights_.config);
}

Status CpuBackend::load_weights(const std::string& folder) {
  Result<HfFolder> f = open_replacement(folder, weights_.config);
  if (!f.ok()) return Error{f.error().message};
  Result<ModelWeights> loaded = read_weights(*f);
  if (!loaded.ok()) return Error{loaded.error().message};
  loaded->config = weights_.config;  // the running model's name, context and defaults
  weights_ = std::move(loaded).value();
  adopt_weights();
  return Status::Ok();
}

Status CpuBackend::forward(const ForwardBatch& batch, ForwardOutput& out) {
  if (Status s = compute_logits(batch, logits_); !s.ok()) return s;
  sample_on_host(batch, logits_, config().vocab_size, out.samples);
  if (batch.return_logits) {
    out.logits = logits_;
  } else {
    out.logits.clear();
  }
  return Status::Ok();
}

Status CpuBackend::compute_logits(const ForwardBatch& batch, std::vector<float>& logits) {
  if (Status s = check_forward_batch(batch, num_blocks_, block_size_, config().vocab_size);
      !s.ok()) {
    return s;
  }
  if (Status s = move_blocks(batch); !s.ok()) return s;
  gather_rows(batch);
  const ModelConfig& c = config();
  const int h = c.hidden_size, d = c.head_dim;
  const int qd = c.num_attention_heads * d, kvd = c.num_key_value_heads * d;
  const int num_logits = static_cast<int>(logit_rows_.size());
  assert(num_logits == batch.num_logit_rows());
  logits.resize(static_cast<size_t>(num_logits) * c.vocab_size);
  int rows = static_cast<int>(tokens_.size());
  if (rows == 0) return Status::Ok();

  const size_t n = rows;
  x_.resize(n * h);
  xn_.resize(n * h);
  q_.resize(n * qd);
  k_.resize(n * kvd);
  v_.resize(n * kvd);
  attn_.resize(n * qd);
  proj_.resize(n * h);
  for (int r = 0; r < rows; ++r) {
    const float* e = weights_.embed.data() + static_cast<size_t>(tokens_[r]) * h;
    std::copy(e, e + h, x_.data() + static_cast<size_t>(r) * h);
  }

  for (int layer = 0; layer < c.num_hidden_layers; ++layer) {
    const LayerWeights& l = weights_.layers[layer];
    cpu::rms_norm(x_.data(), l.attn_norm.data(), xn_.data(), rows, h, c.rms_norm_eps);
    quantize_input(xn_, rows, h);
    cpu::matmul(xn_.data(), l.wq.data(), q_.data(), rows, qd, h);
    cpu::matmul(xn_.data(), l.wk.data(), k_.data(), rows, kvd, h);
    cpu::matmul(xn_.data(), l.wv.data(), v_.data(), rows, kvd, h);
    if (c.qkv_bias) {  // Qwen2
      cpu::add_bias(q_.data(), l.bq.data(), rows, qd);
      cpu::add_bias(k_.data(), l.bk.data(), rows, kvd);
      cpu::add_bias(v_.data(), l.bv.data(), rows, kvd);
    }
    if (c.qk_norm) {  // Qwen3: every head of q and of k, before RoPE
      cpu::rms_norm(q_.data(), l.q_norm.data(), q_.data(), rows * c.num_attention_heads, d,
                    c.rms_norm_eps);
      cpu::rms_norm(k_.data(), l.k_norm.data(), k_.data(), rows * c.num_key_value_heads, d,
                    c.rms_norm_eps);
    }
    cpu::rope(q_.data(), positions_.data(), rows, c.num_attention_heads, d, rope_);
    cpu::rope(k_.data(), positions_.data(), rows, c.num_key_value_heads, d, rope_);
    for (int r = 0; r < rows; ++r) {
      float* kc = k_cache(layer) + kv_dst_[r] * kv_row();
      float* vc = v_cache(layer) + kv_dst_[r] * kv_row();
      std::copy_n(k_.data() + int64_t{r} * kvd, kvd, kc);
      std::copy_n(v_.data() + int64_t{r} * kvd, kvd, vc);
      if (fp8_kv_) {  // what the cache holds: E4M3 values (attention reads them, this row too)
        cpu::fake_quantize_scaled_fp8(kc, kvd, k_scales_[layer]);
        cpu::fake_quantize_scaled_fp8(vc, kvd, v_scales_[layer]);
      }
    }
    attention(layer, batch);

    if (layer == c.num_hidden_layers - 1) {
      // Past the last KV write only the rows that return logits matter: move them to the front,
      // in output order (logit_rows_ ascends, so no row is overwritten before it is moved).
      for (int i = 0; i < num_logits; ++i) {
        const int r = logit_rows_[i];
        if (r == i) continue;
        std::copy_n(x_.data() + int64_t{r} * h, h, x_.data() + int64_t{i} * h);
        std::copy_n(attn_.data() + int64_t{r} * qd, qd, attn_.data() + int64_t{i} * qd);
      }
      rows = num_logits;
      if (rows == 0) return Status::Ok();
    }
    quantize_input(attn_, rows, qd);
    cpu::matmul(attn_.data(), l.wo.data(), proj_.data(), rows, h, qd);
    all_reduce(proj_, int64_t{rows} * h);
    cpu::add_inplace(x_.data(), proj_.data(), int64_t{rows} * h);
    mlp(l, rows);
  }

  cpu::rms_norm(x_.data(), weights_.final_norm.data(), xn_.data(), rows, h, c.rms_norm_eps);
  lm_head(rows, logits);
  return Status::Ok();
}

}  // namespace kvc
