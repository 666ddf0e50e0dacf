#include "replica/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "kernels/cpu/parallel.h"
#include "replica/model/safetensors.h"

namespace kvc {

namespace fs = std::filesystem;

namespace {

using kernels::ModelTensor;

bool is_norm(ModelTensor k) {
  return k == ModelTensor::kAttnNorm || k == ModelTensor::kMlpNorm ||
         k == ModelTensor::kFinalNorm || k == ModelTensor::kQNorm || k == ModelTensor::kKNorm;
}

}  // namespace

void allocate_weights(ModelWeights& w) {
  const ModelConfig& c = w.config;
  const size_t h = c.hidden_size, d = c.head_dim, q = size_t(c.num_attention_heads) * d,
               kv = size_t(c.num_key_value_heads) * d, ff = c.intermediate_size,
               vocab = c.vocab_size;
  w.embed.resize(vocab * h);
  w.final_norm.resize(h);
  w.lm_head.resize(c.tie_word_embeddings ? 0 : vocab * h);
  w.layers.resize(c.num_hidden_layers);
  for (LayerWeights& l : w.layers) {
    l.attn_norm.resize(h);
    l.wq.resize(q * h);
    l.wk.resize(kv * h);
    l.wv.resize(kv * h);
    l.wo.resize(h * q);
    l.mlp_norm.resize(h);
    l.w_gate_up.resize(2 * ff * h);
    l.w_down.resize(h * ff);
    if (c.qkv_bias) {
      l.bq.resize(q);
      l.bk.resize(kv);
      l.bv.resize(kv);
    }
    if (c.qk_norm) {
      l.q_norm.resize(d);
      l.k_norm.resize(d);
    }
  }
}

float* tensor_values(ModelWeights& w, const TensorSpec& t) {
  return const_cast<float*>(tensor_values(std::as_const(w), t));
}

namespace {

uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Value i of a stream is the i-th output of splitmix64 started at `key`: a function of (key, i)
// alone, so any split of the range over threads gives the same values.
void fill_uniform(float* dst, int64_t n, uint64_t key, float stddev) {
  constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ull;
  const float half_width = stddev * std::sqrt(3.0f);  // uniform(-a, a) has std a / sqrt(3)
  kernels::cpu::parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const uint64_t bits = splitmix64_mix(key + static_cast<uint64_t>(i + 1) * kGamma);
          const float u = static_cast<float>(bits >> 40) * 0x1p-24f;  // [0, 1)
          dst[i] = (2.0f * u - 1.0f) * half_width;
        }
      },
      /*min_chunk=*/int64_t{1} << 15);
}

Result<std::string> read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return Error{path.string() + ": cannot read"};
  return text.str();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The tensors of an FP8 checkpoint's scales next to `<linear>.weight`, in the names each layout
// gives them (compressed-tensors, transformers fp8).
constexpr const char* kScaleSuffixes[] = {".weight_scale", ".weight_scale_inv"};

std::string folder_name(const std::string& folder) {
  std::error_code ec;
  fs::path p = fs::absolute(folder, ec).lexically_normal();
  if (ec) p = fs::path(folder);
  if (!p.has_filename()) p = p.parent_path();  // "models/tiny/"
  return p.filename().string();
}

}  // namespace

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const float* tensor_values(const ModelWeights& w, const TensorSpec& t) {
  const ModelConfig& c = w.config;
  const int64_t h = c.hidden_size, q = int64_t{c.num_attention_heads} * c.head_dim;
  const LayerWeights& l = w.layers[t.layer];
  switch (t.kind) {
    case ModelTensor::kEmbed:
      return w.embed.data();
    case ModelTensor::kFinalNorm:
      return w.final_norm.data();
    case ModelTensor::kLmHead:
      return w.lm_head.data();
    case ModelTensor::kAttnNorm:
      return l.attn_norm.data();
    case ModelTensor::kQkv:  // q rows, then k, then v
      return t.offset == 0 ? l.wq.data() : t.offset == q * h ? l.wk.data() : l.wv.data();
    case ModelTensor::kQkvBias:
      return t.offset == 0 ? l.bq.data() : t.offset == q ? l.bk.data() : l.bv.data();
    case ModelTensor::kQNorm:
      return l.q_norm.data();
    case ModelTensor::kKNorm:
      return l.k_norm.data();
    case ModelTensor::kO:
      return l.wo.data();
    case ModelTensor::kMlpNorm:
      return l.mlp_norm.data();
    case ModelTensor::kGateUp:  // gate rows, then up
      return l.w_gate_up.data() + t.offset;
    case ModelTensor::kDown:
      return l.w_down.data();
  }
  return nullptr;
}

std::vector<TensorSpec> hf_tensor_specs(const ModelConfig& c) {
  const int64_t h = c.hidden_size, d = c.head_dim, q = int64_t{c.num_attention_heads} * d,
                kv = int64_t{c.num_key_value_heads} * d, ff = c.intermediate_size,
                vocab = c.vocab_size;
  using K = ModelTensor;
  std::vector<TensorSpec> specs;
  specs.push_back({"model.embed_tokens.weight", {vocab, h}, K::kEmbed, 0, 0});
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    specs.push_back({p + "input_layernorm.weight", {h}, K::kAttnNorm, i, 0});
    specs.push_back({p + "self_attn.q_proj.weight", {q, h}, K::kQkv, i, 0});
    specs.push_back({p + "self_attn.k_proj.weight", {kv, h}, K::kQkv, i, q * h});
    specs.push_back({p + "self_attn.v_proj.weight", {kv, h}, K::kQkv, i, (q + kv) * h});
    if (c.qkv_bias) {
      specs.push_back({p + "self_attn.q_proj.bias", {q}, K::kQkvBias, i, 0});
      specs.push_back({p + "self_attn.k_proj.bias", {kv}, K::kQkvBias, i, q});
      specs.push_back({p + "self_attn.v_proj.bias", {kv}, K::kQkvBias, i, q + kv});
    }
    if (c.qk_norm) {
      specs.push_back({p + "self_attn.q_norm.weight", {d}, K::kQNorm, i, 0});
      specs.push_back({p + "self_attn.k_norm.weight", {d}, K::kKNorm, i, 0});
    }
    specs.push_back({p + "self_attn.o_proj.weight", {h, q}, K::kO, i, 0});
    specs.push_back({p + "post_attention_layernorm.weight", {h}, K::kMlpNorm, i, 0});
    specs.push_back({p + "mlp.gate_proj.weight", {ff, h}, K::kGateUp, i, 0});
    specs.push_back({p + "mlp.up_proj.weight", {ff, h}, K::kGateUp, i, ff * h});
    specs.push_back({p + "mlp.down_proj.weight", {h, ff}, K::kDown, i, 0});
  }
  specs.push_back({"model.norm.weight", {h}, K::kFinalNorm, 0, 0});
  if (!c.tie_word_embeddings) specs.push_back({"lm_head.weight", {vocab, h}, K::kLmHead, 0, 0});
  return specs;
}

Status check_weight_shapes(const ModelWeights& weights) {
  const ModelConfig& c = weights.config;
  const size_t h = c.hidden_size, q = size_t(c.num_attention_heads) * c.head_dim,
               kv = size_t(c.num_key_value_heads) * c.head_dim, ff = c.intermediate_size,
               vocab = c.vocab_size;
  bool ok =
      weights.embed.size() == vocab * h && weights.final_norm.size() == h &&
      weights.lm_head.size() == (c.tie_word_embeddings ? 0 : vocab * h) &&
      weights.layers.size() == size_t(c.num_hidden_layers) &&
      (weights.kv_scales.empty() || (weights.kv_scales.k.size() == size_t(c.num_hidden_layers) &&
                                     weights.kv_scales.v.size() == size_t(c.num_hidden_layers)));
  for (size_t i = 0; ok && i < weights.layers.size(); ++i) {
    const LayerWeights& l = weights.layers[i];
    ok = l.attn_norm.size() == h && l.wq.size() == q * h && l.wk.size() == kv * h &&
         l.wv.size() == kv * h && l.wo.size() == h * q && l.mlp_norm.size() == h &&
         l.w_gate_up.size() == 2 * ff * h && l.w_down.size() == h * ff &&
         l.bq.size() == (c.qkv_bias ? q : 0) && l.bk.size() == (c.qkv_bias ? kv : 0) &&
         l.bv.size() == (c.qkv_bias ? kv : 0) &&
         l.q_norm.size() == (c.qk_norm ? size_t(c.head_dim) : 0) &&
         l.k_norm.size() == (c.qk_norm ? size_t(c.head_dim) : 0);
  }
  if (!ok) {
    return Error{"model weights do not match the shape of config '" + c.name + "'"};
  }
  return Status::Ok();
}

ModelWeights random_weights(const ModelConfig& config, uint64_t seed) {
  ModelWeights w;
  w.config = config;
  allocate_weights(w);
  const std::vector<TensorSpec> specs = hf_tensor_specs(config);
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& s = specs[i];
    float* dst = tensor_values(w, s);
    if (is_norm(s.kind)) {
      std::fill(dst, dst + s.numel(), 1.0f);
    } else {
      const float stddev = 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
      fill_uniform(dst, s.numel(), splitmix64_mix(seed ^ splitmix64_mix(i + 1)), stddev);
    }
  }
  return w;
}

Result<HfFolder> HfFolder::open(const std::string& folder) {
  std::error_code ec;
  const fs::path dir(folder);
  const fs::path config_path = dir / "config.json";
  if (!fs::is_regular_file(config_path, ec)) {
    return Error{folder + ": no config.json (expected a Hugging Face model folder)"};
  }
  Result<std::string> config_text = read_text(config_path);
  if (!config_text.ok()) return config_text.error();
  Result<ModelConfig> config = parse_model_config(*config_text, folder_name(folder));
  if (!config.ok()) return Error{folder + ": " + config.error().message};

  std::vector<std::string> shard_paths;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) {
      shard_paths.push_back(e.path().string());
    }
  }
  if (ec) return Error{folder + ": " + ec.message()};
  if (shard_paths.empty()) return Error{folder + ": no *.safetensors files"};
  std::sort(shard_paths.begin(), shard_paths.end());

  const fs::path generation_path = dir / "generation_config.json";
  if (fs::is_regular_file(generation_path, ec)) {
    Result<std::string> text = read_text(generation_path);
    if (!text.ok()) return text.error();
    if (Status s = parse_generation_config(*text, *config); !s.ok()) {
      return Error{folder + ": " + s.message()};
    }
  }

  HfFolder f;
  f.folder_ = folder;
  f.config_ = std::move(config).value();
  f.specs_ = hf_tensor_specs(f.config_);
  for (const std::string& path : shard_paths) {
    Result<SafetensorsFile> file = SafetensorsFile::open(path);
    if (!file.ok()) return Error{file.error().message};
    for (const std::string& name : file->tensor_names()) {
      auto [it, added] = f.shard_of_.emplace(name, f.shards_.size());
      if (!added) {
        return Error{folder + ": tensor '" + name + "' is in both " + f.shards_[it->second].path() +
                     " and " + path};
      }
    }
    f.shards_.push_back(std::move(file).value());
  }
  if (Status s = f.check_every_tensor_read(); !s.ok()) return Error{s.message()};
  return f;
}

Status HfFolder::check_every_tensor_read() const {
  std::set<std::string> read;
  for (const TensorSpec& t : specs_)
    read.insert(t.name);
  auto harmless = [&](const std::string& name) {
    if (ends_with(name, "rotary_emb.inv_freq")) return true;
    if (name == "lm_head.weight" && config_.tie_word_embeddings) return true;
    if (config_.checkpoint_quantization.empty()) return false;
    // An FP8 checkpoint's scales of a matrix the model reads (applied by read_f32), its static
    // activation scales (not used: activations are quantized per token) and its KV-cache scales
    // (kv_cache_scales: read by an FP8 KV cache).
    for (const char* suffix : kScaleSuffixes) {
      if (ends_with(name, suffix)) {
        return read.count(name.substr(0, name.size() - std::strlen(suffix)) + ".weight") > 0;
      }
    }
    return ends_with(name, ".input_scale") || ends_with(name, ".k_scale") ||
           ends_with(name, ".v_scale");
  };
  std::vector<std::string> extra;
  for (const auto& [name, shard] : shard_of_) {
    if (!read.count(name) && !harmless(name)) extra.push_back(name);
  }
  if (extra.empty()) return Status::Ok();
  std::string list;
  for (size_t i = 0; i < extra.size() && i < 3; ++i)
    list += (i ? ", '" : "'") + extra[i] + "'";
  if (extra.size() > 3) list += " and " + std::to_string(extra.size() - 3) + " more";
  return Error{folder_ + ": the checkpoint has tensors a " + config_.architecture +
               " (as config.json describes it) does not read: " + list +
               "; config.json does not describe these weights"};
}

Result<TensorView> HfFolder::tensor(const std::string& name,
                                    const std::vector<int64_t>& shape) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return Error{folder_ + ": missing tensor '" + name + "'"};
  Result<TensorView> t = shards_[it->second].tensor(name);
  if (!t.ok()) return t;
  if (t->shape != shape) {
    return Error{shards_[it->second].path() + ": tensor '" + name + "' has shape " +
                 shape_string(t->shape) + ", the config implies " + shape_string(shape)};
  }
  return t;
}

Result<KvCacheScales> HfFolder::kv_cache_scales() const {
  KvCacheScales scales;
  int found = 0;
  const int layers = config_.num_hidden_layers;
  for (int l = 0; l < layers; ++l) {
    for (const char* which : {"k_scale", "v_scale"}) {
      const std::string name = "model.layers." + std::to_string(l) + ".self_attn." + which;
      const auto it = shard_of_.find(name);
      if (it == shard_of_.end()) continue;
      ++found;
      Result<TensorView> t = shards_[it->second].tensor(name);
      if (!t.ok()) return Error{t.error().message};
      int64_t numel = 1;
      for (int64_t d : t->shape)
        numel *= d;
      if (numel != 1) {
        return Error{folder_ + ": KV-cache scale '" + name + "' has shape " +
                     shape_string(t->shape) + " (one value per layer is supported)"};
      }
      float x = 0;
      if (Status s = read_f32(name, t->shape, &x); !s.ok()) return Error{s.message()};
      if (!(x > 0 && x <= 3.402823466e38f)) {
        return Error{folder_ + ": KV-cache scale '" + name + "' is " + std::to_string(x) +
                     " (must be finite and > 0)"};
      }
      (which[0] == 'k' ? scales.k : scales.v).push_back(x);
    }
  }
  if (found == 0) return KvCacheScales{};
  if (found != 2 * layers) {
    return Error{folder_ + ": KV-cache scales (self_attn.k_scale / v_scale) for " +
                 std::to_string(found) + " of the " + std::to_string(2 * layers) +
                 " layer tensors: a checkpoint gives all or none"};
  }
  return scales;
}

Result<HfFolder::Fp8Scales> HfFolder::fp8_scales(const std::string& name,
                                                 const std::vector<int64_t>& shape) const {
  const std::string base = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : "";
  if (base.empty() || shape.size() != 2) {
    return Error{folder_ + ": tensor '" + name + "' is F8_E4M3 but not a Linear weight matrix"};
  }
  for (const char* suffix : kScaleSuffixes) {
    const auto it = shard_of_.find(base + suffix);
    if (it == shard_of_.end()) continue;
    const SafetensorsFile& shard = shards_[it->second];
    Result<TensorView> v = shard.tensor(base + suffix);
    if (!v.ok()) return Error{v.error().message};
    if (v->dtype == DType::kF8E4M3) return Error{shard.path() + ": '" + base + suffix + "' is F8"};
    Fp8Scales s;
    s.name = base + suffix;
    s.shape = v->shape;
    const int64_t rows = shape[0], cols = shape[1], n = v->numel();
    const auto [bn, bk] = config_.checkpoint_fp8_block;
    if (n == 1) {
      s.block_rows = rows, s.block_cols = cols;  // one scale for the tensor
    } else if (n == rows && (v->shape.size() == 1 || v->shape == std::vector<int64_t>{rows, 1})) {
      s.block_rows = 1, s.block_cols = cols;  // one per output channel
    } else if (bn > 0 &&
               v->shape == std::vector<int64_t>{(rows + bn - 1) / bn, (cols + bk - 1) / bk}) {
      s.block_rows = bn, s.block_cols = bk;
    } else {
      return Error{
          shard.path() + ": '" + s.name + "' has shape " + shape_string(v->shape) +
          ", not the scales of '" + name + "' " + shape_string(shape) + " (one, one per row" +
          (bn > 0 ? ", or one per " + std::to_string(bn) + "x" + std::to_string(bk) + " block"
                  : std::string()) +
          ")"};
    }
    return s;
  }
  return Error{folder_ + ": tensor '" + name + "' is F8_E4M3 and has no '" + base +
               ".weight_scale' (or '.weight_scale_inv')"};
}

Status HfFolder::read_f32(const std::string& name, const std::vector<int64_t>& shape, float* out,
                          const std::optional<TensorSlice>& slice) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return Error{folder_ + ": missing tensor '" + name + "'"};
  const SafetensorsFile& shard = shards_[it->second];
  if (Status st = shard.read_f32(name, shape, out, slice); !st.ok()) return st;
  if (Result<TensorView> v = shard.tensor(name); !v.ok() || v->dtype != DType::kF8E4M3) {
    return Status::Ok();  // read_f32 succeeded: the view exists
  }
  Result<Fp8Scales> s = fp8_scales(name, shape);
  if (!s.ok()) return Error{s.error().message};
  int64_t n = 1;
  for (int64_t d : s->shape)
    n *= d;
  std::vector<float> scales(static_cast<size_t>(n));
  if (Status st = shards_[shard_of_.at(s->name)].read_f32(s->name, s->shape, scales.data());
      !st.ok()) {
    return st;
  }
  const int64_t cols = shape[1], blocks_per_row = (cols + s->block_cols - 1) / s->block_cols;
  // The block read: rows [row0, row0 + rows) x columns [col0, col0 + out_cols) of the matrix.
  int64_t row0 = 0, rows = shape[0], col0 = 0, out_cols = cols;
  if (slice && slice->dim == 0) row0 = slice->begin, rows = slice->count;
  if (slice && slice->dim == 1) col0 = slice->begin, out_cols = slice->count;
  kernels::cpu::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row_scales = scales.data() + ((row0 + r) / s->block_rows) * blocks_per_row;
      for (int64_t c = 0; c < out_cols; ++c)
        out[r * out_cols + c] *= row_scales[(col0 + c) / s->block_cols];
    }
  });
  return Status::Ok();
}

Status HfFolder::check_tensors() const {
  for (const TensorSpec& s : specs_) {
    Result<TensorView> v = tensor(s.name, s.shape);
    if (!v.ok()) return Error{v.error().message};
    if (v->dtype == DType::kF8E4M3) {
      if (Result<Fp8Scales> sc = fp8_scales(s.name, s.shape); !sc.ok()) {
        return Error{sc.error().message};
      }
    }
  }
  return Status::Ok();
}

Status HfFolder::check_finite() const {
  for (const TensorSpec& s : specs_) {
    Result<TensorView> v = tensor(s.name, s.shape);
    if (!v.ok()) return Error{v.error().message};
    const std::string& path = shards_[shard_of_.at(s.name)].path();
    if (Status st = check_finite_tensor(path, s.name, v->bytes, v->dtype); !st.ok()) return st;
    if (v->dtype != DType::kF8E4M3) continue;
    Result<Fp8Scales> scales = fp8_scales(s.name, s.shape);
    if (!scales.ok()) return Error{scales.error().message};
    const SafetensorsFile& shard = shards_[shard_of_.at(scales->name)];
    Result<TensorView> sv = shard.tensor(scales->name);
    if (!sv.ok()) return Error{sv.error().message};
    if (Status st = check_finite_tensor(shard.path(), scales->name, sv->bytes, sv->dtype);
        !st.ok()) {
      return st;
    }
  }
  return Status::Ok();
}

Status write_hf_checkpoint(const ModelWeights& weights, const std::string& folder, DType dtype) {
  if (Status s = check_weight_shapes(weights); !s.ok()) return s;
  std::ofstream config(folder + "/config.json");
  config << hf_config_json(weights.config);
  if (!config) return Error{folder + "/config.json: cannot write"};
  config.close();
  std::vector<NamedTensor> tensors;
  for (const TensorSpec& s : hf_tensor_specs(weights.config)) {
    tensors.push_back(make_tensor(
        s.name, dtype, s.shape,
        std::span<const float>(tensor_values(weights, s), static_cast<size_t>(s.numel()))));
  }
  return write_safetensors(folder + "/model.safetensors", tensors, {{"format", "pt"}});
}

Result<HfFolder> open_replacement(const std::string& folder, const ModelConfig& serving) {
  Result<HfFolder> f = HfFolder::open(folder);
  if (!f.ok()) return f;
  if (Status s = check_same_model(serving, f->config()); !s.ok()) return Error{s.message()};
  if (Status s = f->check_tensors(); !s.ok()) return Error{s.message()};
  return f;
}

Status check_replacement(const std::string& folder, const ModelConfig& serving) {
  Result<HfFolder> f = open_replacement(folder, serving);
  return f.ok() ? Status::Ok() : Status(Error{f.error().message});
}

Result<ModelWeights> read_weights(const HfFolder& f) {
  ModelWeights w;
  w.config = f.config();
  allocate_weights(w);
  for (const TensorSpec& s : f.specs()) {
    if (Status st = f.read_f32(s.name, s.shape, tensor_values(w, s)); !st.ok()) {
      return Error{st.message()};
    }
  }
  Result<KvCacheScales> kv = f.kv_cache_scales();
  if (!kv.ok()) return Error{kv.error().message};
  w.kv_scales = std::move(kv).value();
  return w;
}

Result<ModelWeights> load_hf_weights(const std::string& folder) {
  Result<HfFolder> f = HfFolder::open(folder);
  if (!f.ok()) return Error{f.error().message};
  return read_weights(*f);
}

}  // namespace kvc
