// CUDA chunked causal prefill (kernels/cuda/prefill_attention.h) against its CPU twin
// cpu::paged_prefill, run in float32 on the same half-precision inputs converted back to float.
// The LSE is checked against cpu::paged_decode of sampled query tokens (a prefill row is a decode
// query over positions [0, its position]). Outputs are poisoned (NaN) first; every case draws
// fresh random inputs; block tables come from a shuffled pool and chunks of prefix-cached prompts
// share their leading blocks.
#include "kernels/cuda/prefill_attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "kernels/cpu/attention.h"
#include "kernels/cpu/fp8.h"
#include "kernels/cuda/device.h"
#include "kernels/fp8_rule.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::KvDtype;
using testutil::PagedKv;

constexpr KvDtype kDtypes[] = {KvDtype::kF16, KvDtype::kBF16};

double tolerance(KvDtype dt) {
  return dt == KvDtype::kF16 ? 1e-3 : 1e-2;
}
const char* name(KvDtype dt) {
  return dt == KvDtype::kF16 ? "fp16" : "bf16";
}

// The dtype conversions of attention_test.cc (round to nearest even).
uint16_t to_bits(float x, KvDtype dt) {
  if (dt == KvDtype::kF16) return std::bit_cast<uint16_t>(static_cast<_Float16>(x));
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
float from_bits(uint16_t b, KvDtype dt) {
  if (dt == KvDtype::kF16) return static_cast<float>(std::bit_cast<_Float16>(b));
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
std::vector<uint16_t> to_bits(const std::vector<float>& v, KvDtype dt) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    bits[i] = to_bits(v[i], dt);
  return bits;
}

template <typename T>
cuda::DeviceBuffer upload(const std::vector<T>& v) {
  cuda::DeviceBuffer b(std::max<size_t>(v.size() * sizeof(T), 16));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(T));
  return b;
}

// One chunk of a batch: query tokens at positions [start, start + len) of their own sequence,
// whose first `shared` blocks are the first blocks of chunk 0's sequence (a prefix-cached prompt).
struct Chunk {
  int start, len, shared = 0;
};

struct Result {
  std::vector<float> out;  // [tokens, num_q_heads, head_dim]
  std::vector<float> lse;  // [tokens, num_q_heads]
};

// A random batch of chunks: the cache and q rounded to the dtype on the host (the twin's inputs),
// their bits on the device.
class Batch {
 public:
  // `key_scale(p)`, when given, multiplies the keys of position p of chunk 0's sequence.
  // quant.fp8: the cache holds E4M3 codes (the twin their values times the scales).
  Batch(const AttentionShape& sh, KvDtype dt, const std::vector<Chunk>& chunks, std::mt19937& rng,
        float (*key_scale)(int) = nullptr, const cuda::KvQuant& quant = {})
      : shape_(sh),
        dtype_(dt),
        quant_(quant),
        chunks_(chunks),
        kv_(sh, num_blocks(sh, chunks), rng) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int blocks = (chunks[c].start + chunks[c].len + sh.block_size - 1) / sh.block_size;
      std::vector<int32_t> table;
      for (int b = 0; b < blocks; ++b) {
        const bool shared = c > 0 && b < chunks[c].shared;
        if (shared) {
          EXPECT_LT(b, static_cast<int>(tables_[0].size())) << "bad test: shared block";
        }
        table.push_back(shared && b < static_cast<int>(tables_[0].size()) ? tables_[0][b]
                                                                          : kv_.take_block());
      }
      tables_.push_back(table);
      q_indptr_.push_back(q_indptr_.back() + chunks[c].len);
      block_indptr_.push_back(block_indptr_.back() + blocks);
      block_indices_.insert(block_indices_.end(), table.begin(), table.end());
      start_pos_.push_back(chunks[c].start);
    }
    if (key_scale != nullptr) {
      const int len = chunks[0].start + chunks[0].len;
      for (int p = 0; p < len; ++p)
        for (int h = 0; h < sh.num_kv_heads; ++h) {
          float* k = const_cast<float*>(kv_.k_at(tables_[0], p, h));
          for (int i = 0; i < sh.head_dim; ++i)
            k[i] *= key_scale(p);
        }
    }
    // The twin sees exactly the device's values: round the cache (PagedKv's storage behind
    // k() / v() is not const) and q to the dtype in place.
    const size_t elems = cache_elements();
    for (float* p : {const_cast<float*>(kv_.k()), const_cast<float*>(kv_.v())}) {
      if (quant.fp8) {
        cpu::fake_quantize_scaled_fp8(p, static_cast<int64_t>(elems),
                                      p == kv_.k() ? quant.k_scale : quant.v_scale);
        continue;
      }
      for (size_t i = 0; i < elems; ++i)
        p[i] = from_bits(to_bits(p[i], dt), dt);
    }
    q_ = testutil::random_queries(rng, sh, num_tokens());
    for (float& x : q_)
      x = from_bits(to_bits(x, dt), dt);
  }

  int num_tokens() const { return q_indptr_.back(); }
  int num_chunks() const { return static_cast<int>(chunks_.size()); }

  // The batch on the device: inputs, the uploaded plan and poisoned outputs.
  struct OnDevice {
    cuda::DeviceBuffer k, v, q, q_indptr, block_indptr, block_indices, start_pos, ws, out, lse;
    cuda::PrefillPlan plan;  // uploaded into ws
  };
  OnDevice to_device() const {
    OnDevice d;
    if (quant_.fp8) {  // E4M3 values already: quantizing again gives their codes
      auto codes = [&](const float* x, float scale) {
        std::vector<uint8_t> c(cache_elements());
        for (size_t i = 0; i < c.size(); ++i)
          c[i] = fp8::e4m3_from_float(x[i] * (1.0f / scale));
        return c;
      };
      d.k = upload(codes(kv_.k(), quant_.k_scale));
      d.v = upload(codes(kv_.v(), quant_.v_scale));
    } else {
      d.k = upload(to_bits(std::vector<float>(kv_.k(), kv_.k() + cache_elements()), dtype_));
      d.v = upload(to_bits(std::vector<float>(kv_.v(), kv_.v() + cache_elements()), dtype_));
    }
    d.q = upload(to_bits(q_, dtype_));
    d.q_indptr = upload(q_indptr_);
    d.block_indptr = upload(block_indptr_);
    d.block_indices = upload(block_indices_);
    d.start_pos = upload(start_pos_);
    d.plan = cuda::make_prefill_plan(shape_, q_indptr_.data(), start_pos_.data(), num_chunks());
    EXPECT_EQ(d.plan.num_tokens, num_tokens());
    d.ws = cuda::DeviceBuffer(std::max<size_t>(cuda::prefill_workspace_bytes(d.plan), 16));
    EXPECT_EQ(cuda::upload_prefill_plan(d.plan, d.ws.data(), d.ws.bytes()), cudaSuccess);
    cuda::synchronize_or_die("upload_prefill_plan");
    d.out = cuda::DeviceBuffer(std::max<size_t>(rows() * shape_.head_dim * 2, 16));
    d.lse = cuda::DeviceBuffer(std::max<size_t>(rows() * 4, 16));
    poison(d);
    return d;
  }
  static void poison(OnDevice& d) {
    d.out.fill_bytes(0xFF);  // NaN in fp16, bf16 and fp32
    d.lse.fill_bytes(0xFF);
  }
  cudaError_t launch(const OnDevice& d, bool with_lse, cudaStream_t stream = nullptr) const {
    return cuda::paged_prefill(
        shape_, dtype_, d.plan, d.q.data(), d.k.data(), d.v.data(), d.q_indptr.as<int32_t>(),
        d.block_indptr.as<int32_t>(), d.block_indices.as<int32_t>(), d.start_pos.as<int32_t>(),
        d.out.data(), with_lse ? d.lse.as<float>() : nullptr, stream, quant_);
  }
  // The outputs as floats; lse only `with_lse`.
  Result fetch(const OnDevice& d, bool with_lse) const {
    Result r;
    std::vector<uint16_t> bits(rows() * shape_.head_dim);
    if (!bits.empty()) d.out.download(bits.data(), bits.size() * 2);
    r.out.resize(bits.size());
    for (size_t i = 0; i < bits.size(); ++i)
      r.out[i] = from_bits(bits[i], dtype_);
    if (with_lse) {
      r.lse.resize(rows());
      if (!r.lse.empty()) d.lse.download(r.lse.data(), r.lse.size() * 4);
    }
    return r;
  }

  // Launches `launches` times on one upload (outputs poisoned before each) and returns the last.
  // Without `with_lse` the launch gets lse = null and the returned lse is empty.
  Result run_device(bool with_lse = true, int launches = 1) const {
    OnDevice d = to_device();
    for (int i = 0; i < launches; ++i) {
      poison(d);
      EXPECT_EQ(launch(d, with_lse), cudaSuccess);
      cuda::synchronize_or_die("paged_prefill");
    }
    return fetch(d, with_lse);
  }

  // The twin's output of every chunk, poisoned first.
  std::vector<float> twin_out() const {
    const size_t row = static_cast<size_t>(shape_.num_q_heads) * shape_.head_dim;
    std::vector<float> out(num_tokens() * row, testutil::kNaN);
    for (int c = 0; c < num_chunks(); ++c) {
      cpu::paged_prefill(shape_, q_.data() + q_indptr_[c] * row, kv_.k(), kv_.v(),
                         tables_[c].data(), chunks_[c].start, chunks_[c].len,
                         out.data() + q_indptr_[c] * row);
    }
    return out;
  }

  // Tokens whose LSE is checked: at most ~48 per chunk, always the first and the last.
  std::vector<int> lse_tokens() const {
    std::vector<int> tokens;
    for (int c = 0; c < num_chunks(); ++c) {
      const int n = chunks_[c].len, step = std::max(1, n / 48);
      for (int i = 0; i < n; i += step)
        tokens.push_back(q_indptr_[c] + i);
      if (n > 0 && (n - 1) % step != 0) tokens.push_back(q_indptr_[c] + n - 1);
    }
    return tokens;
  }

  // LSE of lse_tokens() from the decode twin: [tokens.size(), num_q_heads].
  std::vector<float> twin_lse(const std::vector<int>& tokens) const {
    const size_t row = static_cast<size_t>(shape_.num_q_heads) * shape_.head_dim;
    std::vector<float> q;
    std::vector<int32_t> indptr{0}, indices, lens;
    for (int t : tokens) {
      const int c = static_cast<int>(std::upper_bound(q_indptr_.begin(), q_indptr_.end(), t) -
                                     q_indptr_.begin()) -
                    1;
      q.insert(q.end(), q_.begin() + t * row, q_.begin() + (t + 1) * row);
      indices.insert(indices.end(), tables_[c].begin(), tables_[c].end());
      indptr.push_back(static_cast<int32_t>(indices.size()));
      lens.push_back(chunks_[c].start + (t - q_indptr_[c]) + 1);
    }
    const int n = static_cast<int>(tokens.size());
    std::vector<float> out(n * row), lse(static_cast<size_t>(n) * shape_.num_q_heads);
    cpu::paged_decode(shape_, q.data(), kv_.k(), kv_.v(), indptr.data(), indices.data(),
                      lens.data(), n, out.data(), lse.data());
    return lse;
  }

  // Device vs twin: no NaN anywhere (every row written), outputs within tol (relative L2), the
  // sampled LSEs within tol / 10.
  void expect_matches_twin(const std::string& what) const {
    const Result got = run_device();
    const std::vector<float> want = twin_out();
    expect_out_close(got.out, want, what);
    const std::vector<int> tokens = lse_tokens();
    const std::vector<float> want_lse = twin_lse(tokens);
    std::vector<float> got_lse;
    for (int t : tokens)
      for (int h = 0; h < shape_.num_q_heads; ++h) {
        const float x = got.lse[static_cast<size_t>(t) * shape_.num_q_heads + h];
        ASSERT_TRUE(std::isfinite(x)) << what << " lse of token " << t << " head " << h;
        got_lse.push_back(x);
      }
    for (float x : got.lse)
      ASSERT_FALSE(std::isnan(x)) << what << " (an lse row not written)";
    EXPECT_LT(testutil::rel_l2(got_lse, want_lse), tolerance(dtype_) * 0.1) << what << " (lse)";
  }

  void expect_out_close(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what) const {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_FALSE(std::isnan(got[i])) << what << " out index " << i;
    EXPECT_LT(testutil::rel_l2(got, want), tolerance(dtype_)) << what;
  }

 private:
  static int num_blocks(const AttentionShape& sh, const std::vector<Chunk>& chunks) {
    int n = 4;
    for (const Chunk& c : chunks)
      n += (c.start + c.len + sh.block_size - 1) / sh.block_size;
    return n;
  }
  size_t rows() const { return static_cast<size_t>(num_tokens()) * shape_.num_q_heads; }
  size_t cache_elements() const {
    return static_cast<size_t>(num_blocks(shape_, chunks_)) * shape_.block_size *
           shape_.num_kv_heads * shape_.head_dim;
  }

  AttentionShape shape_;
  KvDtype dtype_;
  cuda::KvQuant quant_;
  std::vector<Chunk> chunks_;
  PagedKv kv_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int32_t> q_indptr_{0}, block_indptr_{0}, block_indices_, start_pos_;
  std::vector<float> q_;
};

std::string label(KvDtype dt, const AttentionShape& sh, const std::string& what) {
  return what + " " + name(dt) + " d=" + std::to_string(sh.head_dim) +
         " group=" + std::to_string(sh.group()) + " kv_heads=" + std::to_string(sh.num_kv_heads) +
         " bs=" + std::to_string(sh.block_size);
}

class CudaPrefillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
  std::mt19937 rng_{20261201};
};

// Every dtype, head dim, group and block size, one launch of chunks of lengths 0, 1, 7, 64, 65
// and 300 starting at 0, block-aligned and unaligned positions; chunks 1, 2 and 4 continue
// prefix-cached prompts that share chunk 0's leading blocks.
TEST_F(CudaPrefillTest, SweepMatchesCpuTwin) {
  for (KvDtype dt : kDtypes) {
    for (int d : {64, 128}) {
      for (int group : {1, 4, 8}) {
        for (int bs : {1, 8, 16, 32}) {
          const AttentionShape sh = testutil::make_shape(d, group, 2, bs);
          const std::vector<Chunk> chunks = {
              {0, 65},              // from position 0
              {0, 1, 1},            // one token
              {3 * bs, 7, 3},       // block-aligned start
              {5 * bs + 3, 64},     // unaligned start (aligned at bs 1)
              {100, 300, 64 / bs},  // long, unaligned at bs 8 / 16 / 32
              {37, 1},              // one token deep in its sequence
              {0, 0},               // empty
              {2 * bs + 64, 64},    // aligned, past the first tile
          };
          Batch(sh, dt, chunks, rng_).expect_matches_twin(label(dt, sh, "sweep"));
        }
      }
    }
  }
}

// An FP8 cache (KvQuant, scales other than 1): codes staged and widened to fp16, against the twin
// over the codes' values times the scales; the sweep's chunks (prefix-cached prompts, aligned and
// unaligned starts) at block sizes that do and do not hold a thread's rows in one block, and a
// long context.
TEST_F(CudaPrefillTest, Fp8CacheMatchesCpuTwin) {
  const cuda::KvQuant fp8{true, 0.37f, 1.9f};
  const KvDtype dt = KvDtype::kBF16;
  for (int d : {64, 128}) {
    for (int group : {1, 4}) {
      for (int bs : {1, 16}) {
        const AttentionShape sh = testutil::make_shape(d, group, 2, bs);
        const std::vector<Chunk> chunks = {
            {0, 65}, {0, 1, 1}, {3 * bs, 7, 3}, {5 * bs + 3, 64}, {100, 300, 64 / bs}, {0, 0},
        };
        Batch(sh, dt, chunks, rng_, nullptr, fp8).expect_matches_twin(label(dt, sh, "fp8 sweep"));
      }
    }
  }
  const AttentionShape sh = testutil::make_shape(128, 4, 8, 16);
  Batch(sh, dt, {{0, 1000}, {3000, 1}, {517, 1000, 32}}, rng_, nullptr, fp8)
      .expect_matches_twin(label(dt, sh, "fp8 long context"));
  const Batch b(sh, KvDtype::kF16, {{0, 8}}, rng_, nullptr, fp8);
  const Batch::OnDevice d = b.to_device();
  EXPECT_EQ(b.launch(d, false), cudaErrorInvalidValue) << "an FP8 cache serves bf16 queries";
}

// Chunks of 1000 tokens, from position 0 and from an unaligned position of a prompt that shares
// 32 blocks with the first.
TEST_F(CudaPrefillTest, LongChunksMatchCpuTwin) {
  for (KvDtype dt : kDtypes) {
    for (int d : {64, 128}) {
      for (int group : {1, 4, 8}) {
        const AttentionShape sh = testutil::make_shape(d, group, 2, 16);
        Batch(sh, dt, {{0, 1000}, {517, 1000, 32}}, rng_)
            .expect_matches_twin(label(dt, sh, "1000-token chunks"));
      }
    }
  }
}

// Thousands of tokens over a 4K context (Llama-3-8B's GQA group and head dim), beside a one-token
// chunk at the end of a long context and a short chunk deep in one.
TEST_F(CudaPrefillTest, ThousandsOfTokensOverALongContext) {
  for (KvDtype dt : kDtypes) {
    const AttentionShape sh = testutil::make_shape(128, 4, 2, 16);
    Batch(sh, dt, {{1100, 3000}, {4095, 1, 200}, {3001, 64, 150}}, rng_)
        .expect_matches_twin(label(dt, sh, "3000 tokens at 1100"));
  }
}

// A mixed batch of 40 short chunks (1 to 24 tokens at random positions, half of them continuing
// prompts that share chunk 0's blocks) in one launch.
TEST_F(CudaPrefillTest, ManySmallChunksInOneLaunch) {
  for (KvDtype dt : kDtypes) {
    for (int bs : {8, 16}) {
      for (auto [d, group] : {std::pair{128, 4}, std::pair{64, 8}}) {
        const AttentionShape sh = testutil::make_shape(d, group, 2, bs);
        std::uniform_int_distribution<int> len(1, 24), start(0, 400);
        std::vector<Chunk> chunks = {{0, 420}};
        for (int c = 1; c < 40; ++c) {
          const int s = start(rng_);
          chunks.push_back({s, len(rng_), c % 2 == 0 ? s / bs : 0});
        }
        Batch(sh, dt, chunks, rng_).expect_matches_twin(label(dt, sh, "40 small chunks"));
      }
    }
  }
}

// Groups that do not divide the 64-row tile (a token's heads straddle two tiles) or fill several
// warps, and block sizes that are not multiples of a thread's 4 or 8 copied tokens.
TEST_F(CudaPrefillTest, OddGroupsAndBlockSizes) {
  for (KvDtype dt : kDtypes) {
    for (int d : {64, 128}) {
      for (int group : {3, 5, 16}) {
        for (int bs : {3, 16}) {
          const AttentionShape sh = testutil::make_shape(d, group, 2, bs);
          Batch(sh, dt, {{0, 77}, {50, 1, 16 / bs}, {131, 150, 30 / bs}}, rng_)
              .expect_matches_twin(label(dt, sh, "odd group / block size"));
        }
      }
    }
  }
}

// Keys that grow along chunk 0's sequence (position p scaled by 1 + p / 64): each row's maximum
// score rises tile after tile, far past the lazy rescaling threshold, so the softmax reference
// moves many times mid-row. Chunk 1 continues a prompt that shares its 43 full blocks. One KV head
// (every CTA on head 0) and 8 (Llama's).
TEST_F(CudaPrefillTest, RisingScoresMoveTheSoftmaxReference) {
  for (KvDtype dt : kDtypes) {
    for (int kv_heads : {1, 8}) {
      const AttentionShape sh = testutil::make_shape(128, 4, kv_heads, 16);
      Batch(sh, dt, {{0, 700}, {700, 300, 43}}, rng_, [](int p) {
        return 1.f + static_cast<float>(p) / 64.f;
      }).expect_matches_twin(label(dt, sh, "rising scores"));
    }
  }
}

// The same uploaded plan launched three times gives the same bits (no state left behind, no
// order-dependent reduction); without an lse pointer the outputs are the same.
TEST_F(CudaPrefillTest, DeterministicAndLseOptional) {
  for (KvDtype dt : kDtypes) {
    const AttentionShape sh = testutil::make_shape(128, 8, 2, 16);
    const Batch batch(sh, dt, {{0, 200}, {333, 129, 12}, {17, 1}}, rng_);
    const Result once = batch.run_device();
    const Result thrice = batch.run_device(true, 3);
    EXPECT_EQ(once.out, thrice.out) << label(dt, sh, "deterministic");
    EXPECT_EQ(once.lse, thrice.lse) << label(dt, sh, "deterministic");
    EXPECT_EQ(batch.run_device(false).out, once.out) << label(dt, sh, "lse null");
  }
}

// The launch captured in a CUDA graph (it allocates and synchronises nothing) and replayed gives
// the bits of a direct launch.
TEST_F(CudaPrefillTest, CapturedInAGraph) {
  const AttentionShape sh = testutil::make_shape(128, 4, 2, 16);
  const Batch batch(sh, KvDtype::kBF16, {{0, 300}, {77, 40, 4}, {500, 1}}, rng_);
  Batch::OnDevice d = batch.to_device();
  ASSERT_EQ(batch.launch(d, true), cudaSuccess);
  cuda::synchronize_or_die("paged_prefill");
  const Result direct = batch.fetch(d, true);

  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const cudaError_t launched = batch.launch(d, true, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(launched, cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    Batch::poison(d);
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    const Result replayed = batch.fetch(d, true);
    EXPECT_EQ(replayed.out, direct.out) << "replay " << replay;
    EXPECT_EQ(replayed.lse, direct.lse) << "replay " << replay;
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  batch.expect_matches_twin("graph batch");
}

// A batch whose chunks are all empty launches nothing and succeeds.
TEST_F(CudaPrefillTest, EmptyBatch) {
  const AttentionShape sh = testutil::make_shape(128, 4, 2, 16);
  const std::vector<int32_t> q_indptr{0, 0, 0}, start_pos{5, 0};
  cuda::PrefillPlan plan = cuda::make_prefill_plan(sh, q_indptr.data(), start_pos.data(), 2);
  EXPECT_EQ(plan.num_items, 0);
  EXPECT_EQ(cuda::upload_prefill_plan(plan, nullptr, 0), cudaSuccess);
  EXPECT_EQ(cuda::paged_prefill(sh, KvDtype::kBF16, plan, nullptr, nullptr, nullptr, nullptr,
                                nullptr, nullptr, nullptr, nullptr, nullptr),
            cudaSuccess);
  // Unsupported head dim.
  const AttentionShape bad = testutil::make_shape(96, 4, 2, 16);
  EXPECT_EQ(cuda::paged_prefill(bad, KvDtype::kBF16, plan, nullptr, nullptr, nullptr, nullptr,
                                nullptr, nullptr, nullptr, nullptr, nullptr),
            cudaErrorInvalidValue);
}

// The plan (host only): one item per (chunk, KV head, 64-row tile), longest KV range first.
TEST(CudaPrefillPlanTest, ItemsCoverTheBatchLongestFirst) {
  const AttentionShape sh = testutil::make_shape(128, 4, 2, 16);  // 8 q heads
  // Chunk 0: 100 tokens at 0 (400 rows: 7 tiles); chunk 1: 1 token at 5000; chunk 2: empty;
  // chunk 3: 20 tokens at 64 (80 rows: 2 tiles).
  const std::vector<int32_t> q_indptr{0, 100, 101, 101, 121}, start_pos{0, 5000, 7, 64};
  const cuda::PrefillPlan plan = cuda::make_prefill_plan(sh, q_indptr.data(), start_pos.data(), 4);
  EXPECT_EQ(plan.num_chunks, 4);
  EXPECT_EQ(plan.num_tokens, 121);
  ASSERT_EQ(plan.num_items, (7 + 1 + 0 + 2) * 2);
  ASSERT_EQ(plan.host.size(), static_cast<size_t>(plan.num_items) * 4);
  std::vector<int> seen(4 * 8 * 2, 0);  // (chunk, tile, head)
  int64_t tiles = 0;
  for (int i = 0; i < plan.num_items; ++i) {
    const int32_t* it = plan.host.data() + 4 * i;
    const int chunk = it[0], head = it[1], tile = it[2], kv_tiles = it[3];
    ASSERT_TRUE(chunk >= 0 && chunk < 4 && head >= 0 && head < 2 && tile >= 0 && tile < 8);
    ++seen[(chunk * 8 + tile) * 2 + head];
    // The tile's last row is token min(rows, 64 (tile + 1)) / 4 - 1 at start_pos + that.
    const int rows = (q_indptr[chunk + 1] - q_indptr[chunk]) * 4;
    const int kv_end = start_pos[chunk] + (std::min(rows, 64 * (tile + 1)) - 1) / 4 + 1;
    EXPECT_EQ(kv_tiles, (kv_end + 63) / 64);
    if (i > 0) {
      EXPECT_LE(kv_tiles, plan.host[4 * (i - 1) + 3]) << "item " << i;
    }
    tiles += kv_tiles;
  }
  EXPECT_EQ(tiles, plan.num_kv_tiles);
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int row_tiles = ((q_indptr[chunk + 1] - q_indptr[chunk]) * 4 + 63) / 64;
    for (int tile = 0; tile < 8; ++tile)
      for (int head = 0; head < 2; ++head)
        EXPECT_EQ(seen[(chunk * 8 + tile) * 2 + head], tile < row_tiles ? 1 : 0);
  }
  // The one-token chunk deep in its sequence comes first.
  EXPECT_EQ(plan.host[0], 1);
  EXPECT_EQ(cuda::prefill_workspace_bytes(plan), plan.host.size() * sizeof(int32_t));
}

}  // namespace
}  // namespace kvc::kernels
