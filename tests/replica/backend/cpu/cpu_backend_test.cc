// The CPU backend on the tiny preset with random weights, checked through routes that must agree:
// one prefill chunk == several chunks; decode steps == prefilling the same tokens; cascade ==
// flat over shared physical blocks; a copied block == the original; a mixed batch == its parts.
#include "replica/backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "tests/testing/forward_batches.h"

namespace kvc {
namespace {

constexpr int kBlock = 16;
constexpr int kNumBlocks = 24;

const ModelWeights& tiny_weights() {
  static const ModelWeights w = random_weights(preset_config("tiny").value(), 11);
  return w;
}

CpuBackend make_backend(const ModelWeights& w = tiny_weights()) {
  return CpuBackend(w, kNumBlocks, kBlock);
}

std::vector<int32_t> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t)
    x = static_cast<int32_t>(rng() % 256);
  return t;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// ||a - b|| / ||b||
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

std::vector<float> row(const std::vector<float>& logits, int r) {
  const int v = tiny_weights().config.vocab_size;
  return {logits.begin() + r * v, logits.begin() + (r + 1) * v};
}

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

using testing::chunk;

// Prefills `tokens` at positions [0, n) in chunks of the given sizes, one forward each; returns
// the logits of the last token.
std::vector<float> prefill(CpuBackend& b, const std::vector<int32_t>& tokens,
                           const std::vector<int32_t>& table, const std::vector<int>& sizes) {
  std::vector<float> logits(7, NAN);
  int start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool last = i + 1 == sizes.size();
    ForwardBatch batch;
    batch.prefill.add(chunk(tokens, start, start + sizes[i], table, last));
    EXPECT_TRUE(b.compute_logits(batch, logits).ok());
    EXPECT_EQ(logits.size(), last ? size_t(b.config().vocab_size) : 0u);
    start += sizes[i];
  }
  EXPECT_EQ(start, static_cast<int>(tokens.size()));
  return logits;
}

std::vector<float> prefill(CpuBackend& b, const std::vector<int32_t>& tokens,
                           const std::vector<int32_t>& table) {
  return prefill(b, tokens, table, {static_cast<int>(tokens.size())});
}

// testing::add_decode in blocks of kBlock.
void add_decode(DecodeBatch& d, int32_t token, int32_t pos, const std::vector<int32_t>& table,
                int shared_blocks = 0) {
  testing::add_decode(d, token, pos, table, kBlock, shared_blocks);
}

std::vector<float> decode_one(CpuBackend& b, int32_t token, int32_t pos,
                              const std::vector<int32_t>& table) {
  ForwardBatch batch;
  add_decode(batch.decode, token, pos, table);
  std::vector<float> logits;
  EXPECT_TRUE(b.compute_logits(batch, logits).ok());
  return logits;
}

// Greedy decode `steps` tokens on `b` after `prompt`, whose prefill gave `logits` (blocks
// `table`): each step's logits equal, within `tol`, a prefill of the whole sequence on a fresh
// backend of the same kind (`fresh`, other blocks).
void expect_decode_matches_prefill(CpuBackend& b, std::vector<float> logits,
                                   std::vector<int32_t> prompt, const std::vector<int32_t>& table,
                                   int steps, double tol, CpuBackend (*fresh)()) {
  std::vector<int32_t>& seq = prompt;
  for (int step = 0; step < steps; ++step) {
    const int32_t token = argmax(logits);
    seq.push_back(token);
    logits = decode_one(b, token, static_cast<int32_t>(seq.size()) - 1, table);
    CpuBackend reference = fresh();
    EXPECT_LT(rel_l2(logits, prefill(reference, seq, {5, 6, 7, 8})), tol) << "step " << step;
  }
}

// The Llama forward written out densely in double, independent of kernels/cpu: the logits of
// the last of `tokens` (positions 0..n-1). HF conventions: RMSNorm, rotate_half RoPE, GQA, SwiGLU.
std::vector<double> reference_logits(const ModelWeights& w, const std::vector<int32_t>& tokens) {
  const ModelConfig& c = w.config;
  const int n = static_cast<int>(tokens.size()), h = c.hidden_size, d = c.head_dim,
            hq = c.num_attention_heads, hkv = c.num_key_value_heads, ff = c.intermediate_size;
  using Mat = std::vector<std::vector<double>>;
  auto linear = [](const Mat& x, const std::vector<float>& wt, int out, int in) {
    Mat y(x.size(), std::vector<double>(out));
    for (size_t r = 0; r < x.size(); ++r)
      for (int o = 0; o < out; ++o)
        for (int i = 0; i < in; ++i)
          y[r][o] += x[r][i] * wt[size_t(o) * in + i];
    return y;
  };
  auto norm = [&](const Mat& x, const std::vector<float>& g) {
    Mat y = x;
    for (auto& r : y) {
      double ms = 0;
      for (double v : r)
        ms += v * v;
      const double inv = 1 / std::sqrt(ms / r.size() + c.rms_norm_eps);
      for (size_t i = 0; i < r.size(); ++i)
        r[i] *= inv * g[i];
    }
    return y;
  };
  auto rope = [&](Mat& x, int heads) {
    for (int t = 0; t < n; ++t)
      for (int hd = 0; hd < heads; ++hd)
        for (int i = 0; i < d / 2; ++i) {
          const double angle = t * std::pow(double{c.rope_theta}, -2.0 * i / d);
          double& a = x[t][hd * d + i];
          double& b = x[t][hd * d + i + d / 2];
          const double a0 = a, b0 = b;
          a = a0 * std::cos(angle) - b0 * std::sin(angle);
          b = b0 * std::cos(angle) + a0 * std::sin(angle);
        }
  };
  Mat x(n, std::vector<double>(h));
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < h; ++i)
      x[t][i] = w.embed[size_t(tokens[t]) * h + i];
  for (const LayerWeights& l : w.layers) {
    const Mat xn = norm(x, l.attn_norm);
    Mat q = linear(xn, l.wq, hq * d, h), k = linear(xn, l.wk, hkv * d, h),
        v = linear(xn, l.wv, hkv * d, h);
    rope(q, hq);
    rope(k, hkv);
    Mat attn(n, std::vector<double>(hq * d));
    for (int t = 0; t < n; ++t)
      for (int hd = 0; hd < hq; ++hd) {
        const int kvh = hd / (hq / hkv);
        std::vector<double> s(t + 1);
        double m = -1e300, sum = 0;
        for (int p = 0; p <= t; ++p) {
          for (int i = 0; i < d; ++i)
            s[p] += q[t][hd * d + i] * k[p][kvh * d + i];
          s[p] /= std::sqrt(double(d));
          m = std::max(m, s[p]);
        }
        for (int p = 0; p <= t; ++p) {
          const double e = std::exp(s[p] - m);
          sum += e;
          for (int i = 0; i < d; ++i)
            attn[t][hd * d + i] += e * v[p][kvh * d + i];
        }
        for (int i = 0; i < d; ++i)
          attn[t][hd * d + i] /= sum;
      }
    const Mat o = linear(attn, l.wo, h, hq * d);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < h; ++i)
        x[t][i] += o[t][i];
    const Mat gu = linear(norm(x, l.mlp_norm), l.w_gate_up, 2 * ff, h);
    Mat act(n, std::vector<double>(ff));
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < ff; ++i)
        act[t][i] = gu[t][i] / (1 + std::exp(-gu[t][i])) * gu[t][ff + i];
    const Mat down = linear(act, l.w_down, h, ff);
    for (int t = 0; t < n; ++t)
      for (int i = 0; i < h; ++i)
        x[t][i] += down[t][i];
  }
  const Mat last = norm({x.back()}, w.final_norm);
  return linear(last, w.output_embedding(), c.vocab_size, h)[0];
}

TEST(CpuBackend, PrefillMatchesDenseReference) {
  const std::vector<int32_t> prompt = random_tokens(21, 13);
  CpuBackend b = make_backend();
  const std::vector<float> got = prefill(b, prompt, {6, 1});
  const std::vector<double> want = reference_logits(tiny_weights(), prompt);
  EXPECT_LT(rel_l2(got, std::vector<float>(want.begin(), want.end())), 1e-5);
}

TEST(CpuBackend, ChunkedPrefillMatchesOneChunk) {
  const std::vector<int32_t> prompt = random_tokens(45, 1);
  CpuBackend one = make_backend(), chunked = make_backend();
  const std::vector<float> want = prefill(one, prompt, {9, 3, 14});
  const std::vector<float> got = prefill(chunked, prompt, {2, 20, 7}, {16, 13, 16});
  ASSERT_EQ(want.size(), 320u);
  EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float x) { return std::isfinite(x); }));
  EXPECT_LT(rel_l2(got, want), 1e-5);
  // The logits depend on the whole prompt, not only the last chunk.
  std::vector<int32_t> other = prompt;
  other[3] = (other[3] + 1) % 256;
  CpuBackend third = make_backend();
  EXPECT_GT(rel_l2(prefill(third, other, {9, 3, 14}), want), 1e-3);
}

TEST(CpuBackend, DecodeStepsMatchPrefill) {
  const std::vector<int32_t> prompt = random_tokens(45, 2);
  const std::vector<int32_t> table = {17, 4, 11, 0};  // 64 positions
  CpuBackend b = make_backend();
  expect_decode_matches_prefill(b, prefill(b, prompt, table), prompt, table, 5, 1e-4,
                                [] { return make_backend(); });
}

TEST(CpuBackend, CascadeOverSharedBlocksMatchesFlat) {
  // Two sequences whose first 32 tokens are one shared prompt in blocks {5, 8}.
  const std::vector<int32_t> shared = random_tokens(32, 3);
  const std::vector<int32_t> a = concat(shared, random_tokens(9, 4));
  const std::vector<int32_t> c = concat(shared, random_tokens(13, 5));
  const std::vector<int32_t> table_a = {5, 8, 12}, table_c = {5, 8, 3};
  CpuBackend b = make_backend();
  const int32_t token_a = argmax(prefill(b, a, table_a));
  ForwardBatch rest;  // the second sequence reuses the shared blocks' KV
  rest.prefill.add(chunk(c, 32, 45, table_c, true));
  std::vector<float> logits;
  EXPECT_TRUE(b.compute_logits(rest, logits).ok());
  const int32_t token_c = argmax(logits);

  ForwardBatch flat;
  add_decode(flat.decode, token_a, 41, table_a);
  add_decode(flat.decode, token_c, 45, table_c);
  ForwardBatch cascade;
  add_decode(cascade.decode, token_a, 41, table_a, /*shared_blocks=*/2);
  add_decode(cascade.decode, token_c, 45, table_c, /*shared_blocks=*/2);
  cascade.decode.plan.add_node({5, 8}, {0, 1});
  ASSERT_EQ(cascade.decode.plan.suffix_len, (std::vector<int32_t>{10, 14}));

  std::vector<float> by_cascade, by_flat;
  EXPECT_TRUE(b.compute_logits(cascade, by_cascade).ok());
  EXPECT_TRUE(b.compute_logits(flat, by_flat).ok());  // rewrites the same KV into the same slots
  ASSERT_EQ(by_cascade.size(), 2u * 320);
  EXPECT_LT(rel_l2(by_cascade, by_flat), 1e-5);

  // And both against each sequence alone, prefilled in one chunk.
  CpuBackend ref_a = make_backend(), ref_c = make_backend();
  EXPECT_LT(rel_l2(row(by_cascade, 0), prefill(ref_a, concat(a, {token_a}), {1, 2, 6})), 1e-4);
  EXPECT_LT(rel_l2(row(by_cascade, 1), prefill(ref_c, concat(c, {token_c}), {1, 2, 6})), 1e-4);
}

TEST(CpuBackend, BlockCopiesCarryKv) {
  // Prompt of 40 tokens: block 2 is partial (8 tokens). Two siblings fork from it: one keeps
  // block 2, the other gets a copy in block 13 made in the same step (copies come first).
  const std::vector<int32_t> prompt = random_tokens(40, 6);
  const std::vector<int32_t> table = {4, 9, 2}, copied = {4, 9, 13};
  const int32_t t = 'x', u = 'y';
  CpuBackend ref_t = make_backend(), ref_u = make_backend();
  prefill(ref_t, prompt, table);
  prefill(ref_u, prompt, table);
  const std::vector<float> want_t = decode_one(ref_t, t, 40, table);
  const std::vector<float> want_u = decode_one(ref_u, u, 40, table);
  ASSERT_GT(rel_l2(want_t, want_u), 1e-3);

  CpuBackend b = make_backend();
  prefill(b, prompt, table);
  ForwardBatch step;
  step.kv_moves = {KvTransfer{KvTransfer::Kind::kCopy, 13, 2}};
  add_decode(step.decode, t, 40, table);
  add_decode(step.decode, u, 40, copied);
  std::vector<float> logits;
  EXPECT_TRUE(b.compute_logits(step, logits).ok());
  EXPECT_LT(rel_l2(row(logits, 0), want_t), 1e-5);
  EXPECT_LT(rel_l2(row(logits, 1), want_u), 1e-5);

  // Without the copy block 13 holds no prompt KV: the sibling's logits differ.
  CpuBackend no_copy = make_backend();
  prefill(no_copy, prompt, table);
  EXPECT_GT(rel_l2(decode_one(no_copy, u, 40, copied), want_u), 1e-3);
}

// A KV move out of range (a scheduler's bug) was checked by asserts only: a Release build wrote
// outside the caches. Every build now refuses the step before any move is done, with the CUDA
// backend's error ("move_blocks: invalid argument"): the valid copy listed first is not made
// either, and nothing of the step runs. The valid moves alone still go (an offload and a load
// through the host tier make the copy).
TEST(CpuBackend, KvMovesOutOfRangeAreRefusedBeforeAnyIsDone) {
  const std::vector<int32_t> prompt = random_tokens(40, 6);
  const std::vector<int32_t> table = {4, 9, 2}, copied = {4, 9, 13};
  const int32_t u = 'y';
  CpuBackend ref = make_backend(), no_copy = make_backend();
  prefill(ref, prompt, table);
  prefill(no_copy, prompt, table);
  const std::vector<float> with_copy = decode_one(ref, u, 40, table);
  const std::vector<float> without_copy = decode_one(no_copy, u, 40, copied);
  ASSERT_GT(rel_l2(without_copy, with_copy), 1e-3);

  CpuBackend b = make_backend();
  b.set_host_blocks(2);
  prefill(b, prompt, table);
  using K = KvTransfer::Kind;
  const KvTransfer good{K::kCopy, 13, 2};
  const std::vector<KvTransfer> bad{{K::kCopy, kNumBlocks, 2},  {K::kCopy, -1, 2},
                                    {K::kCopy, 14, kNumBlocks}, {K::kCopy, 14, -1},
                                    {K::kOffload, 3, 2},        {K::kOffload, kNumBlocks, 0},
                                    {K::kLoad, 14, 2},          {K::kLoad, 14, -1},
                                    {K::kLoad, -1, 0},          {static_cast<K>(3), 14, 2}};
  for (const KvTransfer& t : bad) {
    ForwardBatch step;
    step.kv_moves = {good, t};
    add_decode(step.decode, u, 40, copied);
    std::vector<float> logits;
    const Status s = b.compute_logits(step, logits);
    const std::string what = "kind " + std::to_string(static_cast<int>(t.kind)) + ", block " +
                             std::to_string(t.block) + ", other " + std::to_string(t.other);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find("move_blocks: invalid argument (move 1 of 2: " + what),
              std::string::npos)
        << s.message();
  }
  // Block 13 still holds no prompt KV: the decode reads what the backend without the copy does.
  EXPECT_LT(rel_l2(decode_one(b, u, 40, copied), without_copy), 1e-6);
  ForwardBatch step;
  step.kv_moves = {{K::kOffload, 2, 1}, {K::kLoad, 13, 1}};
  add_decode(step.decode, u, 40, copied);
  std::vector<float> logits;
  ASSERT_TRUE(b.compute_logits(step, logits).ok());
  EXPECT_LT(rel_l2(logits, with_copy), 1e-5);
}

// A step the scheduler got wrong (a block past the cache, a token outside the vocabulary, a
// slot its suffix does not end in, a plan naming a sequence it lacks, a logits row never
// computed) was checked by asserts only: a Release build read or wrote outside its arrays. Every
// build refuses it, one case per refusal, before anything runs; the next valid step gives what a
// backend that never saw the bad ones gives (a smoke check: the bad prefills would rewrite the
// prompt's own KV).
TEST(CpuBackend, InconsistentBatchesAreRefusedBeforeAnythingRuns) {
  const std::vector<int32_t> prompt = random_tokens(40, 12);
  const std::vector<int32_t> table = {4, 9, 2};
  const int32_t u = 'q';
  CpuBackend ref = make_backend(), b = make_backend();
  prefill(ref, prompt, table);
  prefill(b, prompt, table);
  const std::vector<float> want = decode_one(ref, u, 40, table);

  const auto bad =
      testing::inconsistent_batches(prompt, table, u, b.config().vocab_size, kNumBlocks);
  ASSERT_EQ(bad.size(), 17u);
  for (const auto& [what, step] : bad) {
    std::vector<float> logits;
    const Status s = b.compute_logits(step, logits);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_NE(s.message().find("forward: invalid batch: "), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
  EXPECT_LT(rel_l2(decode_one(b, u, 40, table), want), 1e-6);
}

TEST(CpuBackend, MixedBatchRowsInDocumentedOrder) {
  const std::vector<int32_t> x = random_tokens(20, 7), y = random_tokens(30, 8),
                             z = random_tokens(25, 9), w = random_tokens(17, 10);
  const std::vector<int32_t> tx = {1, 2}, ty = {3, 4}, tz = {5, 6}, tw = {7, 8};
  CpuBackend b = make_backend();
  ForwardBatch first;  // z and w prefilled, both with logits
  first.prefill.add(chunk(z, 0, 25, tz, true));
  first.prefill.add(chunk(w, 0, 17, tw, true));
  std::vector<float> logits;
  EXPECT_TRUE(b.compute_logits(first, logits).ok());
  ASSERT_EQ(logits.size(), 2u * 320);
  const int32_t next_z = argmax(row(logits, 0)), next_w = argmax(row(logits, 1));

  // x whole (logits), y's first chunk (no logits), then z and w decode: rows x, z, w.
  ForwardBatch mixed;
  mixed.prefill.add(chunk(x, 0, 20, tx, true));
  mixed.prefill.add(chunk(y, 0, 16, ty, false));
  add_decode(mixed.decode, next_z, 25, tz);
  add_decode(mixed.decode, next_w, 17, tw);
  ASSERT_EQ(mixed.num_logit_rows(), 3);
  EXPECT_TRUE(b.compute_logits(mixed, logits).ok());
  ASSERT_EQ(logits.size(), 3u * 320);
  ForwardBatch last;  // y's second chunk
  last.prefill.add(chunk(y, 16, 30, ty, true));
  std::vector<float> logits_y;
  EXPECT_TRUE(b.compute_logits(last, logits_y).ok());

  auto alone = [](const std::vector<int32_t>& tokens) {
    CpuBackend r = make_backend();
    return prefill(r, tokens, {20, 21, 22});
  };
  EXPECT_LT(rel_l2(row(logits, 0), alone(x)), 1e-5);
  EXPECT_LT(rel_l2(row(logits, 1), alone(concat(z, {next_z}))), 1e-4);
  EXPECT_LT(rel_l2(row(logits, 2), alone(concat(w, {next_w}))), 1e-4);
  EXPECT_LT(rel_l2(logits_y, alone(y)), 1e-5);
}

TEST(CpuBackend, UntiedHeadIsUsed) {
  ModelConfig c = tiny_weights().config;
  c.tie_word_embeddings = false;
  const ModelWeights untied = random_weights(c, 11);
  ModelWeights as_tied = untied;
  as_tied.config.tie_word_embeddings = true;
  as_tied.lm_head.clear();
  ModelWeights head_is_embed = untied;
  head_is_embed.lm_head = head_is_embed.embed;

  const std::vector<int32_t> prompt = random_tokens(10, 12);
  CpuBackend b_untied = make_backend(untied), b_tied = make_backend(as_tied),
             b_same = make_backend(head_is_embed);
  const std::vector<float> tied = prefill(b_tied, prompt, {0});
  EXPECT_EQ(prefill(b_same, prompt, {0}), tied);
  EXPECT_GT(rel_l2(prefill(b_untied, prompt, {0}), tied), 0.1);
}

// Random weights must give a usable demo: finite logits, next tokens that depend on the prompt.
TEST(CpuBackend, RandomModelIsNotDegenerate) {
  CpuBackend b = make_backend();
  ForwardBatch batch;
  for (int s = 0; s < 12; ++s) {
    batch.prefill.add(chunk(random_tokens(8, 100 + s), 0, 8, {s}, true));
  }
  std::vector<float> logits;
  EXPECT_TRUE(b.compute_logits(batch, logits).ok());
  ASSERT_EQ(logits.size(), 12u * 320);
  EXPECT_TRUE(std::all_of(logits.begin(), logits.end(), [](float x) { return std::isfinite(x); }));
  std::set<int32_t> next;
  for (int s = 0; s < 12; ++s)
    next.insert(argmax(row(logits, s)));
  EXPECT_GE(next.size(), 4u);
  // Greedy decoding does not lock onto one token at once.
  std::vector<int32_t> table = {12, 13, 14};
  std::vector<float> l = prefill(b, random_tokens(8, 200), table);
  std::set<int32_t> generated;
  for (int pos = 8; pos < 24; ++pos) {
    const int32_t t = argmax(l);
    generated.insert(t);
    l = decode_one(b, t, pos, table);
  }
  EXPECT_GE(generated.size(), 3u);
}

// FP8 weights (--quantization fp8): the model computes with the E4M3 values of its layer matrices
// (per output channel) and of every GEMM input row (per token). The logits stay close to the
// float32 model's (the cost of the quantization on this random model: a few percent), differ
// from them (the quantization happens), and decode steps still match prefilling the same tokens
// (a row's quantization depends on that row alone, not on the batch).
TEST(CpuBackend, Fp8WeightsStayCloseToFloat32AndDecodeMatchesPrefill) {
  const std::vector<int32_t> prompt = random_tokens(45, 2);
  const std::vector<int32_t> table = {17, 4, 11, 0};
  CpuBackend f32 = make_backend();
  CpuBackend fp8(tiny_weights(), kNumBlocks, kBlock, /*fp8_weights=*/true);
  EXPECT_EQ(fp8.quantization(), "fp8");
  EXPECT_EQ(f32.quantization(), "");
  const std::vector<float> want = prefill(f32, prompt, table);
  std::vector<float> logits = prefill(fp8, prompt, table);
  const double cost = rel_l2(logits, want);
  EXPECT_GT(cost, 1e-3);
  EXPECT_LT(cost, 0.25);  // ~3.5% per GEMM (two operands rounded to 3-bit mantissas), 16 GEMMs
  expect_decode_matches_prefill(fp8, logits, prompt, table, 5, 5e-3, [] {
    return CpuBackend(tiny_weights(), kNumBlocks, kBlock, /*fp8_weights=*/true);
  });
}

// --kv-cache-dtype fp8 on the CPU (the CUDA FP8 KV cache's twin): every key and value the cache
// holds is an E4M3 value of its layer's scale, prefill and decode read the same values (a decode
// step equals a prefill of the whole sequence), cascade equals flat, and the logits stay close to
// the float32 cache's.
TEST(CpuBackend, Fp8KvCacheHoldsE4m3ValuesAndEveryPathReadsThem) {
  const std::vector<int32_t> prompt = random_tokens(45, 2);
  const std::vector<int32_t> table = {17, 4, 11, 0};
  CpuBackend f32 = make_backend();
  CpuBackend fp8(tiny_weights(), kNumBlocks, kBlock, /*fp8_weights=*/false, /*fp8_kv=*/true);
  EXPECT_EQ(fp8.kv_cache_dtype(), "fp8");
  EXPECT_EQ(f32.kv_cache_dtype(), "");
  const std::vector<float> want = prefill(f32, prompt, table);
  std::vector<float> logits = prefill(fp8, prompt, table);
  const double cost = rel_l2(logits, want);
  EXPECT_GT(cost, 1e-4);
  EXPECT_LT(cost, 0.1);
  expect_decode_matches_prefill(fp8, logits, prompt, table, 4, 1e-5, [] {
    return CpuBackend(tiny_weights(), kNumBlocks, kBlock, /*fp8_weights=*/false, /*fp8_kv=*/true);
  });

  // A checkpoint's KV-cache scales (ModelWeights::kv_scales) scale the codes: the cache holds
  // e4m3(x / scale) x scale, and a scale that fits the values better costs less than 1.0.
  ModelWeights scaled = tiny_weights();
  const int layers = scaled.config.num_hidden_layers;
  scaled.kv_scales.k.assign(layers, 1.0f / 64);
  scaled.kv_scales.v.assign(layers, 1.0f / 32);
  CpuBackend fine(scaled, kNumBlocks, kBlock, false, true);
  EXPECT_EQ(fine.k_scale(layers - 1), 1.0f / 64);
  EXPECT_EQ(fine.v_scale(0), 1.0f / 32);
  EXPECT_LT(rel_l2(prefill(fine, prompt, table), want), cost);

  // Cascade over shared blocks equals flat under the FP8 cache.
  const std::vector<int32_t> shared = random_tokens(32, 3);
  const std::vector<int32_t> a = concat(shared, random_tokens(9, 4));
  const std::vector<int32_t> c = concat(shared, random_tokens(13, 5));
  const std::vector<int32_t> table_a = {5, 8, 12}, table_c = {5, 8, 3};
  CpuBackend b(tiny_weights(), kNumBlocks, kBlock, false, true);
  const int32_t token_a = argmax(prefill(b, a, table_a));
  ForwardBatch rest;
  rest.prefill.add(chunk(c, 32, 45, table_c, true));
  std::vector<float> rest_logits;
  ASSERT_TRUE(b.compute_logits(rest, rest_logits).ok());
  const int32_t token_c = argmax(rest_logits);
  ForwardBatch flat, cascade;
  add_decode(flat.decode, token_a, 41, table_a);
  add_decode(flat.decode, token_c, 45, table_c);
  add_decode(cascade.decode, token_a, 41, table_a, /*shared_blocks=*/2);
  add_decode(cascade.decode, token_c, 45, table_c, /*shared_blocks=*/2);
  cascade.decode.plan.add_node({5, 8}, {0, 1});
  std::vector<float> by_cascade, by_flat;
  ASSERT_TRUE(b.compute_logits(cascade, by_cascade).ok());
  ASSERT_TRUE(b.compute_logits(flat, by_flat).ok());
  EXPECT_LT(rel_l2(by_cascade, by_flat), 1e-5);
}

}  // namespace
}  // namespace kvc
