// Host side of kernels/cuda/attention.h: split choices and the device plan's packing.
#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/attention.h"

namespace kvc::kernels::cuda {
namespace {

// The wave model assumes kCascadeCtasPerSm (attention.h) cascade CTAs per SM (2 x 32 KB + 1 KB of
// shared memory and at most 170 registers each at head_dim 128).
// Extra cost of one CTA (index loads, pipeline fill, partial writes) in tiles of KV.
constexpr double kCtaOverheadTiles = 1.0;
// Longest suffix split (in tiles) when the suffix pass shares the grid with a prefix pass:
// at S=1024 on the H200 (docs/kernels-cuda.md, round 6) 3 to 6 tiles are within 1% of each
// other and ~2% faster than 8 or 16; 2 is slower.
constexpr int kMaxSharedSplitTiles = 4;
// Cost model of the cascade kernel's grid, measured on the H200 (docs/kernels-cuda.md): time of
// one prefix tile (64 rows x 64 tokens x d 128) on a prefix CTA when k prefix CTAs share an SM
// (index k), and the suffix pass's KV bytes per microsecond.
constexpr double kPrefixTileUs[kCascadeCtasPerSm + 1] = {0.0, 1.6, 2.0, 2.3};
constexpr double kDecodeBytesPerUs = 3.5e6;
// An FP8 cache's prefix tile (its codes widened to fp16 in shared memory first) over a 16-bit
// one's: the seed's cascade attention at S = 16 on the H200, 1.47 ms against 1.17 (the prefix
// pass decides it there; docs/kernels-cuda.md "FP8 KV cache").
constexpr double kFp8PrefixTileFactor = 1.25;

int ceil_div(int64_t a, int64_t b) {
  return static_cast<int>((a + b - 1) / b);
}

// 4-head decode CTAs per (sequence, split).
int head_groups(const AttentionShape& shape) {
  return ceil_div(shape.num_kv_heads, kCascadeHeadsPerCta);
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

bool current_device_has_ws_prefix() {
  static const bool has = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return major == 9 && minor == 0;  // the sm_90a build's wgmma and setmaxnreg
  }();
  return has;
}

int ws_prefix_override() {
  static const int v = [] {
    const char* e = std::getenv("KVC_WS_PREFIX");
    return e != nullptr && std::strcmp(e, "1") == 0 ? 1 : 0;
  }();
  return v;
}

DecodeSplit choose_decode_split(int64_t rows, int max_seq_len, int slots) {
  const int tiles = std::max(1, ceil_div(max_seq_len, kKvTileTokens));
  rows = std::max<int64_t>(rows, 1);
  const int c = choose_piece_tiles(tiles, std::max(slots, 1),
                                   [&](int c) { return rows * ceil_div(tiles, c); });
  return {ceil_div(tiles, c), c * kKvTileTokens};
}

DecodeSplit choose_decode_split(const AttentionShape& shape, int num_seqs, int max_seq_len,
                                int num_sms) {
  if (decode_wide_path(shape)) {
    // 8-head CTAs: 192 KB of shared memory at head_dim 128 (one per SM), 96 KB at 64 (two).
    return choose_decode_split(int64_t{num_seqs} * (shape.num_kv_heads / kDecodeHeadsPerCta),
                               max_seq_len, num_sms * (shape.head_dim == 128 ? 1 : 2));
  }
  return choose_decode_split(int64_t{num_seqs} * head_groups(shape), max_seq_len,
                             num_sms * kCascadeCtasPerSm);
}

DeviceCascadePlan make_device_plan(const CascadePlan& plan, const AttentionShape& shape,
                                   int num_sms, const PlanOptions& options) {
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
  // A plan without nodes is flat decode: 8-head CTAs when the shape allows. Otherwise the suffix
  // pass runs as 4-head decode CTAs in the cascade kernel's grid, after the prefix CTAs; with a
  // prefix pass its splits are at most kMaxSharedSplitTiles long, so that the decode CTAs that
  // share SMs with prefix CTAs come in pieces small enough to even out the finish.
  // The warp-specialised prefix pass runs alone, and the suffix pass after it as flat decode does.
  d.ws_prefix = num_nodes > 0 && options.ws_prefix > 0 && current_device_has_ws_prefix();
  d.wide_path = decode_wide_path(shape) && (num_nodes == 0 || d.ws_prefix) && !options.no_wide_path;
  const int64_t decode_rows = int64_t{num_seqs} * head_groups(shape);
  if (d.wide_path || d.ws_prefix) {
    d.suffix = choose_decode_split(shape, num_seqs, d.max_suffix_len, num_sms);
  } else {
    d.suffix = choose_decode_split(decode_rows, d.max_suffix_len, num_sms * kCascadeCtasPerSm);
    const int max_tokens = kMaxSharedSplitTiles * kKvTileTokens;
    if (num_nodes > 0 && d.suffix.split_tokens > max_tokens)
      d.suffix = {ceil_div(d.max_suffix_len, max_tokens), max_tokens};
  }

  // Node chunks: one chunk length for every node (with the warp-specialised pass: the one that
  // fits the items to one CTA per SM best), chosen by the same wave model for the number of
  // prefix CTAs (one or two per SM) whose estimated finish is earlier: one per SM leaves the
  // other slot to the suffix pass's CTAs, so the two passes overlap; two per SM run the prefix
  // pass faster and the suffix after it.
  std::vector<int> node_tiles(num_nodes), node_row_tiles(num_nodes), members(num_nodes);
  int max_tiles = 1;
  for (int n = 0; n < num_nodes; ++n) {
    const int tokens =
        (plan.node_block_indptr[n + 1] - plan.node_block_indptr[n]) * shape.block_size;
    members[n] = plan.node_seq_indptr[n + 1] - plan.node_seq_indptr[n];
    node_tiles[n] = ceil_div(tokens, kKvTileTokens);
    node_row_tiles[n] =
        ceil_div(int64_t{members[n]} * g, d.ws_prefix ? kWsNodeRowTile : kNodeRowTile);
    max_tiles = std::max(max_tiles, node_tiles[n]);
  }
  auto items_for = [&](int c) {
    int64_t items = 0;
    for (int n = 0; n < num_nodes; ++n)
      items += int64_t{shape.num_kv_heads} * node_row_tiles[n] * ceil_div(node_tiles[n], c);
    return items;
  };
  double suffix_tokens = 0;
  for (int32_t len : plan.suffix_len)
    suffix_tokens += len;
  const int elem = options.kv_element_bytes;
  const double tile_factor = elem == 1 ? kFp8PrefixTileFactor : 1.0;
  const double suffix_us =
      suffix_tokens * shape.num_kv_heads * shape.head_dim * 2 * elem / kDecodeBytesPerUs;
  // k prefix CTAs per SM (k = 1..kCascadeCtasPerSm); the suffix CTAs take the other slots while the
  // prefix pass runs (k / kCascadeCtasPerSm of the GPU goes to the prefix pass) and all of them
  // after it. Prefix time P_k: waves x chunk tiles at the measured per-tile time, but no less than
  // reading the nodes' KV once; suffix time S: its KV bytes. Estimated finish: max(P_k, S + P_k k /
  // K).
  double prefix_tokens = 0;
  for (int n = 0; n < num_nodes; ++n)
    prefix_tokens += node_tiles[n] * double{kKvTileTokens};
  const double kv_bytes_per_token =
      static_cast<double>(shape.num_kv_heads) * shape.head_dim * 2 * elem;
  const double prefix_bytes_us = prefix_tokens * kv_bytes_per_token / kDecodeBytesPerUs;
  int chunk_tiles[kCascadeCtasPerSm + 1] = {};
  double finish_us[kCascadeCtasPerSm + 1] = {};
  int k = 1;
  for (int kk = 1; kk <= kCascadeCtasPerSm; ++kk) {
    const int slots = num_sms * kk;
    chunk_tiles[kk] = choose_piece_tiles(max_tiles, slots, items_for);
    const int64_t waves = (items_for(chunk_tiles[kk]) + slots - 1) / slots;
    const double prefix_us =
        std::max(waves * (chunk_tiles[kk] + kCtaOverheadTiles) * kPrefixTileUs[kk] * tile_factor,
                 prefix_bytes_us);
    finish_us[kk] = std::max(prefix_us, suffix_us + prefix_us * kk / kCascadeCtasPerSm);
    if (finish_us[kk] < finish_us[k]) k = kk;
  }
  if (options.prefix_ctas_per_sm >= 1 && options.prefix_ctas_per_sm <= kCascadeCtasPerSm)
    k = options.prefix_ctas_per_sm;
  if (d.ws_prefix) k = 1;  // one warp-specialised CTA per SM: the chunks fitted to num_sms slots
  d.node_chunk_tokens = chunk_tiles[k] * kKvTileTokens;
  d.num_prefix_ctas = num_nodes == 0 ? 0
                                     : static_cast<int32_t>(std::min<int64_t>(
                                           items_for(chunk_tiles[k]), int64_t{num_sms} * k));
  const int chunk_tiles_chosen = chunk_tiles[k];

  std::vector<int32_t> unit_base(num_nodes), items;
  int64_t units = 0;
  for (int n = 0; n < num_nodes; ++n) {
    unit_base[n] = static_cast<int32_t>(units);
    const int chunks = ceil_div(node_tiles[n], chunk_tiles_chosen);
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
    const int chunks = ceil_div(node_tiles[n], chunk_tiles_chosen);
    for (int i = plan.node_seq_indptr[n]; i < plan.node_seq_indptr[n + 1]; ++i)
      seq_count[plan.node_seq_indices[i] + 1] += chunks;
  }
  std::vector<int32_t> seq_unit_indptr(num_seqs + 1, 0);
  for (int s = 0; s < num_seqs; ++s)
    seq_unit_indptr[s + 1] = seq_unit_indptr[s] + seq_count[s + 1];
  std::vector<int32_t> seq_units(seq_unit_indptr[num_seqs]);
  std::vector<int32_t> next(seq_unit_indptr.begin(), seq_unit_indptr.end() - 1);
  for (int n = 0; n < num_nodes; ++n) {
    const int chunks = ceil_div(node_tiles[n], chunk_tiles_chosen);
    for (int m = 0; m < members[n]; ++m) {
      const int32_t seq = plan.node_seq_indices[plan.node_seq_indptr[n] + m];
      for (int c = 0; c < chunks; ++c)
        seq_units[next[seq]++] = unit_base[n] + c * members[n] + m;
    }
  }

  // Pack; every array starts on a 16-byte boundary (the items are read as int4). The suffix
  // block tables, the only array that grows while a batch decodes, come last: the other offsets
  // (part of a CUDA graph's signature, kernels/cuda/llama.h) stay put from step to step.
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
  d.offsets.suffix_len = append(plan.suffix_len);
  d.offsets.seq_unit_indptr = append(seq_unit_indptr);
  d.offsets.seq_units = append(seq_units);
  d.offsets.suffix_block_indices = append(plan.suffix_block_indices);
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
