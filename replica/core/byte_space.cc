#include "replica/core/byte_space.h"

namespace kvc {

void ByteSpaceEvents::own(BlockHash token_block, std::optional<BlockHash> parent,
                          std::vector<BlockHash> byte_blocks) {
  owned_[token_block] = Owned{parent, std::move(byte_blocks)};
}

std::vector<KvEvent> ByteSpaceEvents::translate(const std::vector<KvEvent>& token_events) {
  std::vector<KvEvent> out;
  for (const KvEvent& e : token_events) {
    if (const auto* stored = std::get_if<KvStored>(&e)) {
      for (const BlockHash& t : stored->hashes) {
        const auto it = owned_.find(t);
        if (it == owned_.end() || !cached_.insert(t).second) continue;
        KvStored bytes{it->second.parent, {}};
        for (const BlockHash& b : it->second.blocks) {
          // Published already (another chain's token block covers the same bytes): the chain
          // continues from it.
          if (refs_[b]++ > 0) {
            if (!bytes.hashes.empty()) out.push_back(std::move(bytes));
            bytes = KvStored{b, {}};
            continue;
          }
          bytes.hashes.push_back(b);
        }
        if (!bytes.hashes.empty()) out.push_back(std::move(bytes));
      }
    } else if (const auto* removed = std::get_if<KvRemoved>(&e)) {
      KvRemoved bytes;
      for (const BlockHash& t : removed->hashes) {
        const auto it = owned_.find(t);
        if (it == owned_.end()) continue;
        if (cached_.erase(t) > 0) {
          // Children first, as the pool removes them.
          for (auto b = it->second.blocks.rbegin(); b != it->second.blocks.rend(); ++b) {
            if (--refs_[*b] == 0) {
              refs_.erase(*b);
              bytes.hashes.push_back(*b);
            }
          }
        }
        owned_.erase(it);
      }
      if (!bytes.hashes.empty()) out.push_back(std::move(bytes));
    } else if (std::holds_alternative<KvCleared>(e)) {
      owned_.clear();
      refs_.clear();
      cached_.clear();
      out.push_back(KvCleared{});
    }
  }
  return out;
}

std::vector<KvEvent> ByteSpaceEvents::snapshot(const std::vector<KvEvent>& token_snapshot) const {
  std::vector<KvEvent> out;
  std::unordered_set<BlockHash> sent;
  for (const KvEvent& e : token_snapshot) {
    const auto* stored = std::get_if<KvStored>(&e);
    if (stored == nullptr) continue;
    for (const BlockHash& t : stored->hashes) {
      const auto it = owned_.find(t);
      if (it == owned_.end()) continue;
      KvStored bytes{it->second.parent, {}};
      for (const BlockHash& b : it->second.blocks) {
        if (!sent.insert(b).second) {
          if (!bytes.hashes.empty()) out.push_back(std::move(bytes));
          bytes = KvStored{b, {}};
          continue;
        }
        bytes.hashes.push_back(b);
      }
      if (!bytes.hashes.empty()) out.push_back(std::move(bytes));
    }
  }
  return out;
}

}  // namespace kvc
