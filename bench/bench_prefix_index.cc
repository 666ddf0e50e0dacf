// prefix_index benchmarks: block hashing throughput and longest-match latency.
//   targets on the development CPU: hashing >= 5 GB/s for 64-byte blocks; lookup <= 20 us.
// Run: build/bench/bench_prefix_index --benchmark_out=bench/results/prefix_index.json
//        --benchmark_out_format=json
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "prefix_index/block_hash.h"
#include "prefix_index/radix_index.h"

namespace kvc {
namespace {

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s)
    c = static_cast<char>(rng());
  return s;
}

void BM_HashBlocks(benchmark::State& state) {
  const size_t block_size = static_cast<size_t>(state.range(0));
  const std::string prompt = random_bytes(1 << 20, 1);
  const BlockHash seed = chain_seed("llama3-8b");
  for (auto _ : state) {
    auto hashes = hash_blocks(seed, prompt, block_size);
    benchmark::DoNotOptimize(hashes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * prompt.size());
}
BENCHMARK(BM_HashBlocks)->Arg(16)->Arg(64)->Unit(benchmark::kMicrosecond);

// 10,000 distinct chains of a 4 KiB prefix (256 blocks of 16 bytes), spread over 8 replicas.
struct Fleet {
  static constexpr size_t kChains = 10000;
  static constexpr size_t kPrefixBytes = 4096;
  static constexpr size_t kQueryBytes = 32 * 1024;
  static constexpr ReplicaId kReplicas = 8;

  Fleet() : index(SteadyClock::instance()) {
    seed = chain_seed("llama3-8b");
    for (size_t c = 0; c < kChains; ++c) {
      std::string prefix = random_bytes(kPrefixBytes, 100 + c);
      const auto chain = hash_blocks(seed, prefix, kDefaultBlockSize);
      (void)index.insert(static_cast<ReplicaId>(c % kReplicas), chain);
      if (c % 10 == 0) (void)index.insert(static_cast<ReplicaId>((c + 3) % kReplicas), chain);
      if (c == kChains / 2) hit_prefix = prefix;
    }
    // The query: a known 4 KiB prefix followed by 28 KiB nobody holds.
    query = hit_prefix + random_bytes(kQueryBytes - kPrefixBytes, 7);
    query_hashes = hash_blocks(seed, query, kDefaultBlockSize);
  }

  RadixIndex index;
  BlockHash seed;
  std::string hit_prefix, query;
  std::vector<BlockHash> query_hashes;
};

Fleet& fleet() {
  static Fleet f;
  return f;
}

void BM_LongestMatch(benchmark::State& state) {
  Fleet& f = fleet();
  size_t matched = 0;
  for (auto _ : state) {
    const MatchResult m = f.index.match(f.query_hashes);
    matched = m.best();
    benchmark::DoNotOptimize(m.replicas.data());
  }
  if (matched != Fleet::kPrefixBytes / kDefaultBlockSize) state.SkipWithError("wrong match");
  state.counters["index_blocks"] = static_cast<double>(f.index.num_blocks());
  state.counters["index_MiB"] = static_cast<double>(f.index.memory_bytes()) / (1 << 20);
}
BENCHMARK(BM_LongestMatch)->Unit(benchmark::kMicrosecond);

// What the router pays per request: hash the 32 KiB prompt, then look it up.
void BM_HashAndLongestMatch(benchmark::State& state) {
  Fleet& f = fleet();
  for (auto _ : state) {
    const auto hashes = hash_blocks(f.seed, f.query, kDefaultBlockSize);
    const MatchResult m = f.index.match(hashes);
    benchmark::DoNotOptimize(m.replicas.data());
  }
}
BENCHMARK(BM_HashAndLongestMatch)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvc

BENCHMARK_MAIN();
