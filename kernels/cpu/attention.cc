#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "kernels/cpu/parallel.h"

namespace kvc::kernels::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Query rows that share one pass over a node's keys: each key tile is read from memory once per
// kRowTile rows and then from L1. Also bounds the per-thread scratch.
constexpr int kRowTile = 64;
// Prompt tokens whose queries share one pass over the chunk's keys in paged_prefill.
constexpr int kPrefillTokenTile = 16;

// Per-thread scratch; grows to the largest tile seen, then allocates nothing.
struct Scratch {
  std::vector<float> scores;   // [block_size]
  std::vector<float> row_max;  // [rows]
  std::vector<float> row_sum;  // [rows]
  std::vector<float> q;        // gathered query rows [rows, head_dim]
  std::vector<float> o;        // their outputs [rows, head_dim]
  std::vector<float> lse;      // [rows]
  std::vector<int32_t> row_end;
};
Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Eight independent partial sums: the compiler can keep them in vector registers without
// reassociating the float adds itself. The summation order is fixed, so results are deterministic.
float dot(const float* a, const float* b, int n) {
  float acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j)
      acc[j] += a[i + j] * b[i + j];
  }
  float tail = 0;
  for (; i < n; ++i)
    tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// y += a * x; x, y: [n], not overlapping. Eight at a time so that -O2 vectorizes it too.
void axpy(float a, const float* __restrict x, float* __restrict y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j)
      y[i + j] += a * x[i + j];
  }
  for (; i < n; ++i)
    y[i] += a * x[i];
}

// y *= a; y: [n].
void scale(float a, float* y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j)
      y[i + j] *= a;
  }
  for (; i < n; ++i)
    y[i] *= a;
}

// The one attention loop every kernel here uses. `rows` query rows attend positions
// [0, num_tokens) of KV head kv_head in the paged blocks `blocks`; when row_end is given, row r
// stops at position row_end[r] (exclusive: causal prefill). Keys are visited one block at a time;
// the block's keys and values stay in L1 while every row uses them (online softmax per row).
// q, o: [rows, head_dim], contiguous; lse: [rows] or null. o and lse come out normalised; a row
// that saw no key gets o = 0, lse = -inf.
void attend_rows(const AttentionShape& sh, int rows, const float* q, const float* k_cache,
                 const float* v_cache, int kv_head, const int32_t* blocks, int num_tokens,
                 const int32_t* row_end, float* o, float* lse) {
  const int d = sh.head_dim;
  const int64_t token_stride = static_cast<int64_t>(sh.num_kv_heads) * d;
  Scratch& s = scratch();
  s.scores.resize(sh.block_size);
  s.row_max.assign(rows, kNegInf);
  s.row_sum.assign(rows, 0.0f);
  std::fill(o, o + static_cast<int64_t>(rows) * d, 0.0f);
  float* scores = s.scores.data();

  for (int t0 = 0, b = 0; t0 < num_tokens; t0 += sh.block_size, ++b) {
    const int n = std::min(sh.block_size, num_tokens - t0);
    const int64_t base = static_cast<int64_t>(blocks[b]) * sh.block_size * token_stride +
                         static_cast<int64_t>(kv_head) * d;
    const float* k = k_cache + base;
    const float* v = v_cache + base;
    for (int r = 0; r < rows; ++r) {
      const int nr = row_end ? std::clamp(row_end[r] - t0, 0, n) : n;
      if (nr == 0) continue;
      const float* qr = q + static_cast<int64_t>(r) * d;
      float tile_max = kNegInf;
      for (int t = 0; t < nr; ++t) {
        scores[t] = dot(qr, k + t * token_stride, d) * sh.scale;
        tile_max = std::max(tile_max, scores[t]);
      }
      float* orow = o + static_cast<int64_t>(r) * d;
      const float m_new = std::max(s.row_max[r], tile_max);
      const float alpha = std::exp(s.row_max[r] - m_new);  // 0 on a row's first tile
      if (alpha != 1.0f) {
        scale(alpha, orow, d);
        s.row_sum[r] *= alpha;
      }
      for (int t = 0; t < nr; ++t) {
        const float p = std::exp(scores[t] - m_new);
        s.row_sum[r] += p;
        axpy(p, v + t * token_stride, orow, d);
      }
      s.row_max[r] = m_new;
    }
  }

  for (int r = 0; r < rows; ++r) {
    const float l = s.row_sum[r];
    if (l > 0) {
      float* orow = o + static_cast<int64_t>(r) * d;
      for (int i = 0; i < d; ++i)
        orow[i] /= l;
    }
    if (lse) lse[r] = l > 0 ? s.row_max[r] + std::log(l) : kNegInf;
  }
}

// Flat decode of every sequence; shared by paged_decode and cascade_decode's suffix pass so that
// the two give the same bits. One work item per (sequence, KV head): the group's query heads are
// contiguous rows of q and out.
void decode_seqs(const AttentionShape& sh, const float* q, const float* k_cache,
                 const float* v_cache, const int32_t* block_indptr, const int32_t* block_indices,
                 const int32_t* seq_lens, int num_seqs, float* out, float* lse) {
  const int g = sh.group();
  const int64_t d = sh.head_dim;
  parallel_for(static_cast<int64_t>(num_seqs) * sh.num_kv_heads, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int64_t seq = it / sh.num_kv_heads;
      const int kv = static_cast<int>(it % sh.num_kv_heads);
      assert(seq_lens[seq] >= 0);
      assert(seq_lens[seq] <= (block_indptr[seq + 1] - block_indptr[seq]) * sh.block_size);
      const int64_t row0 = seq * sh.num_q_heads + static_cast<int64_t>(kv) * g;
      attend_rows(sh, g, q + row0 * d, k_cache, v_cache, kv, block_indices + block_indptr[seq],
                  seq_lens[seq], nullptr, out + row0 * d, lse ? lse + row0 : nullptr);
    }
  });
}

// Rows [row_begin, row_end) of one node's stacked query matrix for KV head kv_head. Row r is
// member r / group, query head kv_head * group + r % group.
void node_pass_rows(const AttentionShape& sh, const float* q, const float* k_cache,
                    const float* v_cache, const CascadePlan& plan, int node, int kv_head,
                    int row_begin, int row_end, float* partial_o, float* partial_lse) {
  const int g = sh.group();
  const int d = sh.head_dim;
  const int rows = row_end - row_begin;
  const int32_t first_slot = plan.node_seq_indptr[node];
  Scratch& s = scratch();
  s.q.resize(static_cast<size_t>(rows) * d);
  s.o.resize(static_cast<size_t>(rows) * d);
  s.lse.resize(rows);
  for (int r = row_begin; r < row_end; ++r) {
    const int32_t seq = plan.node_seq_indices[first_slot + r / g];
    assert(seq >= 0 && seq < plan.num_seqs);
    const int64_t head = static_cast<int64_t>(kv_head) * g + r % g;
    const float* src = q + (static_cast<int64_t>(seq) * sh.num_q_heads + head) * d;
    std::copy(src, src + d, s.q.data() + static_cast<int64_t>(r - row_begin) * d);
  }
  const int32_t* blocks = plan.node_block_indices.data() + plan.node_block_indptr[node];
  const int num_tokens =
      (plan.node_block_indptr[node + 1] - plan.node_block_indptr[node]) * sh.block_size;
  attend_rows(sh, rows, s.q.data(), k_cache, v_cache, kv_head, blocks, num_tokens, nullptr,
              s.o.data(), s.lse.data());
  for (int r = row_begin; r < row_end; ++r) {
    const int64_t slot = first_slot + r / g;
    const int64_t dst = slot * sh.num_q_heads + static_cast<int64_t>(kv_head) * g + r % g;
    const float* src = s.o.data() + static_cast<int64_t>(r - row_begin) * d;
    std::copy(src, src + d, partial_o + dst * d);
    partial_lse[dst] = s.lse[r - row_begin];
  }
}

// Preconditions every kernel here relies on.
void assert_shape(const AttentionShape& sh) {
  assert(sh.num_kv_heads > 0 && sh.num_q_heads % sh.num_kv_heads == 0);
  assert(sh.head_dim > 0 && sh.block_size > 0);
  (void)sh;
}

int num_row_tiles(int rows) {
  return (rows + kRowTile - 1) / kRowTile;
}

}  // namespace

void merge_state(int rows, int head_dim, const float* o_a, const float* lse_a, float* o_b,
                 float* lse_b) {
  for (int r = 0; r < rows; ++r) {
    const float* oa = o_a + static_cast<int64_t>(r) * head_dim;
    float* ob = o_b + static_cast<int64_t>(r) * head_dim;
    const float la = lse_a[r];
    const float lb = lse_b[r];
    if (la == kNegInf && lb == kNegInf) {
      std::fill(ob, ob + head_dim, 0.0f);  // (0, -inf): the formula would give 0 / 0
      continue;
    }
    if (la == kNegInf) continue;  // the formula gives b exactly, unless o_a is not finite
    if (lb == kNegInf) {          // likewise a
      std::copy(oa, oa + head_dim, ob);
      lse_b[r] = la;
      continue;
    }
    const float m = std::max(la, lb);
    const float wa = std::exp(la - m);
    const float wb = std::exp(lb - m);
    const float sum = wa + wb;
    for (int i = 0; i < head_dim; ++i)
      ob[i] = (wa * oa[i] + wb * ob[i]) / sum;
    lse_b[r] = m + std::log(sum);
  }
}

void paged_decode(const AttentionShape& shape, const float* q, const float* k_cache,
                  const float* v_cache, const int32_t* block_indptr, const int32_t* block_indices,
                  const int32_t* seq_lens, int num_seqs, float* out, float* lse) {
  assert_shape(shape);
  decode_seqs(shape, q, k_cache, v_cache, block_indptr, block_indices, seq_lens, num_seqs, out,
              lse);
}

void cascade_node_pass(const AttentionShape& shape, const float* q, const float* k_cache,
                       const float* v_cache, const CascadePlan& plan, int node, float* partial_o,
                       float* partial_lse) {
  assert_shape(shape);
  assert(node >= 0 && node < plan.num_nodes());
  const int rows = (plan.node_seq_indptr[node + 1] - plan.node_seq_indptr[node]) * shape.group();
  const int tiles = num_row_tiles(rows);
  parallel_for(static_cast<int64_t>(tiles) * shape.num_kv_heads, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int kv = static_cast<int>(it / tiles);
      const int r0 = static_cast<int>(it % tiles) * kRowTile;
      node_pass_rows(shape, q, k_cache, v_cache, plan, node, kv, r0, std::min(rows, r0 + kRowTile),
                     partial_o, partial_lse);
    }
  });
}

// Three parallel_for calls (node passes, suffix pass, merges): each step reads the last one's
// output.
void cascade_decode(const AttentionShape& shape, const float* q, const float* k_cache,
                    const float* v_cache, const CascadePlan& plan, float* out, float* lse,
                    CascadeWorkspace& ws) {
  assert_shape(shape);
  const int num_seqs = plan.num_seqs;
  const int num_nodes = plan.num_nodes();
  const int hq = shape.num_q_heads;
  const int64_t d = shape.head_dim;
  const int g = shape.group();
  assert(static_cast<int>(plan.suffix_len.size()) == num_seqs);
  assert(static_cast<int>(plan.suffix_block_indptr.size()) == num_seqs + 1);
  const size_t num_slots = plan.node_seq_indices.size();
  ws.node_o.resize(num_slots * hq * d);
  ws.node_lse.resize(num_slots * hq);

  // 1. Node passes: every (node, KV head, row tile) of the tree in one parallel_for.
  ws.items.clear();
  for (int node = 0; node < num_nodes; ++node) {
    const int rows = (plan.node_seq_indptr[node + 1] - plan.node_seq_indptr[node]) * g;
    for (int kv = 0; kv < shape.num_kv_heads; ++kv) {
      for (int r0 = 0; r0 < rows; r0 += kRowTile) {
        ws.items.push_back({node, kv, r0, std::min(rows, r0 + kRowTile)});
      }
    }
  }
  parallel_for(static_cast<int64_t>(ws.items.size()), [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const CascadeWorkspace::Item& item = ws.items[it];
      node_pass_rows(shape, q, k_cache, v_cache, plan, item.node, item.kv_head, item.row_begin,
                     item.row_end, ws.node_o.data(), ws.node_lse.data());
    }
  });

  // 2. Suffix pass, straight into out: a sequence in no node is then done, bit for bit as flat.
  float* suffix_lse = lse;
  if (!suffix_lse) {
    ws.suffix_lse.resize(static_cast<size_t>(num_seqs) * hq);
    suffix_lse = ws.suffix_lse.data();
  }
  decode_seqs(shape, q, k_cache, v_cache, plan.suffix_block_indptr.data(),
              plan.suffix_block_indices.data(), plan.suffix_len.data(), num_seqs, out, suffix_lse);

  // 3. Each sequence's member slots in plan order (a counting sort by sequence keeps node order).
  ws.seq_node_indptr.assign(num_seqs + 1, 0);
  for (int32_t seq : plan.node_seq_indices)
    ++ws.seq_node_indptr[seq + 1];
  for (int s = 0; s < num_seqs; ++s)
    ws.seq_node_indptr[s + 1] += ws.seq_node_indptr[s];
  ws.seq_node_slots.resize(num_slots);
  ws.seq_node_next.assign(ws.seq_node_indptr.begin(), ws.seq_node_indptr.end() - 1);
  for (size_t slot = 0; slot < num_slots; ++slot) {
    ws.seq_node_slots[ws.seq_node_next[plan.node_seq_indices[slot]]++] = static_cast<int32_t>(slot);
  }

  // 4. Per sequence, fold ((node_1 + node_2) + ...) in place into its last node slot, then merge
  // that into the suffix result already in out.
  parallel_for(num_seqs, [&](int64_t begin, int64_t end) {
    for (int64_t s = begin; s < end; ++s) {
      const int32_t first = ws.seq_node_indptr[s];
      const int32_t last = ws.seq_node_indptr[s + 1];
      if (first == last) continue;
      auto node_o = [&](int32_t i) {
        return ws.node_o.data() + int64_t{ws.seq_node_slots[i]} * hq * d;
      };
      auto node_lse = [&](int32_t i) {
        return ws.node_lse.data() + int64_t{ws.seq_node_slots[i]} * hq;
      };
      for (int32_t i = first; i + 1 < last; ++i) {
        merge_state(hq, static_cast<int>(d), node_o(i), node_lse(i), node_o(i + 1),
                    node_lse(i + 1));
      }
      merge_state(hq, static_cast<int>(d), node_o(last - 1), node_lse(last - 1), out + s * hq * d,
                  suffix_lse + s * hq);
    }
  });
}

void paged_prefill(const AttentionShape& shape, const float* q, const float* k_cache,
                   const float* v_cache, const int32_t* block_ids, int start_pos, int num_tokens,
                   float* out) {
  assert_shape(shape);
  assert(start_pos >= 0 && num_tokens >= 0);
  const int g = shape.group();
  const int64_t d = shape.head_dim;
  const int tiles = (num_tokens + kPrefillTokenTile - 1) / kPrefillTokenTile;
  parallel_for(static_cast<int64_t>(tiles) * shape.num_kv_heads, [&](int64_t begin, int64_t end) {
    for (int64_t it = begin; it < end; ++it) {
      const int kv = static_cast<int>(it / tiles);
      const int t0 = static_cast<int>(it % tiles) * kPrefillTokenTile;
      const int t1 = std::min(num_tokens, t0 + kPrefillTokenTile);
      const int rows = (t1 - t0) * g;
      Scratch& s = scratch();
      s.q.resize(rows * d);
      s.o.resize(rows * d);
      s.row_end.resize(rows);
      // Row (t - t0) * g + j is token t, query head kv * g + j.
      for (int r = 0; r < rows; ++r) {
        const int64_t src = (static_cast<int64_t>(t0 + r / g) * shape.num_q_heads + kv * g + r % g);
        std::copy(q + src * d, q + (src + 1) * d, s.q.data() + r * d);
        s.row_end[r] = start_pos + t0 + r / g + 1;
      }
      attend_rows(shape, rows, s.q.data(), k_cache, v_cache, kv, block_ids, start_pos + t1,
                  s.row_end.data(), s.o.data(), nullptr);
      for (int r = 0; r < rows; ++r) {
        const int64_t dst = (static_cast<int64_t>(t0 + r / g) * shape.num_q_heads + kv * g + r % g);
        std::copy(s.o.data() + r * d, s.o.data() + (r + 1) * d, out + dst * d);
      }
    }
  });
}

}  // namespace kvc::kernels::cpu
