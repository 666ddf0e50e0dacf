// RadixIndex under random operation sequences decoded from the input, every answer compared with
// the brute-force model (tests/testing/radix_index_model.h), invariants checked after each step.
//
// Blocks form a fixed binary tree: block k (2..127) is a first block for k < 4 and otherwise
// continues block k/2, so chains share prefixes as prompts do. Byte 0 picks the configuration
// (capacity, TTL); then each operation is an opcode byte and its operands.
#include <cstdint>
#include <optional>
#include <vector>

#include "fuzz/fuzz_input.h"
#include "prefix_index/radix_index.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/radix_index_model.h"

namespace {

using kvc::BlockHash;
using Chain = std::vector<BlockHash>;

constexpr uint64_t kMaxBlock = 127;
constexpr kvc::ReplicaId kReplicas = 4;

// Spread over 64 bits like real hashes; invertible, so distinct blocks get distinct hashes.
BlockHash hash_of(uint64_t block) {
  return BlockHash{block * 0x9E3779B97F4A7C15ull};
}
uint64_t block_of(BlockHash h) {
  return h.value * 0xF1DE83E19937733Dull;
}  // the inverse

std::optional<BlockHash> parent_of(BlockHash h) {
  const uint64_t k = block_of(h);
  if (k < 4 || k > kMaxBlock) return std::nullopt;
  return hash_of(k / 2);
}

// The chain ending at block k (k in 2..127), first block first.
Chain chain_to(uint64_t k) {
  Chain chain;
  for (; k >= 2; k /= 2)
    chain.insert(chain.begin(), hash_of(k));
  return chain;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static_assert(0x9E3779B97F4A7C15ull * 0xF1DE83E19937733Dull == 1);
  kvc::fuzz::FuzzInput in(data, size);
  const uint8_t setup = in.byte();
  static constexpr size_t kCapacities[] = {0, 1, 3, 7};
  kvc::RadixIndexConfig config;
  config.capacity_blocks_per_replica = kCapacities[setup % 4];
  if (setup & 4) config.ttl = std::chrono::seconds(10);
  kvc::testing::FakeClock clock;
  kvc::RadixIndex index(clock, config);
  kvc::testing::RadixIndexModel model(parent_of, clock, config);

  for (int op = 0; op < 256 && !in.empty(); ++op) {
    const uint8_t code = in.byte();
    const kvc::ReplicaId r = (code >> 4) % kReplicas;
    const uint64_t k = 2 + in.below(kMaxBlock - 1);
    const Chain chain = chain_to(k);
    switch (code % 8) {
      case 0:
      case 1: {  // insert the chain, or one of its prefixes
        const Chain prefix(chain.begin(), chain.begin() + 1 + in.below(chain.size()));
        FUZZ_CHECK(index.insert(r, prefix).ok());
        FUZZ_CHECK(model.insert_after(r, std::nullopt, prefix));
        break;
      }
      case 2:
      case 3: {  // a stored event after some block (maybe one nobody holds)
        const size_t from = in.below(chain.size());
        const size_t to = from + in.below(chain.size() - from + 1);  // may be empty
        const Chain part(chain.begin() + from, chain.begin() + to);
        const auto parent = from == 0 ? std::nullopt : std::optional(chain[from - 1]);
        const bool model_ok = model.insert_after(r, parent, part);
        const kvc::Status s = code & 8 ? index.apply(r, kvc::KvStored{parent, part})
                                       : index.insert_after(r, parent, part);
        FUZZ_CHECK(s.ok() == model_ok);
        break;
      }
      case 4: {  // remove some blocks of the chain (a mask), maybe repeated
        const uint8_t mask = in.byte();
        Chain victims;
        for (size_t i = 0; i < chain.size(); ++i) {
          if (mask & (1u << i)) victims.push_back(chain[i]);
        }
        if (mask & 0x80 && !victims.empty()) victims.push_back(victims.front());
        const size_t expected = model.remove(r, victims);
        if (code & 8) {
          FUZZ_CHECK(index.apply(r, kvc::KvRemoved{victims}).ok());
        } else {
          FUZZ_CHECK(index.remove(r, victims) == expected);
        }
        break;
      }
      case 5:
        if (code & 8) {
          FUZZ_CHECK(index.apply(r, kvc::KvCleared{}).ok());
        } else {
          index.clear(r);
        }
        model.clear(r);
        break;
      case 6:
        clock.advance(std::chrono::seconds(in.below(8)));
        if (code & 8) {
          index.expire();
          model.expire();
        }
        break;
      default: {  // match the chain's prefix, maybe diverging after it
        const size_t len = 1 + in.below(chain.size());
        Chain query(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(len));
        if (code & 8) query.push_back(hash_of(kMaxBlock + 1 + in.byte()));
        const kvc::MatchResult got = index.match(query);
        FUZZ_CHECK(got.replicas == model.match(query));
        FUZZ_CHECK(got.tree_blocks == model.tree_blocks(query));
        FUZZ_CHECK(got.best() <= got.tree_blocks);
        // The path back from the prefix's last block is the prefix, when the tree has it.
        const Chain path = index.chain_to(chain[len - 1]);
        if (path.empty()) {
          FUZZ_CHECK(got.tree_blocks < len);
        } else {
          FUZZ_CHECK(got.tree_blocks >= len);
          FUZZ_CHECK(path ==
                     Chain(chain.begin(), chain.begin() + static_cast<std::ptrdiff_t>(len)));
        }
        break;
      }
    }
    index.check_invariants();
    for (kvc::ReplicaId q = 0; q < kReplicas; ++q) {
      FUZZ_CHECK(index.num_blocks(q) == model.num_blocks(q));
      if (config.capacity_blocks_per_replica > 0)
        FUZZ_CHECK(index.num_blocks(q) <= config.capacity_blocks_per_replica);
    }
    FUZZ_CHECK(index.num_blocks() == model.tree().size());
    const BlockHash probe = chain[in.below(chain.size())];
    FUZZ_CHECK(index.holds(r, probe) == model.holds(r, probe));
  }
  return 0;
}
