// Forward batches built by hand for the backends' tests: prefill chunks, decode sequences, and the
// steps a scheduler could get wrong that check_forward_batch refuses (the CPU and CUDA backends'
// tests run the same list).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "replica/backend/backend.h"

namespace kvc::testing {

inline PrefillChunk chunk(const std::vector<int32_t>& tokens, int start, int end,
                          const std::vector<int32_t>& table, bool want_logits) {
  return {{tokens.begin() + start, tokens.begin() + end}, start, table, want_logits};
}

// Appends one decode sequence feeding `token` at `pos`; with flat attention over `table` when
// shared_blocks is 0, else its first shared_blocks blocks are left to the plan's nodes.
inline void add_decode(DecodeBatch& d, int32_t token, int32_t pos,
                       const std::vector<int32_t>& table, int32_t block_size,
                       int shared_blocks = 0) {
  d.tokens.push_back(token);
  d.positions.push_back(pos);
  d.slots.push_back(table[pos / block_size] * block_size + pos % block_size);
  const int used = pos / block_size + 1;
  d.plan.add_suffix({table.begin() + shared_blocks, table.begin() + used},
                    pos + 1 - shared_blocks * block_size);
}

// Steps check_forward_batch refuses, each with words its refusal names, around one sequence:
// `prompt` (40 tokens) prefilled over `table` (three blocks; the cases assume blocks of 16
// tokens), of a cache of `num_blocks`, decoding `token` at position 40. One case per refusal: a
// block past the cache, a token outside the vocabulary, a slot its suffix does not end in, a plan
// naming a sequence the batch lacks, a logits row never computed, offsets out of order or past
// their indices. Each also carries a valid KV move that copies the prompt's second block over its
// first: a backend that ran anything of a refused step (its moves come first) would change what
// the next decode reads.
inline std::vector<std::pair<std::string, ForwardBatch>> inconsistent_batches(
    const std::vector<int32_t>& prompt, const std::vector<int32_t>& table, int32_t token,
    int32_t vocab_size, int32_t num_blocks) {
  constexpr int32_t kBlock = 16;
  const int32_t b0 = table.at(0), b1 = table.at(1);
  std::vector<std::pair<std::string, ForwardBatch>> bad;
  auto decode = [&] {
    ForwardBatch step;
    add_decode(step.decode, token, 40, table, kBlock);
    return step;
  };
  {
    ForwardBatch step;  // a prefill over the prompt's first block naming one past the cache
    step.prefill.add(chunk(prompt, 0, 20, {b0, num_blocks}, true));
    bad.emplace_back("a block past the cache", std::move(step));
  }
  {
    ForwardBatch step;
    step.prefill.add(chunk(prompt, 0, 20, {b0, b1}, false));
    step.prefill.tokens[3] = vocab_size;
    bad.emplace_back("outside the vocabulary", std::move(step));
  }
  {
    ForwardBatch step;
    step.prefill.add(chunk(prompt, 0, 20, {b0}, false));  // 20 tokens, one block of 16
    bad.emplace_back("too few blocks", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.slots[0] += 1;
    bad.emplace_back("disagree", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.positions[0] = 41;
    bad.emplace_back("disagree", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.plan.suffix_block_indices[1] = -1;
    bad.emplace_back("a block past the cache", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.plan.add_node({b0}, {1});  // sequence 1 of a one-sequence batch
    bad.emplace_back("a sequence the batch does not have", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.plan.suffix_block_indptr.back() = 7;  // past its three blocks
    bad.emplace_back("out of order or past its indices", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.samples.push_back(SampleRequest{.logits_row = 1});
    bad.emplace_back("a logits row the step does not compute", std::move(step));
  }
  {
    ForwardBatch step;
    step.prefill.add(chunk(prompt, 0, 20, {b0, b1}, false));
    step.prefill.token_indptr.back() = 0;  // an empty chunk (its tokens past the offsets)
    bad.emplace_back("prefill index arrays do not match its chunks", std::move(step));
  }
  {
    ForwardBatch step;
    step.prefill.add(chunk(prompt, 0, 20, {b0, b1}, false));
    step.prefill.want_logits.push_back(1);
    bad.emplace_back("prefill index arrays do not match its chunks", std::move(step));
  }
  {
    ForwardBatch step;
    step.prefill.add(chunk(prompt, 0, 20, {b0, b1}, false));
    step.prefill.start_pos[0] = -16;
    bad.emplace_back("is empty or starts before 0", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.positions.push_back(41);
    bad.emplace_back("differ in number", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.tokens[0] = -1;
    bad.emplace_back("a decode token is outside the vocabulary", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.plan.num_seqs = 2;
    bad.emplace_back("the decode plan does not match the batch", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.plan.add_node({b0}, {0});
    step.decode.plan.node_seq_indices.push_back(5);  // past the last node's span: still walked
    bad.emplace_back("out of order or past its indices", std::move(step));
  }
  {
    ForwardBatch step = decode();
    step.decode.plan.suffix_len[0] = 0;
    bad.emplace_back("disagree", std::move(step));
  }
  for (auto& [what, step] : bad)
    step.kv_moves.push_back({KvTransfer::Kind::kCopy, b0, b1});  // pool block b1 -> b0
  return bad;
}

}  // namespace kvc::testing
