// Property test: thousands of random insert / insert_after / remove / clear / match / evict /
// expire operations over 8 replicas, each answer compared with a brute-force model that keeps, per
// replica, a plain map of held blocks (tests/testing/radix_index_model.h).
#include <algorithm>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "prefix_index/block_hash.h"
#include "prefix_index/radix_index.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/radix_index_model.h"

namespace kvc {
namespace {

using Chain = std::vector<BlockHash>;

// A corpus of chains that share prefixes in a random tree shape (like prompts sharing system
// prompts and documents), built with the real chained hash.
class Corpus {
 public:
  explicit Corpus(std::mt19937_64& rng) : rng_(rng) {}

  void grow(size_t num_chains, size_t max_len) {
    const BlockHash seed = chain_seed("model");
    for (size_t c = 0; c < num_chains; ++c) {
      Chain chain;
      if (!chains_.empty() && rng_() % 4 != 0) {
        const Chain& base = chains_[rng_() % chains_.size()];
        chain.assign(base.begin(), base.begin() + rng_() % (base.size() + 1));
      }
      const size_t extra = 1 + rng_() % max_len;
      for (size_t i = 0; i < extra; ++i) {
        uint8_t block[4];
        for (auto& b : block)
          b = static_cast<uint8_t>(rng_());
        const BlockHash parent = chain.empty() ? seed : chain.back();
        const BlockHash h = hash_block(parent, block);
        if (!parent_.contains(h)) {
          parent_[h] = chain.empty() ? std::nullopt : std::optional(chain.back());
        }
        chain.push_back(h);
      }
      chains_.push_back(std::move(chain));
    }
  }

  const Chain& random_chain() { return chains_[rng_() % chains_.size()]; }
  std::optional<BlockHash> parent(BlockHash h) const { return parent_.at(h); }

 private:
  std::mt19937_64& rng_;
  std::vector<Chain> chains_;
  std::unordered_map<BlockHash, std::optional<BlockHash>> parent_;
};

struct PropertyCase {
  const char* name;
  size_t capacity;
  bool ttl;
  uint64_t seed;
};

class RadixIndexProperty : public ::testing::TestWithParam<PropertyCase> {};

TEST_P(RadixIndexProperty, AgreesWithBruteForceModel) {
  const PropertyCase pc = GetParam();
  constexpr ReplicaId kReplicas = 8;
  constexpr int kOps = 12000;
  std::mt19937_64 rng(pc.seed);
  Corpus corpus(rng);
  corpus.grow(300, 12);
  testing::FakeClock clock;
  RadixIndexConfig config;
  config.capacity_blocks_per_replica = pc.capacity;
  if (pc.ttl) config.ttl = std::chrono::seconds(30);
  RadixIndex index(clock, config);
  testing::RadixIndexModel model([&](BlockHash h) { return corpus.parent(h); }, clock, config);

  size_t matches_with_hits = 0, refused = 0;
  for (int op = 0; op < kOps; ++op) {
    const ReplicaId r = rng() % kReplicas;
    const Chain& chain = corpus.random_chain();
    const int kind = rng() % 100;
    SCOPED_TRACE(::testing::Message() << "op " << op << " kind " << kind << " replica " << r);
    if (kind < 30) {
      const Chain prefix(chain.begin(), chain.begin() + 1 + rng() % chain.size());
      ASSERT_TRUE(index.insert(r, prefix).ok());
      ASSERT_TRUE(model.insert_after(r, std::nullopt, prefix));
    } else if (kind < 45) {
      // A stored event continuing after some block (maybe one this replica never held).
      const size_t from = rng() % chain.size();
      const size_t to = from + 1 + rng() % (chain.size() - from);
      const Chain part(chain.begin() + from, chain.begin() + to);
      const auto parent = from == 0 ? std::nullopt : std::optional(chain[from - 1]);
      const bool model_ok = model.insert_after(r, parent, part);
      const Status s = index.insert_after(r, parent, part);
      ASSERT_EQ(s.ok(), model_ok) << s.message();
      refused += !model_ok;
    } else if (kind < 57) {
      Chain victims;
      for (const BlockHash& h : chain)
        if (rng() % 3 == 0) victims.push_back(h);
      ASSERT_EQ(index.remove(r, victims), model.remove(r, victims));
    } else if (kind < 59) {
      index.clear(r);
      model.clear(r);
    } else if (kind < 64 && pc.ttl) {
      clock.advance(std::chrono::seconds(rng() % 12));
      if (rng() % 2) {
        index.expire();
        model.expire();
      }
    } else {
      Chain query(chain.begin(), chain.begin() + 1 + rng() % chain.size());
      if (rng() % 2) query.push_back(BlockHash{rng()});  // diverge after the known part
      const MatchResult got = index.match(query);
      ASSERT_EQ(got.replicas, model.match(query));
      ASSERT_EQ(got.tree_blocks, model.tree_blocks(query));
      matches_with_hits += !got.replicas.empty();
    }
    index.check_invariants();
    for (ReplicaId k = 0; k < kReplicas; ++k) {
      ASSERT_EQ(index.num_blocks(k), model.num_blocks(k)) << "replica " << k;
      if (pc.capacity) {
        ASSERT_LE(index.num_blocks(k), pc.capacity);
      }
    }
    ASSERT_EQ(index.num_blocks(), model.tree().size());
    const BlockHash probe = chain[rng() % chain.size()];
    ASSERT_EQ(index.holds(r, probe), model.holds(r, probe));
  }
  // The workload must actually exercise hits and refusals, or the comparison proves little.
  EXPECT_GT(matches_with_hits, 500u);
  if (!pc.ttl && pc.capacity == 0) {
    EXPECT_GT(refused, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Workloads, RadixIndexProperty,
                         ::testing::Values(PropertyCase{"Unlimited", 0, false, 1},
                                           PropertyCase{"Capacity", 40, false, 2},
                                           PropertyCase{"CapacityAndTtl", 60, true, 3},
                                           PropertyCase{"TightCapacity", 7, false, 4}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvc
