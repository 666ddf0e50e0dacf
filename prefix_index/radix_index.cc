#include "prefix_index/radix_index.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <type_traits>

namespace kvc {

struct RadixIndex::Entry {
  ReplicaId replica;
  uint64_t seq;  // insert operation that last touched the node for this replica
  Clock::TimePoint time;
  friend bool operator==(const Entry&, const Entry&) = default;
};

struct RadixIndex::LruKey {
  uint64_t seq;
  size_t depth_end;
  uint64_t uid;
  Node* node;
};

bool RadixIndex::LruLess::operator()(const LruKey& a, const LruKey& b) const {
  if (a.seq != b.seq) return a.seq < b.seq;
  if (a.depth_end != b.depth_end) return a.depth_end > b.depth_end;  // deepest first
  return a.uid < b.uid;
}

struct RadixIndex::ReplicaState {
  std::set<LruKey, LruLess> lru;
  size_t num_blocks = 0;
};

// Invariant: every block of a node is held by exactly the replicas in `entries`, each touched by
// the same operation; so eviction and matching can treat a node as a unit.
struct RadixIndex::Node {
  Node* parent = nullptr;
  uint64_t uid = 0;
  std::vector<BlockHash> edge;  // empty only for the root
  size_t depth_end = 0;         // blocks from the root through the end of this edge
  std::vector<Entry> entries;   // sorted by replica, unique
  std::unordered_map<BlockHash, std::unique_ptr<Node>> children;  // keyed by child->edge[0]

  Entry* find(ReplicaId r) {
    auto it = std::lower_bound(entries.begin(), entries.end(), r,
                               [](const Entry& e, ReplicaId id) { return e.replica < id; });
    return it != entries.end() && it->replica == r ? &*it : nullptr;
  }
};

size_t MatchResult::blocks_for(ReplicaId replica) const {
  for (const auto& m : replicas)
    if (m.replica == replica) return m.blocks;
  return 0;
}

size_t MatchResult::best() const {
  size_t best = 0;
  for (const auto& m : replicas)
    best = std::max(best, m.blocks);
  return best;
}

bool MatchResult::near_miss(double max_fraction, size_t min_lost_blocks) const {
  const double known = static_cast<double>(tree_blocks + diverged_edge_remaining);
  return diverged_edge_remaining >= min_lost_blocks &&
         static_cast<double>(tree_blocks) < max_fraction * known;
}

RadixIndex::RadixIndex(const Clock& clock, RadixIndexConfig config)
    : clock_(clock), config_(config), root_(std::make_unique<Node>()) {}

RadixIndex::~RadixIndex() {
  // Tear down iteratively: a long chain of single-child nodes would overflow the stack otherwise.
  std::vector<std::unique_ptr<Node>> pending;
  pending.push_back(std::move(root_));
  while (!pending.empty()) {
    std::unique_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
    for (auto& [_, child] : n->children)
      pending.push_back(std::move(child));
  }
}

RadixIndex::Node* RadixIndex::new_node(Node* parent, std::vector<BlockHash> edge) {
  auto node = std::make_unique<Node>();
  node->parent = parent;
  node->uid = next_uid_++;
  node->depth_end = parent->depth_end + edge.size();
  node->edge = std::move(edge);
  Node* raw = node.get();
  for (size_t i = 0; i < raw->edge.size(); ++i)
    where_[raw->edge[i]] = Location{raw, i};
  parent->children.emplace(raw->edge.front(), std::move(node));
  ++num_nodes_;
  return raw;
}

void RadixIndex::set_depth_end(Node* node, size_t depth_end) {
  for (const Entry& e : node->entries) {
    auto& lru = replicas_.at(e.replica).lru;
    lru.erase(LruKey{e.seq, node->depth_end, node->uid, node});
    lru.insert(LruKey{e.seq, depth_end, node->uid, node});
  }
  node->depth_end = depth_end;
}

RadixIndex::Node* RadixIndex::split(Node* node, size_t keep) {
  assert(keep > 0 && keep < node->edge.size());
  auto tail = std::make_unique<Node>();
  Node* t = tail.get();
  t->parent = node;
  t->uid = next_uid_++;
  t->edge.assign(node->edge.begin() + keep, node->edge.end());
  t->depth_end = node->depth_end;
  t->entries = node->entries;
  t->children = std::move(node->children);
  for (auto& [_, c] : t->children)
    c->parent = t;
  for (size_t i = 0; i < t->edge.size(); ++i)
    where_[t->edge[i]] = Location{t, i};
  for (const Entry& e : t->entries) {
    replicas_.at(e.replica).lru.insert(LruKey{e.seq, t->depth_end, t->uid, t});
  }
  node->edge.resize(keep);
  node->children.clear();
  set_depth_end(node, node->depth_end - t->edge.size());
  node->children.emplace(t->edge.front(), std::move(tail));
  ++num_nodes_;
  return t;
}

void RadixIndex::touch(Node* node, ReplicaId replica) {
  const uint64_t seq = next_seq_;
  const Clock::TimePoint now = clock_.now();
  ReplicaState& state = replicas_[replica];
  if (Entry* e = node->find(replica)) {
    state.lru.erase(LruKey{e->seq, node->depth_end, node->uid, node});
    e->seq = seq;
    e->time = now;
  } else {
    auto it = std::lower_bound(node->entries.begin(), node->entries.end(), replica,
                               [](const Entry& x, ReplicaId id) { return x.replica < id; });
    node->entries.insert(it, Entry{replica, seq, now});
    state.num_blocks += node->edge.size();
  }
  state.lru.insert(LruKey{seq, node->depth_end, node->uid, node});
}

void RadixIndex::drop_entry(Node* node, ReplicaId replica) {
  Entry* e = node->find(replica);
  assert(e != nullptr);
  auto state_it = replicas_.find(replica);
  ReplicaState& state = state_it->second;
  state.lru.erase(LruKey{e->seq, node->depth_end, node->uid, node});
  state.num_blocks -= node->edge.size();
  node->entries.erase(node->entries.begin() + (e - node->entries.data()));
  if (state.num_blocks == 0) {
    assert(state.lru.empty());
    replicas_.erase(state_it);
  }
}

void RadixIndex::erase_leaf(Node* node) {
  assert(node != root_.get() && node->children.empty() && node->entries.empty());
  for (const BlockHash& h : node->edge)
    where_.erase(h);
  Node* parent = node->parent;
  parent->children.erase(node->edge.front());  // destroys node
  --num_nodes_;
}

void RadixIndex::try_merge_with_child(Node* node) {
  if (node == root_.get() || node->children.size() != 1) return;
  Node* child = node->children.begin()->second.get();
  if (child->entries != node->entries) return;
  // Absorb the child: same holders, same touch, so the pair is one run of blocks.
  for (const Entry& e : child->entries) {
    replicas_.at(e.replica).lru.erase(LruKey{e.seq, child->depth_end, child->uid, child});
  }
  const size_t base = node->edge.size();
  for (size_t i = 0; i < child->edge.size(); ++i) {
    where_[child->edge[i]] = Location{node, base + i};
  }
  node->edge.insert(node->edge.end(), child->edge.begin(), child->edge.end());
  set_depth_end(node, child->depth_end);
  auto grandchildren = std::move(child->children);
  node->children.clear();  // destroys child
  node->children = std::move(grandchildren);
  for (auto& [_, c] : node->children)
    c->parent = node;
  --num_nodes_;
}

void RadixIndex::prune(Node* node) {
  while (node != root_.get() && node->entries.empty() && node->children.empty()) {
    Node* parent = node->parent;
    erase_leaf(node);
    node = parent;
  }
  if (node == root_.get()) return;
  Node* parent = node->parent;
  try_merge_with_child(node);
  try_merge_with_child(parent);  // may absorb node
}

bool RadixIndex::expired(const Entry& entry, Clock::TimePoint now) const {
  return config_.ttl && entry.time + *config_.ttl <= now;
}

size_t RadixIndex::expire() {
  if (!config_.ttl) return 0;
  const Clock::TimePoint now = clock_.now();
  size_t dropped = 0;
  std::vector<ReplicaId> ids;
  for (const auto& [id, _] : replicas_)
    ids.push_back(id);
  for (ReplicaId id : ids) {
    while (true) {
      auto it = replicas_.find(id);
      if (it == replicas_.end() || it->second.lru.empty()) break;
      Node* node = it->second.lru.begin()->node;
      if (!expired(*node->find(id), now)) break;  // seq order is time order
      dropped += node->edge.size();
      drop_entry(node, id);
      prune(node);
    }
  }
  return dropped;
}

void RadixIndex::set_capacity(ReplicaId replica, size_t blocks) {
  if (blocks == 0) {
    capacity_.erase(replica);
  } else {
    capacity_[replica] = blocks;
  }
  expire();
  evict_to_capacity(replica);
}

void RadixIndex::evict_to_capacity(ReplicaId replica) {
  const auto own = capacity_.find(replica);
  const size_t cap = own != capacity_.end() ? own->second : config_.capacity_blocks_per_replica;
  if (cap == 0) return;
  while (true) {
    auto it = replicas_.find(replica);
    if (it == replicas_.end() || it->second.num_blocks <= cap) return;
    const size_t excess = it->second.num_blocks - cap;
    Node* node = it->second.lru.begin()->node;
    if (node->edge.size() > excess) node = split(node, node->edge.size() - excess);
    drop_entry(node, replica);
    prune(node);
  }
}

Status RadixIndex::insert(ReplicaId replica, std::span<const BlockHash> chain) {
  return insert_after(replica, std::nullopt, chain);
}

Status RadixIndex::insert_after(ReplicaId replica, std::optional<BlockHash> parent,
                                std::span<const BlockHash> hashes) {
  expire();
  Node* at = root_.get();  // we stand at the end of `at`'s edge
  if (parent) {
    auto it = where_.find(*parent);
    if (it == where_.end())
      return Error{"parent block " + format_block_hash(*parent) + " is unknown"};
    at = it->second.node;
    if (it->second.offset + 1 < at->edge.size()) {
      split(at, it->second.offset + 1);
    }
  }
  if (hashes.empty()) return Status::Ok();

  std::vector<Node*> covered;
  Status status;
  size_t i = 0;
  while (i < hashes.size()) {
    auto child_it = at->children.find(hashes[i]);
    if (child_it == at->children.end()) {
      // New run: every hash must be new to the tree, or the chain contradicts what we hold.
      size_t n = 0;
      while (i + n < hashes.size() && !where_.contains(hashes[i + n])) {
        where_[hashes[i + n]] =
            Location{nullptr, 0};  // reserve, so a repeat inside the run is caught
        ++n;
      }
      for (size_t k = 0; k < n; ++k)
        where_.erase(hashes[i + k]);
      if (n > 0) {
        covered.push_back(new_node(at, {hashes.begin() + i, hashes.begin() + i + n}));
        i += n;
      }
      if (i < hashes.size()) {
        status = Error{"block " + format_block_hash(hashes[i]) +
                       " is already in the index under another parent"};
      }
      break;
    }
    Node* child = child_it->second.get();
    size_t m = 1;
    while (m < child->edge.size() && i + m < hashes.size() && child->edge[m] == hashes[i + m])
      ++m;
    if (m < child->edge.size()) split(child, m);
    covered.push_back(child);
    at = child;
    i += m;
  }
  for (Node* node : covered)
    touch(node, replica);
  ++next_seq_;
  // Touching may have made neighbours equal (same holders, same touch): re-compress.
  for (auto it = covered.rbegin(); it != covered.rend(); ++it)
    try_merge_with_child(*it);
  evict_to_capacity(replica);
  return status;
}

size_t RadixIndex::remove(ReplicaId replica, std::span<const BlockHash> hashes) {
  expire();
  // Group by node and cut each node from its end backwards, so the blocks moved by the splits
  // add up to the node's length once (removing a long run one block at a time would be quadratic).
  std::unordered_map<Node*, std::vector<size_t>> by_node;
  for (const BlockHash& h : hashes) {
    auto it = where_.find(h);
    if (it != where_.end() && it->second.node->find(replica) != nullptr) {
      by_node[it->second.node].push_back(it->second.offset);
    }
  }
  std::vector<BlockHash> dropped;
  for (auto& [node, offsets] : by_node) {
    std::sort(offsets.begin(), offsets.end(), std::greater<>());
    offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
    for (size_t offset : offsets) {
      if (offset + 1 < node->edge.size()) split(node, offset + 1);
      Node* single = offset > 0 ? split(node, offset) : node;
      drop_entry(single, replica);
      dropped.push_back(single->edge.front());
    }
  }
  // Pruning may erase or merge nodes, so find each dropped block again before pruning its node.
  for (const BlockHash& h : dropped) {
    auto it = where_.find(h);
    if (it != where_.end()) prune(it->second.node);
  }
  return dropped.size();
}

void RadixIndex::clear(ReplicaId replica) {
  while (true) {
    auto it = replicas_.find(replica);
    if (it == replicas_.end()) return;
    Node* node = it->second.lru.begin()->node;
    drop_entry(node, replica);
    prune(node);
  }
}

Status RadixIndex::apply(ReplicaId replica, const KvEvent& event) {
  return std::visit(
      [&](const auto& e) -> Status {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, KvStored>) {
          return insert_after(replica, e.parent, e.hashes);
        } else if constexpr (std::is_same_v<T, KvRemoved>) {
          remove(replica, e.hashes);
          return Status::Ok();
        } else if constexpr (std::is_same_v<T, KvQueued> || std::is_same_v<T, KvWork>) {
          return Status::Ok();
        } else {
          static_assert(std::is_same_v<T, KvCleared>);
          clear(replica);
          return Status::Ok();
        }
      },
      event);
}

MatchResult RadixIndex::match(std::span<const BlockHash> chain) const {
  MatchResult result;
  const Clock::TimePoint now = clock_.now();
  // Replicas that hold every block walked so far, with their counts in result.replicas.
  std::vector<size_t> active;  // indices into result.replicas
  const Node* at = root_.get();
  size_t i = 0;
  bool first = true;
  while (i < chain.size()) {
    auto it = at->children.find(chain[i]);
    if (it == at->children.end()) break;
    const Node* node = it->second.get();
    size_t m = 1;
    while (m < node->edge.size() && i + m < chain.size() && node->edge[m] == chain[i + m])
      ++m;
    if (first) {
      for (const Entry& e : node->entries) {
        if (expired(e, now)) continue;
        active.push_back(result.replicas.size());
        result.replicas.push_back(ReplicaMatch{e.replica, 0});
      }
      first = false;
    } else {
      // Keep only replicas that also hold this node (both lists are sorted by replica id).
      size_t kept = 0, k = 0;
      for (size_t idx : active) {
        const ReplicaId r = result.replicas[idx].replica;
        while (k < node->entries.size() && node->entries[k].replica < r)
          ++k;
        if (k < node->entries.size() && node->entries[k].replica == r &&
            !expired(node->entries[k], now)) {
          active[kept++] = idx;
        }
      }
      active.resize(kept);
    }
    for (size_t idx : active)
      result.replicas[idx].blocks += m;
    i += m;
    if (m < node->edge.size()) {
      if (i < chain.size()) result.diverged_edge_remaining = node->edge.size() - m;
      break;
    }
    at = node;
  }
  result.tree_blocks = i;
  return result;
}

std::vector<BlockHash> RadixIndex::chain_to(BlockHash hash) const {
  auto it = where_.find(hash);
  if (it == where_.end()) return {};
  const Location at = it->second;
  std::vector<BlockHash> chain(at.node->depth_end - at.node->edge.size() + at.offset + 1);
  size_t end = chain.size();
  // This node's edge through the block, then each ancestor's whole edge, back to the root.
  size_t take = at.offset + 1;
  for (const Node* n = at.node; n != nullptr && n->parent != nullptr; n = n->parent) {
    std::copy(n->edge.begin(), n->edge.begin() + static_cast<std::ptrdiff_t>(take),
              chain.begin() + static_cast<std::ptrdiff_t>(end - take));
    end -= take;
    take = n->parent->edge.size();
  }
  return chain;
}

bool RadixIndex::holds(ReplicaId replica, BlockHash hash) const {
  auto it = where_.find(hash);
  if (it == where_.end()) return false;
  Node* node = it->second.node;
  Entry* e = node->find(replica);
  return e != nullptr && !expired(*e, clock_.now());
}

size_t RadixIndex::num_blocks(ReplicaId replica) const {
  auto it = replicas_.find(replica);
  return it == replicas_.end() ? 0 : it->second.num_blocks;
}

std::vector<ReplicaId> RadixIndex::replicas() const {
  std::vector<ReplicaId> out;
  for (const auto& [id, _] : replicas_)
    out.push_back(id);
  return out;
}

size_t RadixIndex::memory_bytes() const {
  // Estimates of the standard containers' per-element overheads (libstdc++ node sizes).
  constexpr size_t kHashNode = sizeof(void*) + sizeof(std::pair<BlockHash, Location>) + 8;
  constexpr size_t kChildNode = sizeof(void*) + sizeof(std::pair<BlockHash, void*>) + 8;
  constexpr size_t kSetNode = 32 + sizeof(LruKey);
  size_t bytes = sizeof(*this) + where_.bucket_count() * sizeof(void*) + where_.size() * kHashNode;
  std::vector<const Node*> stack{root_.get()};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    bytes += sizeof(Node) + n->edge.capacity() * sizeof(BlockHash) +
             n->entries.capacity() * sizeof(Entry) + n->children.bucket_count() * sizeof(void*) +
             n->children.size() * kChildNode;
    for (const auto& [_, c] : n->children)
      stack.push_back(c.get());
  }
  for (const auto& [_, s] : replicas_)
    bytes += sizeof(ReplicaState) + s.lru.size() * kSetNode;
  return bytes;
}

namespace {
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "RadixIndex invariant violated: %s\n", what);
    std::abort();
  }
}
}  // namespace

void RadixIndex::check_invariants() const {
  std::map<ReplicaId, size_t> blocks;
  size_t entries = 0, nodes = 0, tree_blocks = 0;
  std::vector<const Node*> stack{root_.get()};
  check(root_->edge.empty() && root_->entries.empty(), "root is empty");
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n != root_.get()) {
      ++nodes;
      check(!n->edge.empty(), "non-root node has blocks");
      check(n->depth_end == n->parent->depth_end + n->edge.size(), "depth_end");
      check(!n->entries.empty() || !n->children.empty(), "no empty leaf");
      check(n->parent->children.at(n->edge.front()).get() == n, "parent link");
      for (size_t i = 0; i < n->edge.size(); ++i) {
        auto it = where_.find(n->edge[i]);
        check(it != where_.end() && it->second.node == n && it->second.offset == i, "where_");
      }
      tree_blocks += n->edge.size();
    }
    for (size_t k = 0; k < n->entries.size(); ++k) {
      const Entry& e = n->entries[k];
      check(k == 0 || n->entries[k - 1].replica < e.replica, "entries sorted");
      blocks[e.replica] += n->edge.size();
      ++entries;
      check(replicas_.at(e.replica).lru.contains(
                LruKey{e.seq, n->depth_end, n->uid, const_cast<Node*>(n)}),
            "lru key");
    }
    for (const auto& [key, c] : n->children) {
      check(key == c->edge.front() && c->parent == n, "child key");
      stack.push_back(c.get());
    }
  }
  check(nodes == num_nodes_, "num_nodes");
  check(tree_blocks == where_.size(), "where_ size");
  size_t lru = 0;
  for (const auto& [id, s] : replicas_) {
    check(s.num_blocks == blocks[id] && s.num_blocks > 0, "replica block count");
    lru += s.lru.size();
  }
  check(lru == entries, "lru size");
  check(blocks.size() == replicas_.size(), "replica set");
}

}  // namespace kvc
