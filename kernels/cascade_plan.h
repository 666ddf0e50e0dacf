// The plain-data plan of one decode step's attention, built on the CPU by the replica's cascade
// planner and executed by a backend (kernels/cpu or kernels/cuda). No back-references, no
// pointers: index arrays in CSR form (the FlashInfer habit), so it copies to a device as is.
//
// A batch of num_seqs decode queries (one new token per sequence). The prefix tree of the batch's
// block tables becomes `nodes`: node i is a span of full KV blocks shared by the sequences listed
// for it; each sequence attends every node it belongs to (root first), then its private suffix.
// Flat attention is the plan with no nodes: every block of a sequence is in its suffix.
#pragma once

#include <cstdint>
#include <vector>

namespace kvc::kernels {

struct CascadePlan {
  int32_t num_seqs = 0;

  // Node i attends the KV of blocks node_block_indices[node_block_indptr[i] ..
  // node_block_indptr[i+1]) (full blocks only, in position order) with the queries of the sequences
  // node_seq_indices[node_seq_indptr[i] .. node_seq_indptr[i+1]).
  // A node comes after every node whose span precedes it in some member's context (its ancestors),
  // and every member's current position lies after the node's span (the pass is not causal).
  std::vector<int32_t> node_block_indptr{0};
  std::vector<int32_t> node_block_indices;
  std::vector<int32_t> node_seq_indptr{0};
  std::vector<int32_t> node_seq_indices;

  // Sequence s's private KV: blocks suffix_block_indices[suffix_block_indptr[s] .. [s+1]) holding
  // suffix_len[s] tokens (the last block may be partial; 0 means no private tokens).
  std::vector<int32_t> suffix_block_indptr{0};
  std::vector<int32_t> suffix_block_indices;
  std::vector<int32_t> suffix_len;

  int32_t num_nodes() const { return static_cast<int32_t>(node_block_indptr.size()) - 1; }

  // Appends a shared node; returns its index.
  int32_t add_node(const std::vector<int32_t>& blocks, const std::vector<int32_t>& seqs) {
    node_block_indices.insert(node_block_indices.end(), blocks.begin(), blocks.end());
    node_block_indptr.push_back(static_cast<int32_t>(node_block_indices.size()));
    node_seq_indices.insert(node_seq_indices.end(), seqs.begin(), seqs.end());
    node_seq_indptr.push_back(static_cast<int32_t>(node_seq_indices.size()));
    return num_nodes() - 1;
  }
  // Appends the next sequence's private suffix (sequences are added in order 0, 1, ...).
  void add_suffix(const std::vector<int32_t>& blocks, int32_t num_tokens) {
    suffix_block_indices.insert(suffix_block_indices.end(), blocks.begin(), blocks.end());
    suffix_block_indptr.push_back(static_cast<int32_t>(suffix_block_indices.size()));
    suffix_len.push_back(num_tokens);
    num_seqs = static_cast<int32_t>(suffix_len.size());
  }
};

}  // namespace kvc::kernels
