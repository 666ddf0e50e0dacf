// Loading checkpoints beyond plain float tensors: FP8 layouts and their errors, KV-cache scales,
// each tensor-parallel rank's slices, and tensors holding NaN or infinity.
#include "replica/model/weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "kernels/fp8_rule.h"
#include "replica/model/safetensors.h"
#include "replica/model/tensor_parallel.h"
#include "tests/replica/model/hf_folder_testing.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using ::testing::HasSubstr;
using namespace kvc::testing;  // NOLINT(google-build-using-namespace): the folder helpers

// FP8 checkpoints as published. The projections' weights become E4M3 codes with their scales
// beside them: compressed-tensors' per-channel (bf16 scales [rows, 1]) or per-tensor (one F32
// scale) `weight_scale`, or transformers' fp8 `weight_scale_inv` per block (32 x 40 here: blocks
// that do not divide the 64 x 96 matrices). Returns the values a loader must produce: each code's
// value times its scale as stored.
enum class Fp8Layout { kChannel, kTensor, kBlock };
std::vector<HfTensor> fp8_tensors(const ModelWeights& w, Fp8Layout layout, ModelWeights& expected) {
  std::vector<HfTensor> out;
  expected = w;
  const std::vector<TensorSpec> specs = hf_tensor_specs(w.config);
  for (HfTensor t : hf_tensors(w)) {
    const bool matrix = t.name.find("_proj.weight") != std::string::npos;
    auto expect_values = [&](const std::vector<float>& values) {
      for (const TensorSpec& spec : specs) {
        if (spec.name == t.name) {
          float* dst = const_cast<float*>(tensor_values(expected, spec));
          std::copy(values.begin(), values.end(), dst);
        }
      }
    };
    if (!matrix) {
      std::vector<float> stored = t.values;
      for (float& x : stored)
        x = rounded(x, t.dtype);
      expect_values(stored);
      out.push_back(t);
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];
    const int64_t bn = layout == Fp8Layout::kBlock ? 32 : layout == Fp8Layout::kChannel ? 1 : rows;
    const int64_t bk = layout == Fp8Layout::kBlock ? 40 : cols;
    const int64_t nb_r = (rows + bn - 1) / bn, nb_c = (cols + bk - 1) / bk;
    std::vector<float> scales(nb_r * nb_c);
    for (int64_t br = 0; br < nb_r; ++br) {
      for (int64_t bc = 0; bc < nb_c; ++bc) {
        float m = 0;
        for (int64_t r = br * bn; r < std::min(rows, (br + 1) * bn); ++r)
          for (int64_t c = bc * bk; c < std::min(cols, (bc + 1) * bk); ++c)
            m = std::max(m, std::abs(t.values[r * cols + c]));
        scales[br * nb_c + bc] = kernels::fp8::row_scale(m);
      }
    }
    const DType scale_dtype = layout == Fp8Layout::kChannel ? DType::kBF16 : DType::kF32;
    for (float& x : scales)
      x = rounded(x, scale_dtype);
    std::vector<float> codes(t.values.size()), values(t.values.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float sc = scales[(r / bn) * nb_c + c / bk];
        const uint8_t code = kernels::fp8::e4m3_from_float(t.values[r * cols + c] / sc);
        codes[r * cols + c] = kernels::fp8::e4m3_to_float(code);
        values[r * cols + c] = kernels::fp8::e4m3_to_float(code) * sc;
      }
    }
    const std::string base = t.name.substr(0, t.name.size() - 7);
    out.push_back({t.name, t.shape, codes, DType::kF8E4M3});
    if (layout == Fp8Layout::kBlock) {
      out.push_back({base + ".weight_scale_inv", {nb_r, nb_c}, scales, scale_dtype});
    } else if (layout == Fp8Layout::kChannel) {
      out.push_back({base + ".weight_scale", {rows, 1}, scales, scale_dtype});
      out.push_back({base + ".input_scale", {1}, {0.5f}, DType::kF32});  // static: not read
    } else {
      out.push_back({base + ".weight_scale", {}, scales, scale_dtype});
    }
    expect_values(values);
  }
  return out;
}

nlohmann::json fp8_config(const ModelConfig& c, Fp8Layout layout) {
  nlohmann::json j = config_json(c);
  if (layout == Fp8Layout::kBlock) {
    j["quantization_config"] = {
        {"quant_method", "fp8"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {32, 40}}};
  } else {
    j["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "float-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"weights",
             {{"num_bits", 8},
              {"type", "float"},
              {"strategy", layout == Fp8Layout::kChannel ? "channel" : "tensor"},
              {"symmetric", true},
              {"dynamic", false}}},
            {"input_activations",
             {{"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}}}}}}},
        {"ignore", {"lm_head"}}};
  }
  return j;
}

TEST(LoadHfWeights, Fp8CheckpointsAreDequantizedByTheirScales) {
  for (Fp8Layout layout : {Fp8Layout::kChannel, Fp8Layout::kTensor, Fp8Layout::kBlock}) {
    SCOPED_TRACE(static_cast<int>(layout));
    testing::TempDir tmp;
    const ModelWeights w = random_weights(small_config(false), 8);
    ModelWeights expected;
    const std::vector<HfTensor> tensors = fp8_tensors(w, layout, expected);
    write_folder(tmp.path(), fp8_config(w.config, layout), tensors);
    Result<HfFolder> f = HfFolder::open(tmp.path());
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_THAT(f->config().checkpoint_quantization, HasSubstr("fp8"));
    ASSERT_TRUE(f->check_tensors().ok()) << f->check_tensors().message();
    Result<TensorView> wq = f->tensor("model.layers.0.self_attn.q_proj.weight", {64, 64});
    ASSERT_TRUE(wq.ok()) << wq.error().message;
    EXPECT_EQ(wq->dtype, DType::kF8E4M3);
    Result<ModelWeights> loaded = read_weights(*f);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    for (const TensorSpec& s : hf_tensor_specs(w.config)) {
      const float* got = tensor_values(*loaded, s);
      const float* want = tensor_values(expected, s);
      ASSERT_TRUE(std::equal(got, got + s.numel(), want)) << s.name;
    }
  }
}

// A tensor-parallel rank reads only its slices of a checkpoint (read_rank_weights): they are
// exactly the slices of the whole model as read (shard_weights), plain, tied or untied, and FP8
// with per-channel, per-tensor and 32 x 40 block scales, whose blocks the ranks' row and column
// slices cut across (rank 1's o_proj columns 32-63 span blocks 0 and 1).
TEST(LoadHfWeights, EachTensorParallelRankReadsItsSlices) {
  struct Case {
    const char* name;
    bool tied;
    std::optional<Fp8Layout> fp8;
  };
  const Case cases[] = {{"bf16/f16 untied", false, std::nullopt},
                        {"tied", true, std::nullopt},
                        {"fp8 channel", false, Fp8Layout::kChannel},
                        {"fp8 tensor", false, Fp8Layout::kTensor},
                        {"fp8 block", true, Fp8Layout::kBlock}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    testing::TempDir tmp;
    const ModelWeights w = random_weights(small_config(c.tied), 12);
    if (c.fp8) {
      ModelWeights expected;
      write_folder(tmp.path(), fp8_config(w.config, *c.fp8), fp8_tensors(w, *c.fp8, expected));
    } else {
      write_folder(tmp.path(), config_json(w.config), hf_tensors(w));
    }
    Result<HfFolder> f = HfFolder::open(tmp.path());
    ASSERT_TRUE(f.ok()) << f.error().message;
    Result<ModelWeights> full = read_weights(*f);
    ASSERT_TRUE(full.ok()) << full.error().message;
    for (int32_t rank = 0; rank < 2; ++rank) {
      Result<RankWeights> got = read_rank_weights(*f, rank, 2);
      ASSERT_TRUE(got.ok()) << got.error().message;
      const RankWeights want = shard_weights(*full, rank, 2);
      for (const TensorSpec& s : hf_tensor_specs(want.weights.config)) {
        const float* a = tensor_values(got->weights, s);
        const float* b = tensor_values(want.weights, s);
        EXPECT_TRUE(std::equal(a, a + s.numel(), b)) << "rank " << rank << ": " << s.name;
      }
      EXPECT_EQ(got->lm_head_rows, want.lm_head_rows) << "rank " << rank;
      EXPECT_EQ(got->vocab.begin, want.vocab.begin);
      EXPECT_EQ(got->vocab.rows, want.vocab.rows);
    }
    // 4 ranks do not divide the 2 KV heads: refused, naming the field.
    Result<RankWeights> four = read_rank_weights(*f, 0, 4);
    ASSERT_FALSE(four.ok());
    EXPECT_THAT(four.error().message, HasSubstr("num_key_value_heads 2"));
  }
}

// What a device upload streams from a 16-bit checkpoint (CudaBackend::upload_rank_folder): each
// rank tensor's slice of the mapped bytes (plan_rank, copy_slice_bytes), and the LM head's rows,
// are exactly the values read_rank_weights gives, for bf16 and f16, tied and untied.
TEST(LoadHfWeights, RankSlicesOfTheMappedBytesAreTheRankWeights) {
  for (const DType dtype : {DType::kBF16, DType::kF16}) {
    for (const bool tied : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + (tied ? " tied" : " untied"));
      testing::TempDir tmp;
      const ModelWeights w = random_weights(small_config(tied), 21);
      ASSERT_TRUE(write_hf_checkpoint(w, tmp.path(), dtype).ok());
      Result<HfFolder> f = HfFolder::open(tmp.path());
      ASSERT_TRUE(f.ok()) << f.error().message;
      auto as_floats = [&](const std::vector<std::byte>& b) {
        std::vector<float> v(b.size() / 2);
        for (size_t i = 0; i < v.size(); ++i) {
          uint16_t h;
          std::memcpy(&h, b.data() + 2 * i, 2);
          v[i] = dtype == DType::kBF16 ? bf16_to_float(h) : f16_to_float(h);
        }
        return v;
      };
      for (int32_t rank = 0; rank < 2; ++rank) {
        Result<RankPlan> plan = plan_rank(f->config(), f->specs(), rank, 2);
        ASSERT_TRUE(plan.ok()) << plan.error().message;
        Result<RankWeights> want = read_rank_weights(*f, rank, 2);
        ASSERT_TRUE(want.ok()) << want.error().message;
        for (const RankTensor& t : plan->tensors) {
          Result<TensorView> v = f->tensor(t.full.name, t.full.shape);
          ASSERT_TRUE(v.ok()) << v.error().message;
          ASSERT_EQ(v->dtype, dtype);
          std::vector<std::byte> part(size_t(t.part.numel()) * 2);
          copy_slice_bytes(v->bytes.data(), 2, t.full.shape, t.slice, part.data());
          const float* expected = tensor_values(want->weights, t.part);
          EXPECT_EQ(as_floats(part), std::vector<float>(expected, expected + t.part.numel()))
              << "rank " << rank << ": " << t.full.name;
        }
        Result<TensorView> head = f->tensor(plan->head.name, plan->head.shape);
        ASSERT_TRUE(head.ok());
        const int64_t h = f->config().hidden_size;
        std::vector<std::byte> rows(size_t(plan->vocab.rows * h) * 2);
        copy_slice_bytes(head->bytes.data(), 2, plan->head.shape,
                         TensorSlice{0, plan->vocab.begin, plan->vocab.rows}, rows.data());
        std::vector<float> got = as_floats(rows);
        got.resize(size_t(plan->vocab.padded * h), 0.0f);  // the padding rows: zeros
        EXPECT_EQ(got, want->lm_head_rows) << "rank " << rank;
      }
    }
  }
}

TEST(LoadHfWeights, Fp8CheckpointErrorsNameTheTensor) {
  const ModelWeights w = random_weights(small_config(false), 9);
  ModelWeights expected;
  const std::vector<HfTensor> tensors = fp8_tensors(w, Fp8Layout::kChannel, expected);
  auto open_error = [&](const std::vector<HfTensor>& t, const nlohmann::json& config) {
    testing::TempDir tmp;
    write_folder(tmp.path(), config, t);
    Result<HfFolder> f = HfFolder::open(tmp.path());
    if (!f.ok()) return f.error().message;
    Status s = f->check_tensors();
    return s.ok() ? std::string("(accepted)") : s.message();
  };
  const nlohmann::json config = fp8_config(w.config, Fp8Layout::kChannel);
  std::vector<HfTensor> missing = tensors;
  std::erase_if(missing, [](const HfTensor& t) {
    return t.name == "model.layers.1.mlp.down_proj.weight_scale";
  });
  EXPECT_THAT(open_error(missing, config), HasSubstr("model.layers.1.mlp.down_proj.weight_scale"));
  std::vector<HfTensor> wrong = tensors;
  for (HfTensor& t : wrong) {
    if (t.name == "model.layers.0.self_attn.o_proj.weight_scale") {
      t.shape = {32, 2};  // neither one, one per row, nor one per block
    }
  }
  EXPECT_THAT(open_error(wrong, config), HasSubstr("o_proj.weight_scale' has shape [32, 2]"));
  // F8 codes in a checkpoint whose config does not say it is quantized: the scale tensors are
  // tensors the model does not read.
  EXPECT_THAT(open_error(tensors, config_json(w.config)), HasSubstr("does not read"));
  // A scale of a tensor the model does not read is not harmless.
  std::vector<HfTensor> stray = tensors;
  stray.push_back({"model.layers.0.mlp.extra_proj.weight_scale", {1}, {1.0f}, DType::kF32});
  EXPECT_THAT(open_error(stray, config), HasSubstr("extra_proj.weight_scale"));
}

// An FP8 checkpoint's KV-cache scales (self_attn.k_scale / v_scale, as compressed-tensors writes
// them): read per layer, scalar or one-element, any float dtype; all layers or none; a scale that
// is not one finite positive number is refused by name.
TEST(LoadHfWeights, KvCacheScalesAreReadForEveryLayerOrNone) {
  const ModelWeights w = random_weights(small_config(false), 10);
  ModelWeights expected;
  const std::vector<HfTensor> tensors = fp8_tensors(w, Fp8Layout::kChannel, expected);
  const nlohmann::json config = fp8_config(w.config, Fp8Layout::kChannel);
  const int layers = w.config.num_hidden_layers;
  auto with_scales = [&](int first_layer) {
    std::vector<HfTensor> t = tensors;
    for (int l = first_layer; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      t.push_back({p + "k_scale", {}, {0.25f * (l + 1)}, DType::kF32});
      t.push_back({p + "v_scale", {1}, {2.0f + l}, DType::kBF16});
    }
    return t;
  };
  auto read = [&](const std::vector<HfTensor>& t) -> Result<ModelWeights> {
    testing::TempDir tmp;
    write_folder(tmp.path(), config, t);
    Result<HfFolder> f = HfFolder::open(tmp.path());
    if (!f.ok()) return Error{f.error().message};
    return read_weights(*f);
  };
  Result<ModelWeights> none = read(tensors);
  ASSERT_TRUE(none.ok()) << none.error().message;
  EXPECT_TRUE(none->kv_scales.empty());
  Result<ModelWeights> all = read(with_scales(0));
  ASSERT_TRUE(all.ok()) << all.error().message;
  ASSERT_EQ(all->kv_scales.k.size(), size_t(layers));
  for (int l = 0; l < layers; ++l) {
    EXPECT_EQ(all->kv_scales.k[l], 0.25f * (l + 1));
    EXPECT_EQ(all->kv_scales.v[l], 2.0f + l);
  }
  EXPECT_TRUE(check_weight_shapes(*all).ok());
  Result<ModelWeights> some = read(with_scales(1));
  ASSERT_FALSE(some.ok());
  EXPECT_THAT(some.error().message, HasSubstr("all or none"));
  std::vector<HfTensor> wide = with_scales(0), zero = with_scales(0);
  for (HfTensor& t : wide) {
    if (t.name == "model.layers.1.self_attn.k_scale") t = {t.name, {2}, {1.0f, 2.0f}, DType::kF32};
  }
  for (HfTensor& t : zero) {
    if (t.name == "model.layers.0.self_attn.v_scale") t.values = {0.0f};
  }
  EXPECT_THAT(read(wide).error().message, HasSubstr("layers.1.self_attn.k_scale' has shape [2]"));
  EXPECT_THAT(read(zero).error().message, HasSubstr("layers.0.self_attn.v_scale' is 0"));
}

// A NaN or an infinity in a tensor the model reads (any dtype; an FP8 matrix's codes or its
// scales) is refused with the tensor named, by read_weights (read_f32 checks what it converts:
// start-up and the CPU backend's updates) and by HfFolder::check_finite (what the GPU backends
// run before they upload a checkpoint); a finite checkpoint passes both.
TEST(LoadHfWeights, NonFiniteValuesAreRefusedByName) {
  const ModelWeights w = random_weights(small_config(false), 11);
  auto errors = [](const std::vector<HfTensor>& t,
                   const nlohmann::json& config) -> std::pair<std::string, std::string> {
    testing::TempDir tmp;
    write_folder(tmp.path(), config, t);
    Result<HfFolder> f = HfFolder::open(tmp.path());
    EXPECT_TRUE(f.ok()) << f.error().message;
    if (!f.ok()) return {};
    const Status checked = f->check_finite();
    Result<ModelWeights> read = read_weights(*f);
    return {checked.ok() ? std::string("(accepted)") : checked.message(),
            read.ok() ? std::string("(accepted)") : read.error().message};
  };
  auto refused = [](const std::string& name, size_t at) {
    return HasSubstr("tensor '" + name + "' holds NaN or infinite values (the first at element " +
                     std::to_string(at) + " of ");
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<HfTensor> good = hf_tensors(w);
  {
    const auto [checked, read] = errors(good, config_json(w.config));
    EXPECT_EQ(checked, "(accepted)");
    EXPECT_EQ(read, "(accepted)");
  }
  // The final norm (F32 here) all NaN, one infinity in a BF16 matrix, -inf in an F16 one.
  struct Case {
    std::string name;
    size_t at;
    float value;
    bool all;
  };
  for (const Case& c : {Case{"model.norm.weight", 0, nan, true},
                        Case{"model.layers.0.mlp.down_proj.weight", 77, inf, false},
                        Case{"model.layers.1.self_attn.k_proj.weight", 5, -inf, false}}) {
    std::vector<HfTensor> bad = good;
    for (HfTensor& t : bad) {
      if (t.name != c.name) continue;
      if (c.all) std::fill(t.values.begin(), t.values.end(), c.value);
      t.values[c.at] = c.value;
    }
    const auto [checked, read] = errors(bad, config_json(w.config));
    EXPECT_THAT(checked, refused(c.name, c.at));
    EXPECT_THAT(read, refused(c.name, c.at));
  }
  // FP8: a NaN code (0x7F) in a matrix, a NaN among a matrix's scales.
  ModelWeights expected;
  const std::vector<HfTensor> fp8 = fp8_tensors(w, Fp8Layout::kChannel, expected);
  const nlohmann::json fp8_json = fp8_config(w.config, Fp8Layout::kChannel);
  {
    const auto [checked, read] = errors(fp8, fp8_json);
    EXPECT_EQ(checked, "(accepted)");
    EXPECT_EQ(read, "(accepted)");
  }
  for (const std::string name :
       {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.up_proj.weight_scale"}) {
    std::vector<HfTensor> bad = fp8;
    for (HfTensor& t : bad)
      if (t.name == name) t.values[3] = nan;
    const auto [checked, read] = errors(bad, fp8_json);
    EXPECT_THAT(checked, refused(name, 3));
    EXPECT_THAT(read, refused(name, 3));
  }
}

}  // namespace
}  // namespace kvc
