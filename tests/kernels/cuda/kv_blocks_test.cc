// The KV cache's block moves (kernels/cuda/kv_blocks.cu) against their CPU twins
// (kernels/cpu/ops.h): copy-on-write copies without a host tier, and the host tier's ordered
// moves with copies among them, bit-exact, bf16 and FP8 caches.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/ops.h"
#include "tests/kernels/cuda/device_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace kvc::kernels {
namespace {

using cuda::DeviceBuffer;
using cuda::KvDtype;
using testutil::download;
using testutil::to_bits;
using testutil::to_floats;
using testutil::upload;

class CudaKvBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::device_available()) GTEST_SKIP() << cuda::device_description();
  }
  std::mt19937 rng_{20261201};
};

// Copy-on-write copies without a host tier (as a replica without --kv-host-memory-gb moves).
TEST_F(CudaKvBlocksTest, CopiesWithoutAHostTierAreExact) {
  struct Case {
    int layers, block_size, kv_heads, head_dim;
  };
  // The last case has 18-element blocks (not a multiple of 8: the 2-byte path).
  const Case cases[] = {
      {1, 16, 2, 64}, {4, 8, 8, 128}, {4, 32, 2, 128}, {3, 16, 8, 64}, {2, 3, 1, 6}};
  for (const Case& c : cases) {
    for (int num_pairs : {1, 5, 11}) {
      const std::string what = "layers " + std::to_string(c.layers) + " bs " +
                               std::to_string(c.block_size) + " pairs " + std::to_string(num_pairs);
      const cuda::KvCacheLayout layout{c.layers,   24,         c.block_size,
                                       c.kv_heads, c.head_dim, KvDtype::kBF16};
      // Sources and destinations from disjoint halves of a shuffled pool; one pair is src == dst.
      std::vector<int32_t> pool(layout.num_blocks);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng_);
      std::vector<int32_t> moves;  // (2, dst, src)
      for (int p = 0; p < num_pairs; ++p) {
        moves.push_back(2);
        moves.push_back(p == num_pairs - 1 ? pool[p] : pool[12 + p]);
        moves.push_back(pool[p]);
      }
      const size_t n = layout.bytes() / 2;
      std::vector<uint16_t> bits(n);
      for (uint16_t& b : bits)
        b = static_cast<uint16_t>(rng_());
      DeviceBuffer d_caches = upload(bits), d_moves = upload(moves);
      ASSERT_EQ(cuda::move_blocks(d_caches.data(), layout, nullptr, cuda::KvCacheLayout{},
                                  d_moves.as<int32_t>(), moves.data(), num_pairs),
                cudaSuccess);
      cuda::synchronize_or_die("move_blocks without a tier");
      // The twin copies floats whose upper halves are the bits (memmove: NaN payloads survive).
      std::vector<float> f = to_floats(bits);
      ASSERT_TRUE(cpu::move_blocks(f.data(), layout.num_blocks, nullptr, 0, c.layers,
                                   layout.block_elements(), moves.data(), num_pairs));
      EXPECT_EQ(download<uint16_t>(d_caches, n), to_bits(f)) << what;
      if (num_pairs == 1) {  // an offload or a load without a tier is refused, nothing moved
        for (int32_t kind : {0, 1}) {
          const std::vector<int32_t> tier_move{kind, pool[0], 0};
          DeviceBuffer d_tier_move = upload(tier_move);
          EXPECT_EQ(cuda::move_blocks(d_caches.data(), layout, nullptr, cuda::KvCacheLayout{},
                                      d_tier_move.as<int32_t>(), tier_move.data(), 1),
                    cudaErrorInvalidValue)
              << what << " kind " << kind;
        }
        EXPECT_EQ(download<uint16_t>(d_caches, n), to_bits(f)) << what;
      }
    }
  }
}

// Random copies without a host tier over a few blocks, so that many read a block an earlier one
// wrote (chains) or share a source (forks): in order, as the CPU twin.
TEST_F(CudaKvBlocksTest, RandomCopiesWithoutAHostTierMatchTheCpuTwin) {
  for (int n : {1, 7, 40, 300}) {
    const cuda::KvCacheLayout layout{3, 9, 16, 2, 64, KvDtype::kBF16};
    std::vector<int32_t> moves;
    for (int i = 0; i < n; ++i) {
      moves.push_back(2);
      moves.push_back(static_cast<int32_t>(rng_() % layout.num_blocks));
      moves.push_back(static_cast<int32_t>(rng_() % layout.num_blocks));
    }
    const size_t words = layout.bytes() / 2;
    std::vector<uint16_t> bits(words);
    for (uint16_t& b : bits)
      b = static_cast<uint16_t>(rng_());
    DeviceBuffer d_caches = upload(bits), d_moves = upload(moves);
    ASSERT_EQ(cuda::move_blocks(d_caches.data(), layout, nullptr, cuda::KvCacheLayout{},
                                d_moves.as<int32_t>(), moves.data(), n),
              cudaSuccess);
    cuda::synchronize_or_die("random copies");
    std::vector<float> f(bits.begin(), bits.end());
    ASSERT_TRUE(cpu::move_blocks(f.data(), layout.num_blocks, nullptr, 0, layout.num_layers,
                                 layout.block_elements(), moves.data(), n));
    EXPECT_EQ(download<uint16_t>(d_caches, words), std::vector<uint16_t>(f.begin(), f.end()))
        << "copies " << n;
  }
}

// The host tier's moves against the CPU twin: random offloads, loads and copies over a few blocks
// and slots, so that many touch a block or slot an earlier one touched (their order matters),
// into pinned host memory the device addresses; bf16 and FP8 (byte) caches, and a block size
// whose bytes are not a multiple of 16.
TEST_F(CudaKvBlocksTest, MoveBlocksInOrderMatchesTheCpuTwin) {
  struct Case {
    int layers, block_size, kv_heads, head_dim;
    bool fp8;
  };
  const Case cases[] = {
      {2, 16, 2, 64, false}, {3, 8, 8, 128, false}, {2, 16, 2, 64, true}, {2, 3, 1, 6, false}};
  for (const Case& c : cases) {
    for (int n : {1, 7, 40, 300}) {
      const std::string what = "layers " + std::to_string(c.layers) + " bs " +
                               std::to_string(c.block_size) + (c.fp8 ? " fp8" : "") + " moves " +
                               std::to_string(n);
      const int blocks = 9, slots = 6;
      cuda::KvCacheLayout layout{c.layers,   blocks,         c.block_size, c.kv_heads,
                                 c.head_dim, KvDtype::kBF16, c.fp8};
      cuda::KvCacheLayout host_layout = layout;
      host_layout.num_blocks = slots;
      std::vector<int32_t> moves;
      for (int i = 0; i < n; ++i) {
        const int32_t kind = static_cast<int32_t>(rng_() % 3);
        moves.push_back(kind);
        moves.push_back(static_cast<int32_t>(rng_() % blocks));
        moves.push_back(static_cast<int32_t>(rng_() % (kind == 2 ? blocks : slots)));
      }
      // Element values as 16-bit words (bf16) or pairs of bytes (FP8): the twin moves floats
      // holding each word, which is the same permutation of the bytes.
      const int64_t word_bytes = 2;
      const size_t dev_words = layout.bytes() / word_bytes, host_words = host_layout.bytes() / 2;
      std::vector<uint16_t> dev(dev_words), host(host_words);
      for (uint16_t& w : dev)
        w = static_cast<uint16_t>(rng_());
      for (uint16_t& w : host)
        w = static_cast<uint16_t>(rng_());
      void* pinned = nullptr;
      ASSERT_EQ(cudaHostAlloc(&pinned, host_layout.bytes(), cudaHostAllocMapped), cudaSuccess);
      const std::unique_ptr<void, cudaError_t (*)(void*)> pinned_owner(pinned, cudaFreeHost);
      std::memcpy(pinned, host.data(), host_layout.bytes());
      void* pinned_dev = nullptr;
      ASSERT_EQ(cudaHostGetDevicePointer(&pinned_dev, pinned, 0), cudaSuccess);
      DeviceBuffer d_caches = upload(dev), d_moves = upload(moves);
      ASSERT_EQ(cuda::move_blocks(d_caches.data(), layout, pinned_dev, host_layout,
                                  d_moves.as<int32_t>(), moves.data(), n),
                cudaSuccess);
      cuda::synchronize_or_die("move_blocks");
      if (n == 7) {  // a move out of range is refused, and nothing moves
        const std::vector<int32_t> bad{1, 0, slots};
        DeviceBuffer d_bad = upload(bad);
        EXPECT_EQ(cuda::move_blocks(d_caches.data(), layout, pinned_dev, host_layout,
                                    d_bad.as<int32_t>(), bad.data(), 1),
                  cudaErrorInvalidValue);
      }
      // The twin: a block is block_elements x element bytes / 2 words.
      const int64_t block_words = layout.block_elements() * layout.element_bytes() / 2;
      std::vector<float> fd(dev.begin(), dev.end()), fh(host.begin(), host.end());
      ASSERT_TRUE(cpu::move_blocks(fd.data(), blocks, fh.data(), slots, c.layers, block_words,
                                   moves.data(), n));
      std::vector<uint16_t> want_dev(fd.begin(), fd.end()), want_host(fh.begin(), fh.end());
      EXPECT_EQ(download<uint16_t>(d_caches, dev_words), want_dev) << what;
      std::vector<uint16_t> got_host(host_words);
      std::memcpy(got_host.data(), pinned, host_layout.bytes());
      EXPECT_EQ(got_host, want_host) << what;
    }
  }
}

TEST_F(CudaKvBlocksTest, CopiesOfAnFp8CacheMoveBytes) {
  for (int block_size : {16, 3}) {
    cuda::KvCacheLayout layout{
        2, 24, block_size, block_size == 3 ? 1 : 2, block_size == 3 ? 6 : 64, KvDtype::kBF16, true};
    ASSERT_EQ(layout.bytes(), size_t(layout.cache_elements()) * 2 * 2);
    std::vector<uint8_t> bytes(layout.bytes());
    for (uint8_t& b : bytes)
      b = static_cast<uint8_t>(rng_());
    const std::vector<int32_t> pairs{3, 17, 5, 9, 20, 20};  // (src, dst)
    const std::vector<int32_t> moves{2, 17, 3, 2, 9, 5, 2, 20, 20};
    DeviceBuffer d = upload(bytes), d_moves = upload(moves);
    ASSERT_EQ(cuda::move_blocks(d.data(), layout, nullptr, cuda::KvCacheLayout{},
                                d_moves.as<int32_t>(), moves.data(), 3),
              cudaSuccess);
    cuda::synchronize_or_die("fp8 copies");
    const int64_t block = layout.block_elements(), cache = layout.cache_elements();
    for (int c = 0; c < 2 * layout.num_layers; ++c) {
      for (int p = 0; p < 3; ++p) {
        std::copy_n(bytes.begin() + c * cache + pairs[2 * p] * block, block,
                    bytes.begin() + c * cache + pairs[2 * p + 1] * block);
      }
    }
    EXPECT_EQ(download<uint8_t>(d, bytes.size()), bytes) << "block size " << block_size;
  }
}

// The arguments are checked before anything reaches the device, so this runs without a GPU:
// every refusal is cudaErrorInvalidValue, and the pointers are never touched.
TEST(CudaMoveBlocksArguments, AreRefusedBeforeAnyLaunch) {
  const cuda::KvCacheLayout layout{2, 9, 16, 2, 64, KvDtype::kBF16};
  cuda::KvCacheLayout host_layout = layout;
  host_layout.num_blocks = 6;
  int32_t word = 0;  // stands for every buffer: a refusal reads none of them
  void* caches = &word;
  void* host = &word;
  auto moves_on = [&](const cuda::KvCacheLayout& l, void* h, const cuda::KvCacheLayout& hl,
                      const std::vector<int32_t>& m,
                      int n) { return cuda::move_blocks(caches, l, h, hl, m.data(), m.data(), n); };
  const std::vector<int32_t> load{1, 0, 0}, copy{2, 1, 0};
  // Nothing to move is fine; a negative count is not, with or without layers.
  EXPECT_EQ(moves_on(layout, nullptr, {}, copy, 0), cudaSuccess);
  EXPECT_EQ(moves_on(layout, nullptr, {}, copy, -1), cudaErrorInvalidValue);
  cuda::KvCacheLayout no_layers = layout;
  no_layers.num_layers = 0;
  EXPECT_EQ(moves_on(no_layers, nullptr, {}, copy, 1), cudaSuccess);
  EXPECT_EQ(moves_on(no_layers, nullptr, {}, copy, -1), cudaErrorInvalidValue);
  // Negative layers, and more layers than the grid holds (K and V of each: 2 x 32,767 at most).
  for (int layers : {-1, 32768, 1 << 30, std::numeric_limits<int>::max()}) {
    cuda::KvCacheLayout bad = layout;
    bad.num_layers = layers;
    EXPECT_EQ(moves_on(bad, nullptr, {}, copy, 1), cudaErrorInvalidValue) << layers;
  }
  // A tier laid out unlike the cache: other layers, other blocks' shape, other element bytes.
  for (int what = 0; what < 3; ++what) {
    cuda::KvCacheLayout other = host_layout;
    if (what == 0) other.num_layers = 3;
    if (what == 1) other.block_size = 8;
    if (what == 2) other.fp8 = true;
    EXPECT_EQ(moves_on(layout, host, other, load, 1), cudaErrorInvalidValue) << what;
    EXPECT_EQ(moves_on(layout, host, other, copy, 1), cudaErrorInvalidValue) << what;
  }
  // Moves out of range: a kind that is none of the three, a block past the cache, a slot past
  // the tier, a copy's source past the cache, negative indices; a tier move without a tier.
  const std::vector<std::vector<int32_t>> bad_moves{{3, 0, 0},  {-1, 0, 0}, {1, 9, 0}, {1, 0, 6},
                                                    {0, -1, 0}, {2, 0, 9},  {2, 0, -1}};
  for (const auto& m : bad_moves) {
    EXPECT_EQ(moves_on(layout, host, host_layout, m, 1), cudaErrorInvalidValue)
        << m[0] << " " << m[1] << " " << m[2];
  }
  EXPECT_EQ(moves_on(layout, nullptr, {}, load, 1), cudaErrorInvalidValue);
  // No cache, or no moves (device or host copy), with something to move.
  EXPECT_EQ(cuda::move_blocks(nullptr, layout, host, host_layout, copy.data(), copy.data(), 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::move_blocks(caches, layout, host, host_layout, nullptr, copy.data(), 1),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::move_blocks(caches, layout, host, host_layout, copy.data(), nullptr, 1),
            cudaErrorInvalidValue);
  // One bad move among good ones refuses all of them (none is launched).
  const std::vector<int32_t> mixed{2, 1, 0, 1, 0, 0, 1, 0, 6};
  EXPECT_EQ(moves_on(layout, host, host_layout, mixed, 3), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvc::kernels
