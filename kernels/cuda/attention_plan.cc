// Host side of kernels/cuda/attention.h: split choices and the device plan's packing.
#include <algorithm>
#include <cassert>
#include <cstring>

#include "kernels/cuda/attention.h"

namespace kvc::kernels::cuda {
namespace {

// Attention CTAs resident per SM that the wave model assumes (96 KB of shared memory each at
// head_dim 128: two fit in 227 KB).
constexpr int kCtasPerSm = 2;
// Extra cost of one CTA (index loads, pipeline fill, partial writes) in tiles of KV.
constexpr double kCtaOverheadTiles = 1.0;

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// Tiles per piece that minimise (waves of pieces) x (tiles per piece + overhead); `pieces(c)`
// counts the CTAs when each range is cut into pieces of c tiles. Ties go to longer pieces.
template <typename Pieces>
int choose_piece_tiles(int max_tiles, int slots, Pieces pieces) {
  int best = std::max(max_tiles, 1);
  double best_cost = 1e300;
  for (int c = std::max(max_tiles, 1); c >= 1; --c) {
    const int64_t n = pieces(c);
    const double cost = static_cast<double>((n + slots - 1) / slots) * (c + kCtaOverheadTiles);
    if (cost < best_cost * (1 - 1e-9)) {
      best_cost = cost;
      best = c;
    }
    if (n > 64LL * slots) break;  // finer pieces only add overhead
  }
  return best;
}

}  // namespace

int current_device_sms() {
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 132;  // planning without a device (tests of the plan): assume the H200
    }
    return n;
  }();
  return sms;
}

DecodeSplit choose_decode_split(int num_seqs, int num_kv_heads, int max_seq_len, int num_sms) {
  const int tiles = std::max(1, ceil_div(max_seq_len, kKvTileTokens));
  const int64_t rows = int64_t{std::max(num_seqs, 1)} * num_kv_heads;
  const int c = choose_piece_tiles(tiles, num_sms * kCtasPerSm,
                                   [&](int c) { return rows * ceil_div(tiles, c); });
  return {ceil_div(tiles, c), c * kKvTileTokens};
}

DecodeSplit choose_decode_split(const AttentionShape& shape, int num_seqs, int max_seq_len,
                                int num_sms) {
  if (!decode_heads_path(shape))
    return choose_decode_split(num_seqs, shape.num_kv_heads, max_seq_len, num_sms);
  // All-heads path: one CTA per (sequence, split, 8 KV heads); 192 KB of shared memory at
  // head_dim 128 (one CTA per SM), 96 KB at 64 (two).
  const int tiles = std::max(1, ceil_div(max_seq_len, kKvTileTokens));
  const int64_t rows = int64_t{std::max(num_seqs, 1)} * (shape.num_kv_heads / kDecodeHeadsPerCta);
  const int slots = num_sms * (shape.head_dim == 128 ? 1 : 2);
  const int c = choose_piece_tiles(tiles, slots, [&](int c) { return rows * ceil_div(tiles, c); });
  return {ceil_div(tiles, c), c * kKvTileTokens};
}

DeviceCascadePlan make_device_plan(const CascadePlan& plan, const AttentionShape& shape,
                                   int num_sms) {
  if (num_sms <= 0) num_sms = current_device_sms();
  const int num_nodes = plan.num_nodes();
  const int num_seqs = plan.num_seqs;
  const int g = shape.group();
  assert(static_cast<int>(plan.suffix_len.size()) == num_seqs);

  DeviceCascadePlan d;
  d.num_seqs = num_seqs;
  d.num_nodes = num_nodes;
  d.max_suffix_len = 0;
  for (int32_t len : plan.suffix_len)
    d.max_suffix_len = std::max(d.max_suffix_len, len);
  // The suffix pass takes the all-heads decode path only when there is no prefix pass: otherwise
  // its per-head CTAs share one launch with the prefix items and fill the SMs the prefix pass's
  // last wave leaves idle (measured on the H200: with a separate all-heads launch after the
  // prefix pass, cascade S=256 and the 1K+4x8K tree were 1-10% slower, S=1024 3% faster).
  d.heads_path = decode_heads_path(shape) && num_nodes == 0;
  d.suffix = d.heads_path
                 ? choose_decode_split(shape, num_seqs, d.max_suffix_len, num_sms)
                 : choose_decode_split(num_seqs, shape.num_kv_heads, d.max_suffix_len, num_sms);

  // Node chunks: one chunk length for every node, chosen by the same wave model.
  std::vector<int> node_tiles(num_nodes), node_row_tiles(num_nodes), members(num_nodes);
  int max_tiles = 1;
  for (int n = 0; n < num_nodes; ++n) {
    const int tokens =
        (plan.node_block_indptr[n + 1] - plan.node_block_indptr[n]) * shape.block_size;
    members[n] = plan.node_seq_indptr[n + 1] - plan.node_seq_indptr[n];
    node_tiles[n] = ceil_div(tokens, kKvTileTokens);
    node_row_tiles[n] = ceil_div(int64_t{members[n]} * g, kNodeRowTile);
    max_tiles = std::max(max_tiles, node_tiles[n]);
  }
  const int chunk_tiles = choose_piece_tiles(max_tiles, num_sms * kCtasPerSm, [&](int c) {
    int64_t items = 0;
    for (int n = 0; n < num_nodes; ++n)
      items += int64_t{shape.num_kv_heads} * node_row_tiles[n] * ceil_div(node_tiles[n], c);
    return items;
  });
  d.node_chunk_tokens = chunk_tiles * kKvTileTokens;

  std::vector<int32_t> unit_base(num_nodes), items;
  int64_t units = 0;
  for (int n = 0; n < num_nodes; ++n) {
    unit_base[n] = static_cast<int32_t>(units);
    const int chunks = ceil_div(node_tiles[n], chunk_tiles);
    units += int64_t{chunks} * members[n];
    // Row tiles of one chunk are adjacent in the grid: they read the same KV at the same time,
    // so the second to last find it in L2.
    for (int kv = 0; kv < shape.num_kv_heads; ++kv) {
      for (int c = 0; c < chunks; ++c) {
        for (int rt = 0; rt < node_row_tiles[n]; ++rt)
          items.insert(items.end(), {n, kv, c, rt});
      }
    }
  }
  assert(units < (int64_t{1} << 31));
  d.num_node_units = units;
  d.num_node_items = static_cast<int32_t>(items.size() / 4);

  // Per sequence, its node units in merge order: nodes in plan order, chunks in order.
  std::vector<int32_t> seq_count(num_seqs + 1, 0);
  for (int n = 0; n < num_nodes; ++n) {
    const int chunks = ceil_div(node_tiles[n], chunk_tiles);
    for (int i = plan.node_seq_indptr[n]; i < plan.node_seq_indptr[n + 1]; ++i)
      seq_count[plan.node_seq_indices[i] + 1] += chunks;
  }
  std::vector<int32_t> seq_unit_indptr(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s)
    seq_unit_indptr[s + 1] = seq_unit_indptr[s] + seq_count[s + 1];
  std::vector<int32_t> seq_units(seq_unit_indptr[num_seqs]);
  std::vector<int32_t> next(seq_unit_indptr.begin(), seq_unit_indptr.end() - 1);
  for (int n = 0; n < num_nodes; ++n) {
    const int chunks = ceil_div(node_tiles[n], chunk_tiles);
    for (int m = 0; m < members[n]; ++m) {
      const int32_t seq = plan.node_seq_indices[plan.node_seq_indptr[n] + m];
      for (int c = 0; c < chunks; ++c)
        seq_units[next[seq]++] = unit_base[n] + c * members[n] + m;
    }
  }

  // Pack; every array starts on a 16-byte boundary (the items are read as int4).
  auto append = [&](const std::vector<int32_t>& v) {
    while (d.host.size() % 4 != 0)
      d.host.push_back(0);
    const int64_t at = static_cast<int64_t>(d.host.size());
    d.host.insert(d.host.end(), v.begin(), v.end());
    return at;
  };
  d.offsets.node_block_indptr = append(plan.node_block_indptr);
  d.offsets.node_block_indices = append(plan.node_block_indices);
  d.offsets.node_seq_indptr = append(plan.node_seq_indptr);
  d.offsets.node_seq_indices = append(plan.node_seq_indices);
  d.offsets.node_unit_base = append(unit_base);
  d.offsets.node_items = append(items);
  d.offsets.suffix_block_indptr = append(plan.suffix_block_indptr);
  d.offsets.suffix_block_indices = append(plan.suffix_block_indices);
  d.offsets.suffix_len = append(plan.suffix_len);
  d.offsets.seq_unit_indptr = append(seq_unit_indptr);
  d.offsets.seq_units = append(seq_units);
  while (d.host.size() % 4 != 0)
    d.host.push_back(0);
  return d;
}

cudaError_t upload_plan(DeviceCascadePlan& plan, void* device_buffer, size_t device_buffer_bytes,
                        cudaStream_t stream) {
  if (device_buffer_bytes < plan.device_bytes() ||
      reinterpret_cast<uintptr_t>(device_buffer) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  plan.device = static_cast<const int32_t*>(device_buffer);
  if (plan.host.empty()) return cudaSuccess;
  return cudaMemcpyAsync(device_buffer, plan.host.data(), plan.device_bytes(),
                         cudaMemcpyHostToDevice, stream);
}

size_t cascade_workspace_bytes(const DeviceCascadePlan& plan, const AttentionShape& shape) {
  return static_cast<size_t>(plan.num_units()) * shape.num_q_heads * (shape.head_dim + 1) *
         sizeof(float);
}

size_t paged_decode_workspace_bytes(const AttentionShape& shape, int num_seqs, int max_seq_len,
                                    int num_sms) {
  if (num_sms <= 0) num_sms = current_device_sms();
  const DecodeSplit split = choose_decode_split(shape, num_seqs, max_seq_len, num_sms);
  return static_cast<size_t>(num_seqs) * split.num_splits * shape.num_q_heads *
         (shape.head_dim + 1) * sizeof(float);
}

}  // namespace kvc::kernels::cuda
