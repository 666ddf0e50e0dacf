#include "replica/tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <queue>

namespace kvc {
namespace {

// Entries kept in the pre-token cache before it starts over (bounds memory on adversarial text).
constexpr size_t kMaxCacheEntries = 1 << 18;

size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

BpeModel::BpeModel(BpeModel&& other) noexcept
    : vocab_(std::move(other.vocab_)),
      merges_(std::move(other.merges_)),
      options_(other.options_),
      cache_(std::move(other.cache_)) {
  std::copy(std::begin(other.byte_ids_), std::end(other.byte_ids_), byte_ids_);
  std::copy(std::begin(other.fallback_ids_), std::end(other.fallback_ids_), fallback_ids_);
}

Result<BpeModel> BpeModel::create(TokenVocab vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges,
                                  Options options) {
  BpeModel m;
  m.options_ = options;
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    auto it = vocab.find(byte);
    m.byte_ids_[b] = it == vocab.end() ? -1 : it->second;
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    it = vocab.find(std::string_view(name));
    m.fallback_ids_[b] = it == vocab.end() ? -1 : it->second;
  }
  m.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = vocab.find(a), ib = vocab.find(b), ij = vocab.find(a + b);
    if (ia == vocab.end() || ib == vocab.end() || ij == vocab.end()) {
      return Error{"merges[" + std::to_string(rank) + "] joins tokens missing from the vocabulary"};
    }
    // A pair listed twice keeps its first (highest-priority) rank.
    m.merges_.emplace(pair_key(ia->second, ib->second),
                      Merge{static_cast<int32_t>(rank), ij->second});
  }
  m.vocab_ = std::move(vocab);
  return m;
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  auto fallback = [&](std::string_view bytes) {
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : bytes)
        all = all && fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : bytes)
          symbols.push_back(fallback_ids_[static_cast<unsigned char>(c)]);
        return;
      }
    }
    if (options_.unk) symbols.push_back(*options_.unk);
    // Neither: the text has no token (as in Hugging Face's tokenizers, it is dropped).
  };
  if (options_.byte_level) {
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) {
        symbols.push_back(id);
      } else {
        fallback(std::string_view(&c, 1));
      }
    }
    return;
  }
  for (size_t at = 0; at < piece.size();) {
    const size_t n =
        std::min(utf8_length(static_cast<unsigned char>(piece[at])), piece.size() - at);
    const std::string_view ch = piece.substr(at, n);
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      symbols.push_back(it->second);
    } else {
      fallback(ch);
    }
    at += n;
  }
}

// Lowest rank first, leftmost among equal ranks: a heap of candidate pairs over a linked list of
// symbols, O(n log n) in the symbols of the pre-token (a long run of one character stays cheap).
void BpeModel::merge(std::vector<int32_t>& symbols) const {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  std::vector<int32_t> prev(n), next(n);
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const auto it = merges_.find(pair_key(symbols[left], symbols[next[left]]));
    if (it != merges_.end()) heap.push({it->second.rank, left, symbols[left], symbols[next[left]]});
  };
  for (int32_t i = 0; i + 1 < n; ++i)
    push(i);
  std::vector<bool> dead(n, false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const int32_t right = next[c.left];
    // Stale: one side was merged away or changed since this pair was pushed.
    if (dead[c.left] || right < 0 || symbols[c.left] != c.left_id || symbols[right] != c.right_id)
      continue;
    symbols[c.left] = merges_.at(pair_key(c.left_id, c.right_id)).id;
    dead[right] = true;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    push(prev[c.left]);
    push(c.left);
  }
  int32_t kept = 0;
  for (int32_t i = 0; i >= 0; i = next[i])
    symbols[kept++] = symbols[i];
  symbols.resize(kept);
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges || piece.size() == 1) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  {
    std::lock_guard lock(cache_mu_);
    if (auto it = cache_.find(piece); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  initial_symbols(piece, symbols);
  merge(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::lock_guard lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(piece), std::move(symbols));
}

}  // namespace kvc
