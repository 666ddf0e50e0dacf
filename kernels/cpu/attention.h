// CPU reference attention kernels (float32): flat paged decode, cascade decode over a CascadePlan,
// chunked causal prefill, and the (output, LSE) merge they share. They are the twins the CUDA
// kernels are tested against and the CPU backend of the demo: exact and readable first, then
// blocked and threaded (kernels/cpu/parallel.h).
//
// Conventions: LSE is the natural-log log-sum-exp of the scaled scores; an empty key set gives
// output 0 and LSE -inf. Paged KV layout and GQA mapping: kernels/attention_shape.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention_shape.h"
#include "kernels/cascade_plan.h"

namespace kvc::kernels::cpu {

// In place: (o_b, lse_b) := merge((o_a, lse_a), (o_b, lse_b)), the softmax-weighted average of two
// partial attention results over disjoint key sets:
//   m = max(la, lb); wa = exp(la - m); wb = exp(lb - m);
//   o = (wa * oa + wb * ob) / (wa + wb); lse = m + log(wa + wb).
// A state with lse = -inf is the identity whatever its o (even NaN); two -inf states give o = 0,
// lse = -inf. Exactly commutative; not exactly associative, so callers fix the order.
// o_a, o_b: [rows, head_dim]; lse_a, lse_b: [rows]; float32. lse values are finite or -inf.
void merge_state(int rows, int head_dim, const float* o_a, const float* lse_a, float* o_b,
                 float* lse_b);

// Flat paged decode: query s attends the first seq_lens[s] tokens held in its blocks
// block_indices[block_indptr[s] .. block_indptr[s + 1]) (in position order).
// q, out: [num_seqs, num_q_heads, head_dim]; lse: [num_seqs, num_q_heads] or null; float32.
// k_cache, v_cache: [num_blocks, block_size, num_kv_heads, head_dim].
void paged_decode(const AttentionShape& shape, const float* q, const float* k_cache,
                  const float* v_cache, const int32_t* block_indptr, const int32_t* block_indices,
                  const int32_t* seq_lens, int num_seqs, float* out, float* lse);

// Partial results of cascade_decode, owned by the caller and reused across steps: buffers only
// grow, so a warmed-up workspace allocates nothing.
struct CascadeWorkspace {
  std::vector<float> node_o;      // [plan.node_seq_indices.size(), num_q_heads, head_dim]
  std::vector<float> node_lse;    // [plan.node_seq_indices.size(), num_q_heads]
  std::vector<float> suffix_lse;  // [num_seqs, num_q_heads], used when the caller passes no lse
  // Per sequence (CSR), its member slots in plan order; seq_node_next is the fill cursor.
  std::vector<int32_t> seq_node_indptr;
  std::vector<int32_t> seq_node_slots;
  std::vector<int32_t> seq_node_next;
  // The node passes' work items: one per (node, KV head, tile of stacked query rows).
  struct Item {
    int32_t node, kv_head, row_begin, row_end;
  };
  std::vector<Item> items;
};

// The prefix pass of node `node`: for each KV head, the queries of all members x the GQA group are
// the rows of one matrix, multiplied block by block against the node's keys (each key block is
// read from memory once per tile of up to 64 stacked rows, then from L1), with an online softmax
// per row. Not causal: every member's position
// lies after the node's span (CascadePlan's precondition).
// Writes the normalised output and LSE of member slot p (p indexes plan.node_seq_indices) to
// partial_o: [plan.node_seq_indices.size(), num_q_heads, head_dim] and
// partial_lse: [plan.node_seq_indices.size(), num_q_heads]; other nodes' slots are untouched.
// q: [num_seqs, num_q_heads, head_dim]. float32.
void cascade_node_pass(const AttentionShape& shape, const float* q, const float* k_cache,
                       const float* v_cache, const CascadePlan& plan, int node, float* partial_o,
                       float* partial_lse);

// Cascade decode: every node pass, then the suffix pass (paged decode over each sequence's private
// blocks), then per sequence the merge in a fixed order: its nodes in plan order, then its suffix.
// A sequence in no node gets exactly paged_decode's result, so a plan with no nodes is
// bit-identical to flat decode over the same blocks.
// q, out: [num_seqs, num_q_heads, head_dim]; lse: [num_seqs, num_q_heads] or null; float32.
void cascade_decode(const AttentionShape& shape, const float* q, const float* k_cache,
                    const float* v_cache, const CascadePlan& plan, float* out, float* lse,
                    CascadeWorkspace& ws);

// Causal attention of one chunk of a sequence's prompt: query token i sits at position
// start_pos + i and attends positions [0, start_pos + i]. The KV of positions
// [0, start_pos + num_tokens) must already be in the blocks block_ids[0 ..].
// q, out: [num_tokens, num_q_heads, head_dim]; float32.
void paged_prefill(const AttentionShape& shape, const float* q, const float* k_cache,
                   const float* v_cache, const int32_t* block_ids, int start_pos, int num_tokens,
                   float* out);

}  // namespace kvc::kernels::cpu
