// Tensor parallelism's sharding math on the CPU (replica/model/tensor_parallel.h,
// replica/backend/cpu/tensor_parallel_backend.h): the model split over 2, 4 and 8 simulated ranks
// (a thread each: split heads and columns, partial sums all-reduced, logits gathered) gives the
// unsharded model's logits, for every family option, through prefill chunks, flat decode and the
// cascade; configurations that do not split are refused by name. The transformers checkpoints
// split over two ranks: hf_reference_test.cc.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "replica/backend/communicator.h"
#include "replica/backend/cpu/cpu_backend.h"
#include "replica/backend/cpu/tensor_parallel_backend.h"
#include "replica/model/tensor_parallel.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/testing/temp_dir.h"

namespace kvc {
namespace {

using kernels::testutil::rel_l2;

constexpr int kBlock = 16;
constexpr int kBlocks = 32;

// 8 query heads over 8 KV heads, or GQA 2:1 (4 KV heads); a vocabulary no rank count divides
// (323 = 17 x 19: the trailing ranks' LM-head rows are padded at 2, 4 and 8 ranks).
ModelConfig config(bool untied, bool qkv_bias, bool qk_norm, int kv_heads = 8) {
  ModelConfig c;
  c.name = "tp-test";
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 32;
  c.intermediate_size = 256;
  c.vocab_size = 323;
  c.tie_word_embeddings = !untied;
  c.qkv_bias = qkv_bias;
  c.qk_norm = qk_norm;
  c.family = qk_norm ? ModelFamily::kQwen3 : qkv_bias ? ModelFamily::kQwen2 : ModelFamily::kLlama;
  EXPECT_TRUE(c.validate().ok());
  return c;
}

std::vector<int32_t> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t)
    x = static_cast<int32_t>(rng() % 300);
  return t;
}

// The same three forwards on any backend: two prompts sharing their first 32 tokens prefilled in
// chunks (one mixed batch of both), then one decode step of both, flat or over a cascade node of
// the shared blocks. Returns the logits of every forward, concatenated.
template <class B>
std::vector<float> run(B& b, bool cascade) {
  const std::vector<int32_t> shared = tokens(32, 1), a_tail = tokens(9, 2), c_tail = tokens(13, 3);
  std::vector<int32_t> a = shared, c = shared;
  a.insert(a.end(), a_tail.begin(), a_tail.end());
  c.insert(c.end(), c_tail.begin(), c_tail.end());
  const std::vector<int32_t> table_a = {0, 1, 2, 3}, table_c = {0, 1, 4, 5};
  std::vector<float> all, logits;
  {  // the shared blocks and a's first tokens
    ForwardBatch batch;
    batch.prefill.add({{a.begin(), a.begin() + 36}, 0, table_a, false});
    EXPECT_TRUE(b.compute_logits(batch, logits).ok());
  }
  {  // a's last tokens and c's own ones (its first 32 are the shared blocks), both with logits
    ForwardBatch batch;
    batch.prefill.add({{a.begin() + 36, a.end()}, 36, table_a, true});
    batch.prefill.add({{c.begin() + 32, c.end()}, 32, table_c, true});
    EXPECT_TRUE(b.compute_logits(batch, logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  ForwardBatch batch;
  DecodeBatch& d = batch.decode;
  const int shared_blocks = cascade ? 2 : 0;
  for (const auto& [seq, table, token] :
       {std::tuple{&a, &table_a, 7}, std::tuple{&c, &table_c, 11}}) {
    const int32_t pos = static_cast<int32_t>(seq->size());
    d.tokens.push_back(token);
    d.positions.push_back(pos);
    d.slots.push_back((*table)[pos / kBlock] * kBlock + pos % kBlock);
    d.plan.add_suffix({table->begin() + shared_blocks, table->begin() + pos / kBlock + 1},
                      pos + 1 - shared_blocks * kBlock);
  }
  if (cascade) d.plan.add_node({0, 1}, {0, 1});
  EXPECT_TRUE(b.compute_logits(batch, logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  return all;
}

TEST(TensorParallel, ConfigurationsThatDoNotSplitAreRefusedByName) {
  const ModelConfig c = config(false, false, false, /*kv_heads=*/2);
  EXPECT_TRUE(check_tensor_parallel(c, 1).ok());
  EXPECT_TRUE(check_tensor_parallel(c, 2).ok());
  const Status four = check_tensor_parallel(c, 4);
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.message().find("--tensor-parallel-size 4 does not divide the model's "
                                "num_key_value_heads 2"),
            std::string::npos)
      << four.message();
  EXPECT_NE(check_tensor_parallel(c, 3).message().find("not 1, 2, 4 or 8"), std::string::npos);
  EXPECT_FALSE(check_tensor_parallel(c, 16).ok());
  ModelConfig odd = config(false, false, false);
  odd.intermediate_size = 260;
  EXPECT_NE(check_tensor_parallel(odd, 8).message().find("intermediate_size 260"),
            std::string::npos);
}

TEST(TensorParallel, RanksTakeEqualSharesAndTheVocabularyIsCoveredOnce) {
  const ModelWeights full = random_weights(config(true, true, true), 5);
  for (int32_t size : {2, 4, 8}) {
    int32_t covered = 0;
    for (int32_t r = 0; r < size; ++r) {
      const RankWeights w = shard_weights(full, r, size);
      EXPECT_TRUE(check_weight_shapes(w.weights).ok()) << size << " ranks, rank " << r;
      EXPECT_EQ(w.weights.config.num_attention_heads, 8 / size);
      EXPECT_EQ(w.weights.config.num_key_value_heads, 8 / size);
      EXPECT_EQ(w.weights.config.intermediate_size, 256 / size);
      EXPECT_EQ(w.vocab.begin, covered);
      EXPECT_EQ(w.vocab.padded, (323 + size - 1) / size);
      EXPECT_EQ(w.lm_head_rows.size(), size_t(w.vocab.padded) * 128);
      covered += w.vocab.rows;
    }
    EXPECT_EQ(covered, 323);
  }
  // A rank's slice is the full tensor's: rank 1 of 2's first q row is the full model's row 4 x 32
  // (its first head is head 4); its first o column is column 4 x 32.
  const RankWeights r1 = shard_weights(full, 1, 2);
  EXPECT_EQ(r1.weights.layers[0].wq[0], full.layers[0].wq[size_t(4 * 32) * 128]);
  EXPECT_EQ(r1.weights.layers[0].wo[0], full.layers[0].wo[4 * 32]);
  EXPECT_EQ(r1.weights.layers[0].wo[128], full.layers[0].wo[256 + 4 * 32]);  // row 1
  // Its up rows follow its gate rows: full row 256 + 128 (the up half, rank 1's first).
  EXPECT_EQ(r1.weights.layers[0].w_gate_up[size_t(128) * 128],
            full.layers[0].w_gate_up[size_t(256 + 128) * 128]);
}

// Every rank gets the same sums, in rank order, and every rank's part of a gather.
TEST(TensorParallel, TheLocalGroupSumsAndGathersAlikeOnEveryRank) {
  constexpr int32_t kSize = 4;
  constexpr int64_t kN = 1000;
  auto group = make_local_group(kSize);
  std::vector<std::vector<float>> data(kSize), gathered(kSize);
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < kSize; ++r) {
    threads.emplace_back([&, r] {
      Communicator& comm = *group[static_cast<size_t>(r)];
      EXPECT_EQ(comm.rank(), r);
      EXPECT_EQ(comm.size(), kSize);
      std::vector<float>& x = data[static_cast<size_t>(r)];
      for (int round = 0; round < 3; ++round) {  // buffers reused between collectives
        x.assign(kN, 0.0f);
        for (int64_t i = 0; i < kN; ++i)
          x[static_cast<size_t>(i)] = 0.1f * static_cast<float>(r + 1) + 1e-3f * i + round;
        comm.all_reduce_sum(x.data(), kN);
      }
      const std::vector<float> mine(7, static_cast<float>(r));
      gathered[static_cast<size_t>(r)].resize(7 * kSize);
      comm.all_gather(mine.data(), 7, gathered[static_cast<size_t>(r)].data());
    });
  }
  for (std::thread& t : threads)
    t.join();
  for (int64_t i = 0; i < kN; ++i) {
    float want = 0;
    for (int32_t r = 0; r < kSize; ++r)
      want += 0.1f * static_cast<float>(r + 1) + 1e-3f * i + 2;
    for (int32_t r = 0; r < kSize; ++r)
      ASSERT_EQ(data[static_cast<size_t>(r)][static_cast<size_t>(i)], want) << r << " " << i;
  }
  for (int32_t r = 0; r < kSize; ++r) {
    for (int32_t k = 0; k < kSize; ++k)
      EXPECT_EQ(gathered[static_cast<size_t>(r)][static_cast<size_t>(7 * k + 3)], float(k));
  }
}

// The split model's logits are the whole model's, up to float32 summation order, for each
// family option and rank count, flat and cascade; and its KV cache per rank is 1 / size of the
// whole one.
TEST(TensorParallel, SplitOverRanksTheCpuModelGivesTheWholeModelsLogits) {
  struct Case {
    const char* name;
    ModelConfig config;
  };
  const Case cases[] = {{"llama, untied, GQA 2:1", config(true, false, false, 4)},
                        {"qwen2 biases", config(false, true, false)},
                        {"qwen3 q/k norms, untied", config(true, false, true)}};
  for (const Case& c : cases) {
    const ModelWeights full = random_weights(c.config, 9);
    for (bool cascade : {false, true}) {
      CpuBackend fresh(full, kBlocks, kBlock);
      const std::vector<float> want = run(fresh, cascade);
      ASSERT_EQ(want.size(), 4u * 323);
      for (int32_t size : {2, 4}) {
        SCOPED_TRACE(std::string(c.name) + ", " + std::to_string(size) + " ranks, " +
                     (cascade ? "cascade" : "flat"));
        CpuTensorParallelBackend split(full, size, kBlocks, kBlock);
        EXPECT_EQ(split.config().num_attention_heads, 8);  // the whole model's, for the engine
        EXPECT_EQ(split.rank(0).config().num_key_value_heads, c.config.num_key_value_heads / size);
        EXPECT_EQ(CpuBackend::kv_cache_bytes(split.rank(0).config(), kBlocks, kBlock) * size,
                  CpuBackend::kv_cache_bytes(full.config, kBlocks, kBlock));
        const std::vector<float> got = run(split, cascade);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_LT(rel_l2(got, want), 1e-5);
      }
    }
  }
  // Eight ranks: one KV head each.
  const ModelWeights full = random_weights(config(false, false, false), 3);
  CpuBackend whole(full, kBlocks, kBlock);
  CpuTensorParallelBackend split(full, 8, kBlocks, kBlock);
  const std::vector<float> got = run(split, true), want = run(whole, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_l2(got, want), 1e-5);
}

// forward() samples from the gathered logits as the whole model does (greedy and seeded
// sampling alike), and returns them when asked.
TEST(TensorParallel, SplitOverRanksTheCpuModelDrawsTheWholeModelsTokens) {
  const ModelWeights full = random_weights(config(true, true, false), 4);
  CpuBackend whole(full, kBlocks, kBlock);
  CpuTensorParallelBackend split(full, 2, kBlocks, kBlock);
  const std::vector<int32_t> prompt = tokens(40, 8);
  ForwardBatch batch;
  batch.prefill.add({prompt, 0, {0, 1, 2}, true});
  batch.return_logits = true;
  for (int32_t s = 0; s < 4; ++s) {
    SampleRequest r;
    r.sibling = s;
    r.position = 40;
    r.temperature = s == 0 ? 0.0f : 0.8f;
    r.seed = 17;
    r.top_logprobs = 3;
    batch.samples.push_back(r);
  }
  batch.sample_vocab = 300;
  ForwardOutput a, b;
  ASSERT_TRUE(whole.forward(batch, a).ok());
  ASSERT_TRUE(split.forward(batch, b).ok());
  ASSERT_EQ(b.logits.size(), 323u);
  EXPECT_LT(rel_l2(b.logits, a.logits), 1e-5);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i) {
    EXPECT_EQ(a.samples[i].token, b.samples[i].token) << "sample " << i;
    EXPECT_NEAR(a.samples[i].logprob, b.samples[i].logprob, 1e-4);
  }
}

// From a checkpoint each rank reads only its slices (read_rank_weights), and a weight update
// gives every rank its slices of the new model: logits of the whole new model; a folder of
// another shape is refused and the old weights keep serving.
TEST(TensorParallel, ACheckpointAndAWeightUpdateAreReadRankByRank) {
  const ModelConfig c = config(true, true, false, 4);
  const ModelWeights before = random_weights(c, 21), after = random_weights(c, 22);
  testing::TempDir tmp;
  const std::string old_dir = tmp.file("old"), new_dir = tmp.file("new");
  for (const auto& [w, dir] : {std::pair{&before, old_dir}, std::pair{&after, new_dir}}) {
    std::filesystem::create_directories(dir);
    ASSERT_TRUE(write_hf_checkpoint(*w, dir, DType::kF32).ok());
  }
  Result<HfFolder> f = HfFolder::open(old_dir);
  ASSERT_TRUE(f.ok()) << f.error().message;
  std::vector<RankWeights> ranks;
  for (int32_t r = 0; r < 4; ++r) {
    Result<RankWeights> w = read_rank_weights(*f, r, 4);
    ASSERT_TRUE(w.ok()) << w.error().message;
    ranks.push_back(std::move(w).value());
  }
  CpuTensorParallelBackend split(f->config(), std::move(ranks), kBlocks, kBlock);
  CpuBackend whole_before(*load_hf_weights(old_dir), kBlocks, kBlock);
  std::vector<float> got = run(split, true), want = run(whole_before, true);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LT(rel_l2(got, want), 1e-5);

  ASSERT_TRUE(split.check_weights(new_dir).ok());
  ASSERT_TRUE(split.load_weights(new_dir).ok());
  CpuBackend whole_after(*load_hf_weights(new_dir), kBlocks, kBlock);
  got = run(split, true), want = run(whole_after, true);
  EXPECT_LT(rel_l2(got, want), 1e-5);

  ModelConfig other = c;
  other.intermediate_size = 128;
  const std::string other_dir = tmp.file("other");
  std::filesystem::create_directories(other_dir);
  ASSERT_TRUE(write_hf_checkpoint(random_weights(other, 23), other_dir, DType::kF32).ok());
  EXPECT_FALSE(split.check_weights(other_dir).ok());
  EXPECT_FALSE(split.load_weights(other_dir).ok());
  EXPECT_LT(rel_l2(run(split, true), want), 1e-5);  // the new weights still serve
}

}  // namespace
}  // namespace kvc
