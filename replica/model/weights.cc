#include "replica/model/weights.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kernels/cpu/parallel.h"
#include "replica/model/safetensors.h"

namespace kvc {

namespace fs = std::filesystem;

namespace {

// One tensor of the model: its Hugging Face name, shape, and where its values go.
struct Slot {
  std::string hf_name;
  std::vector<int64_t> shape;
  float* dst;
  bool is_norm;
};

// Sizes every tensor of `w` for w.config and lists them, in a fixed order (random_weights' seeds
// depend on it). The fused gate_up tensor is two slots: gate rows, then up rows.
std::vector<Slot> allocate(ModelWeights& w) {
  const ModelConfig& c = w.config;
  const int64_t h = c.hidden_size, q = int64_t{c.num_attention_heads} * c.head_dim,
                kv = int64_t{c.num_key_value_heads} * c.head_dim, ff = c.intermediate_size,
                vocab = c.vocab_size;
  std::vector<Slot> slots;
  auto add = [&](std::vector<float>& v, std::string name, std::vector<int64_t> shape,
                 bool is_norm = false) {
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    v.resize(n);
    slots.push_back({std::move(name), std::move(shape), v.data(), is_norm});
  };
  add(w.embed, "model.embed_tokens.weight", {vocab, h});
  w.layers.resize(c.num_hidden_layers);
  for (int i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(l.attn_norm, p + "input_layernorm.weight", {h}, true);
    add(l.wq, p + "self_attn.q_proj.weight", {q, h});
    add(l.wk, p + "self_attn.k_proj.weight", {kv, h});
    add(l.wv, p + "self_attn.v_proj.weight", {kv, h});
    add(l.wo, p + "self_attn.o_proj.weight", {h, q});
    add(l.mlp_norm, p + "post_attention_layernorm.weight", {h}, true);
    l.w_gate_up.resize(2 * ff * h);
    slots.push_back({p + "mlp.gate_proj.weight", {ff, h}, l.w_gate_up.data(), false});
    slots.push_back({p + "mlp.up_proj.weight", {ff, h}, l.w_gate_up.data() + ff * h, false});
    add(l.w_down, p + "mlp.down_proj.weight", {h, ff});
  }
  add(w.final_norm, "model.norm.weight", {h}, true);
  if (!c.tie_word_embeddings) add(w.lm_head, "lm_head.weight", {vocab, h});
  return slots;
}

int64_t numel(const Slot& s) {
  int64_t n = 1;
  for (int64_t d : s.shape)
    n *= d;
  return n;
}

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

std::string folder_name(const std::string& folder) {
  std::error_code ec;
  fs::path p = fs::absolute(folder, ec).lexically_normal();
  if (ec) p = fs::path(folder);
  if (!p.has_filename()) p = p.parent_path();  // "models/tiny/"
  return p.filename().string();
}

}  // namespace

Status check_weight_shapes(const ModelWeights& weights) {
  const ModelConfig& c = weights.config;
  const size_t h = c.hidden_size, q = size_t(c.num_attention_heads) * c.head_dim,
               kv = size_t(c.num_key_value_heads) * c.head_dim, ff = c.intermediate_size,
               vocab = c.vocab_size;
  bool ok = weights.embed.size() == vocab * h && weights.final_norm.size() == h &&
            weights.lm_head.size() == (c.tie_word_embeddings ? 0 : vocab * h) &&
            weights.layers.size() == size_t(c.num_hidden_layers);
  for (size_t i = 0; ok && i < weights.layers.size(); ++i) {
    const LayerWeights& l = weights.layers[i];
    ok = l.attn_norm.size() == h && l.wq.size() == q * h && l.wk.size() == kv * h &&
         l.wv.size() == kv * h && l.wo.size() == h * q && l.mlp_norm.size() == h &&
         l.w_gate_up.size() == 2 * ff * h && l.w_down.size() == h * ff;
  }
  if (!ok) {
    return Error{"model weights do not match the shape of config '" + c.name + "'"};
  }
  return Status::Ok();
}

ModelWeights random_weights(const ModelConfig& config, uint64_t seed) {
  ModelWeights w;
  w.config = config;
  const std::vector<Slot> slots = allocate(w);
  for (size_t i = 0; i < slots.size(); ++i) {
    const Slot& s = slots[i];
    if (s.is_norm) {
      std::fill(s.dst, s.dst + numel(s), 1.0f);
    } else {
      const float stddev = 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
      fill_uniform(s.dst, numel(s), splitmix64_mix(seed ^ splitmix64_mix(i + 1)), stddev);
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
  std::ifstream config_file(config_path);
  std::stringstream config_text;
  config_text << config_file.rdbuf();
  if (!config_file) return Error{config_path.string() + ": cannot read"};
  Result<ModelConfig> config = parse_model_config(config_text.str(), folder_name(folder));
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

  HfFolder f;
  f.folder_ = folder;
  f.config_ = std::move(config).value();
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
  return f;
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

Status HfFolder::read_f32(const std::string& name, const std::vector<int64_t>& shape,
                          float* out) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) return Error{folder_ + ": missing tensor '" + name + "'"};
  return shards_[it->second].read_f32(name, shape, out);
}

Result<ModelWeights> load_hf_weights(const std::string& folder) {
  Result<HfFolder> f = HfFolder::open(folder);
  if (!f.ok()) return Error{f.error().message};
  ModelWeights w;
  w.config = f->config();
  for (const Slot& s : allocate(w)) {
    if (Status st = f->read_f32(s.hf_name, s.shape, s.dst); !st.ok()) return Error{st.message()};
  }
  return w;
}

}  // namespace kvc
