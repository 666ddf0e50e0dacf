// See kernel_bench.h. All KV lives in one pool of random fp16 blocks (or E4M3 codes) filled once;
// each case lays its block tables over it. Rotation: a case's layers cycle over R disjoint copies
// ("slots") of its blocks, R chosen so that the slots together hold >= 1 GiB (L2 is 60 MB), at
// most 8. Timing: the 32 layers of a step are captured once in a CUDA graph; its replays are timed
// with events after warm-up; the median of `iters` replays is reported.
#include "bench/cuda/kernel_bench.h"

#include "bench/cuda/graph_timing.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "kernels/attention_shape.h"
#include "kernels/cascade_plan.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/ops.h"

namespace kvc::bench {
namespace {

namespace kc = kvc::kernels::cuda;
using kernels::AttentionShape;
using kernels::CascadePlan;

constexpr int kLayers = 32;
constexpr int kBlockSize = 16;
constexpr int kMaxSlots = 8;
constexpr double kRotationBytes = double(1ull << 30);
const AttentionShape kShape{32, 8, 128, kBlockSize, 0.08838834764831845f};  // Llama-3-8B
constexpr int64_t kBlockElems = int64_t{kBlockSize} * 8 * 128;              // one of K or V
constexpr double kTokenElems = 8 * 128 * 2;                                 // K+V, one layer

#define BENCH_CHECK(expr)                                                                \
  do {                                                                                   \
    if (cudaError_t e_ = (expr); e_ != cudaSuccess) {                                    \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__);                                                            \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

// A decode batch as a prefix tree: nodes of whole blocks with their members, then S private
// tokens per sequence. Node blocks come first in the compact layout, then suffix blocks.
struct TreeSpec {
  std::string name;
  int num_seqs = 0;
  int suffix = 0;
  struct Node {
    int tokens;
    std::vector<int32_t> members;
  };
  std::vector<Node> nodes;
  int prefix = 0, groups = 0;  // for the table
};

struct Layout {
  CascadePlan plan;                                       // over the compact layout
  std::vector<int32_t> shared_indptr{0}, shared_indices;  // flat tables sharing node blocks
  std::vector<int32_t> flat_indptr{0}, flat_indices;      // flat tables, prefixes copied
  std::vector<int32_t> lens;
  int max_len = 0;
  int64_t compact_blocks = 0, flat_blocks = 0;
  double cascade_tokens = 0, flat_tokens = 0;
};

Layout lay_out(const TreeSpec& t) {
  Layout l;
  int32_t next = 0;
  std::vector<std::vector<int32_t>> node_blocks;
  for (const auto& n : t.nodes) {
    std::vector<int32_t> b;
    for (int i = 0; i < n.tokens / kBlockSize; ++i)
      b.push_back(next++);
    l.plan.add_node(b, n.members);
    node_blocks.push_back(b);
    l.cascade_tokens += n.tokens;
  }
  const int suffix_blocks = (t.suffix + kBlockSize - 1) / kBlockSize;
  std::vector<std::vector<int32_t>> logical(t.num_seqs);
  for (size_t n = 0; n < t.nodes.size(); ++n) {
    for (int32_t s : t.nodes[n].members)
      logical[s].insert(logical[s].end(), node_blocks[n].begin(), node_blocks[n].end());
  }
  for (int s = 0; s < t.num_seqs; ++s) {
    std::vector<int32_t> b;
    for (int i = 0; i < suffix_blocks; ++i)
      b.push_back(next++);
    l.plan.add_suffix(b, t.suffix);
    l.cascade_tokens += t.suffix;
    logical[s].insert(logical[s].end(), b.begin(), b.end());
  }
  l.compact_blocks = next;
  // Flat with copies: a shared block's first reader keeps it, every later reader gets a copy.
  std::vector<char> used(next, 0);
  int32_t copy = next;
  for (int s = 0; s < t.num_seqs; ++s) {
    const int len = static_cast<int>(logical[s].size() - suffix_blocks) * kBlockSize + t.suffix;
    l.lens.push_back(len);
    l.max_len = std::max(l.max_len, len);
    l.flat_tokens += len;
    for (int32_t b : logical[s]) {
      l.shared_indices.push_back(b);
      l.flat_indices.push_back(used[b] ? copy++ : b);
      used[b] = 1;
    }
    l.shared_indptr.push_back(static_cast<int32_t>(l.shared_indices.size()));
    l.flat_indptr.push_back(static_cast<int32_t>(l.flat_indices.size()));
  }
  l.flat_blocks = copy;
  return l;
}

int slots_for(int64_t blocks, int elem_bytes) {
  const double bytes = double(blocks) * kBlockElems * 2 * elem_bytes;
  return std::clamp(static_cast<int>(std::ceil(kRotationBytes / std::max(bytes, 1.0))), 1,
                    kMaxSlots);
}

// Captures the 32 layers issued by `layer(i, stream)` and times the replays.
float time_layers(const std::function<cudaError_t(int, cudaStream_t)>& layer, cudaStream_t stream,
                  int iters) {
  float ms = 0;
  BENCH_CHECK(median_graph_ms(layer, kLayers, stream, iters, ms));
  return ms;
}

// Relative L2 of two outputs of 16-bit values, fp16 or (bf16) bf16.
double rel_l2_16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, bool bf16) {
  auto value = [bf16](uint16_t v) -> double {
    return bf16 ? std::bit_cast<float>(uint32_t{v} << 16)
                : static_cast<float>(std::bit_cast<_Float16>(v));
  };
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = value(a[i]);
    const double y = value(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// The KV pool: fp16 values, or (fp8) E4M3 codes under scales of 1 read with bf16 queries.
struct Pool {
  kc::DeviceBuffer buf;
  int64_t blocks = 0;
  bool fp8 = false;
  int elem_bytes() const { return fp8 ? 1 : 2; }
  kc::KvDtype dtype() const { return fp8 ? kc::KvDtype::kBF16 : kc::KvDtype::kF16; }
  kc::KvQuant quant() const { return {fp8, 1.0f, 1.0f}; }
  const void* k(int64_t first_block) const {
    return static_cast<const char*>(buf.data()) + first_block * kBlockElems * elem_bytes();
  }
  const void* v(int64_t first_block) const {
    return static_cast<const char*>(buf.data()) +
           (blocks + first_block) * kBlockElems * elem_bytes();
  }
};

struct Row {
  nlohmann::json j;
};

// `o` with the pool's KV element size (the plan's cost model reads it).
kc::PlanOptions with_elem_bytes(kc::PlanOptions o, const Pool& pool) {
  o.kv_element_bytes = pool.elem_bytes();
  return o;
}

// A layout's cascade plan uploaded with its workspace; layer i runs over slot i % slots of the
// layout's blocks (rotated so that L2 does not hold them).
struct CascadeRun {
  const Layout& l;
  const Pool& pool;
  kc::DeviceCascadePlan plan;
  kc::DeviceBuffer d_plan, ws;
  int slots;

  CascadeRun(const Layout& layout, const Pool& p, cudaStream_t stream,
             const kc::PlanOptions& options = {})
      : l(layout),
        pool(p),
        plan(kc::make_device_plan(layout.plan, kShape, 0, with_elem_bytes(options, p))),
        d_plan(std::max<size_t>(plan.device_bytes(), 16)),
        ws(kc::cascade_workspace_bytes(plan, kShape)),
        slots(static_cast<int>(std::max<int64_t>(
            1, std::min<int64_t>(slots_for(layout.compact_blocks, p.elem_bytes()),
                                 p.blocks / std::max<int64_t>(layout.compact_blocks, 1))))) {
    BENCH_CHECK(kc::upload_plan(plan, d_plan.data(), d_plan.bytes(), stream));
  }
  cudaError_t layer(int i, const void* q, void* out, float* lse, cudaStream_t s) const {
    const int64_t base = int64_t(i % slots) * l.compact_blocks;
    return kc::cascade_decode(kShape, pool.dtype(), plan, q, pool.k(base), pool.v(base), out, lse,
                              ws.data(), ws.bytes(), s, pool.quant());
  }
};

// Median ms of cascade decode over `l`'s plan for 32 layers.
float time_cascade(const Layout& l, const Pool& pool, const void* q, void* out, int iters,
                   cudaStream_t stream, const kc::PlanOptions& options = {}) {
  const CascadeRun run(l, pool, stream, options);
  return time_layers(
      [&](int layer, cudaStream_t s) { return run.layer(layer, q, out, nullptr, s); }, stream,
      iters);
}

// Times flat (copied prefixes), flat over shared blocks (optional) and cascade for one tree.
nlohmann::json run_case(const TreeSpec& t, const Pool& pool, double bw, int iters, bool with_shared,
                        bool cascade_only, cudaStream_t stream) {
  const Layout l = lay_out(t);
  const int hq = kShape.num_q_heads, d = kShape.head_dim;
  const size_t rows = size_t(t.num_seqs) * hq;
  kc::DeviceBuffer q(rows * d * 2), out(rows * d * 2), out_ref(rows * d * 2), lse(rows * 4);
  BENCH_CHECK(kc::fill_random(q.data(), rows * d, pool.dtype(), 12345, 1.0f, stream));

  auto upload = [](const std::vector<int32_t>& v) {
    kc::DeviceBuffer b(std::max<size_t>(v.size(), 1) * 4);
    if (!v.empty()) b.upload(v.data(), v.size() * 4);
    return b;
  };
  kc::DeviceBuffer d_lens = upload(l.lens);
  const size_t flat_ws_bytes = kc::paged_decode_workspace_bytes(kShape, t.num_seqs, l.max_len);
  kc::DeviceBuffer flat_ws(flat_ws_bytes);

  const int flat_slots =
      std::min<int64_t>(slots_for(l.flat_blocks, pool.elem_bytes()), pool.blocks / l.flat_blocks);
  const int compact_slots = std::min<int64_t>(slots_for(l.compact_blocks, pool.elem_bytes()),
                                              pool.blocks / l.compact_blocks);

  nlohmann::json r;
  // Flat, every sequence's prefix in its own blocks: the bytes a per-sequence kernel must move.
  if (!cascade_only) {
    kc::DeviceBuffer ip = upload(l.flat_indptr), ix = upload(l.flat_indices);
    const float ms = time_layers(
        [&](int layer, cudaStream_t s) {
          const int64_t base = int64_t(layer % flat_slots) * l.flat_blocks;
          return kc::paged_decode(kShape, pool.dtype(), q.data(), pool.k(base), pool.v(base),
                                  ip.as<int32_t>(), ix.as<int32_t>(), d_lens.as<int32_t>(),
                                  t.num_seqs, l.max_len, out.data(), lse.as<float>(),
                                  flat_ws.data(), flat_ws_bytes, s, pool.quant());
        },
        stream, iters);
    r["flat_ms"] = ms;
    r["flat_slots"] = flat_slots;
  }
  // Flat over shared prefix blocks (what vLLM-style paged decode does with prefix caching): the
  // re-reads may hit L2. Its output on slot 0 is the reference for the cascade check.
  if (with_shared && !cascade_only) {
    kc::DeviceBuffer ip = upload(l.shared_indptr), ix = upload(l.shared_indices);
    auto layer = [&](int layer, cudaStream_t s) {
      const int64_t base = int64_t(layer % compact_slots) * l.compact_blocks;
      return kc::paged_decode(kShape, pool.dtype(), q.data(), pool.k(base), pool.v(base),
                              ip.as<int32_t>(), ix.as<int32_t>(), d_lens.as<int32_t>(), t.num_seqs,
                              l.max_len, out_ref.data(), nullptr, flat_ws.data(), flat_ws_bytes, s,
                              pool.quant());
    };
    r["flat_shared_ms"] = time_layers(layer, stream, iters);
    BENCH_CHECK(layer(0, stream));
  }
  // The 16-bit output of a launch on slot 0, on the host.
  auto download = [&](const kc::DeviceBuffer& buf) {
    BENCH_CHECK(cudaStreamSynchronize(stream));
    std::vector<uint16_t> v(rows * d);
    buf.download(v.data(), v.size() * 2);
    return v;
  };
  const bool ws_row = kc::current_device_has_ws_prefix() && !t.nodes.empty();
  std::vector<uint16_t> cascade_out;  // the cascade's slot-0 output, when a check below needs it
  // Cascade (timed before the diagnostic runs below, right after flat: the headline pair).
  {
    const CascadeRun run(l, pool, stream);
    const kc::DeviceCascadePlan& plan = run.plan;
    auto layer = [&](int i, cudaStream_t s) {
      return run.layer(i, q.data(), out.data(), lse.as<float>(), s);
    };
    r["cascade_ms"] = time_layers(layer, stream, iters);
    r["cascade_slots"] = run.slots;
    r["node_items"] = plan.num_node_items;
    r["node_chunk_tokens"] = plan.node_chunk_tokens;
    r["prefix_ctas"] = plan.num_prefix_ctas;
    r["suffix_splits"] = plan.suffix.num_splits;
    const bool vs_flat = with_shared && !cascade_only;
    if (vs_flat || ws_row) {
      BENCH_CHECK(layer(0, stream));
      cascade_out = download(out);
    }
    if (vs_flat) r["cascade_vs_flat_rel_l2"] = rel_l2_16(cascade_out, download(out_ref), pool.fp8);
  }
  // The same plan with the warp-specialised prefix pass (sm_90), and its output against the
  // shared-grid cascade's on slot 0.
  if (ws_row) {
    kc::PlanOptions ws;
    ws.ws_prefix = 1;
    const CascadeRun run(l, pool, stream, ws);
    auto layer = [&](int i, cudaStream_t s) {
      return run.layer(i, q.data(), out.data(), nullptr, s);
    };
    r["cascade_ws_ms"] = time_layers(layer, stream, iters);
    r["ws_prefix_ctas"] = run.plan.num_prefix_ctas;
    r["ws_node_chunk_tokens"] = run.plan.node_chunk_tokens;
    BENCH_CHECK(layer(0, stream));
    r["cascade_ws_vs_shared_rel_l2"] = rel_l2_16(download(out), cascade_out, pool.fp8);
  }
  // The two passes alone (the worked example and the tree): the tree with no private tokens
  // (prefix pass + merge), and the private tokens with no tree (suffix pass + merge).
  if (with_shared && !cascade_only) {
    TreeSpec nodes_only = t, suffix_only = t;
    nodes_only.suffix = 0;
    suffix_only.nodes.clear();
    r["prefix_pass_ms"] =
        time_cascade(lay_out(nodes_only), pool, q.data(), out.data(), iters, stream);
    r["suffix_pass_ms"] =
        time_cascade(lay_out(suffix_only), pool, q.data(), out.data(), iters, stream);
    // The suffix pass as the cascade runs it (4-head CTAs; no wide path).
    kc::PlanOptions four_head;
    four_head.no_wide_path = true;
    r["suffix_pass_4head_ms"] =
        time_cascade(lay_out(suffix_only), pool, q.data(), out.data(), iters, stream, four_head);
    // The cost model's choice against the three grid shapes: one, two or three prefix CTAs per SM.
    for (int k : {1, 2, 3})
      r["cascade_prefix_ctas_per_sm_" + std::to_string(k) + "_ms"] =
          time_cascade(l, pool, q.data(), out.data(), iters, stream, {k});
  }
  const double token_bytes = kTokenElems * pool.elem_bytes();
  const double flat_bytes = l.flat_tokens * token_bytes * kLayers;
  const double cascade_bytes = l.cascade_tokens * token_bytes * kLayers;
  r["name"] = t.name;
  r["S"] = t.suffix;
  r["prefix"] = t.prefix;
  r["batch"] = t.num_seqs;
  r["groups"] = t.groups;
  r["flat_bytes"] = flat_bytes;
  r["cascade_bytes"] = cascade_bytes;
  r["flat_floor_ms"] = flat_bytes / bw * 1e3;
  r["floor_ms"] = cascade_bytes / bw * 1e3;
  r["ratio"] = r["cascade_ms"].get<double>() / r["floor_ms"].get<double>();
  if (r.contains("flat_ms"))
    r["flat_bw_fraction"] = flat_bytes / (r["flat_ms"].get<double>() * 1e-3) / bw;
  r["cascade_bw_fraction"] = cascade_bytes / (r["cascade_ms"].get<double>() * 1e-3) / bw;
  return r;
}

TreeSpec two_level(const std::string& name, int groups, int batch, int prefix, int suffix) {
  TreeSpec t{name, batch, suffix, {}, prefix, groups};
  const int per = batch / groups;
  for (int g = 0; g < groups; ++g) {
    TreeSpec::Node n{prefix, {}};
    for (int i = 0; i < per; ++i)
      n.members.push_back(g * per + i);
    t.nodes.push_back(n);
  }
  return t;
}

void print_row(const nlohmann::json& r) {
  auto get = [&](const char* k) { return r.contains(k) ? r[k].get<double>() : std::nan(""); };
  std::printf("%-22s %5d %6d %5d %3d | %9.3f %9.3f %9.3f | %8.3f %6.2f | %5.1f%% %5.1f%%\n",
              r["name"].get<std::string>().c_str(), r["S"].get<int>(), r["prefix"].get<int>(),
              r["batch"].get<int>(), r["groups"].get<int>(), get("flat_ms"), get("flat_shared_ms"),
              get("cascade_ms"), get("floor_ms"), get("ratio"), 100 * get("flat_bw_fraction"),
              100 * get("cascade_bw_fraction"));
  if (r.contains("cascade_ws_ms"))
    std::printf(
        "%-22s   warp-specialised prefix pass: %.3f ms (%d CTAs, chunks of %d tokens; "
        "rel. L2 against the shared grid %.2e)\n",
        "", get("cascade_ws_ms"), r["ws_prefix_ctas"].get<int>(),
        r["ws_node_chunk_tokens"].get<int>(), get("cascade_ws_vs_shared_rel_l2"));
  if (r.contains("prefix_pass_ms"))
    std::printf(
        "%-22s   passes alone: prefix %.3f ms, suffix %.3f ms (4-head CTAs %.3f); "
        "cascade with 1 / 2 / 3 prefix CTAs per SM: %.3f / %.3f / %.3f ms\n",
        "", get("prefix_pass_ms"), get("suffix_pass_ms"), get("suffix_pass_4head_ms"),
        get("cascade_prefix_ctas_per_sm_1_ms"), get("cascade_prefix_ctas_per_sm_2_ms"),
        get("cascade_prefix_ctas_per_sm_3_ms"));
  std::fflush(stdout);
}

}  // namespace

int run_kernel_bench(const KernelBenchOptions& opt) {
  if (!kc::device_available()) {
    std::fprintf(stderr, "bench kernels: %s\n", kc::device_description().c_str());
    return 1;
  }
  std::printf("device: %s\n", kc::device_description().c_str());
  const int iters = std::max(opt.iters, 1);

  // The cases.
  std::vector<TreeSpec> cases;
  for (int s : {16, 256, 1024})
    cases.push_back(two_level("seed-example", 2, 128, 4096, s));
  {
    TreeSpec t{"tree-1K+4x8K", 64, 256, {}, 1024 + 8192, 4};
    TreeSpec::Node root{1024, {}};
    for (int s = 0; s < 64; ++s)
      root.members.push_back(s);
    t.nodes.push_back(root);
    for (int doc = 0; doc < 4; ++doc) {
      TreeSpec::Node n{8192, {}};
      for (int i = 0; i < 16; ++i)
        n.members.push_back(doc * 16 + i);
      t.nodes.push_back(n);
    }
    cases.push_back(t);
  }
  const size_t num_main = cases.size();
  std::vector<int> prefixes = {1024, 4096, 16384, 32768}, batches = {16, 64, 256},
                   suffixes = {128, 1024}, group_counts = {1, 4};
  if (opt.quick) prefixes = {4096}, batches = {64}, suffixes = {1024}, group_counts = {4};
  for (int p : prefixes)
    for (int b : batches)
      for (int s : suffixes)
        for (int g : group_counts)
          cases.push_back(two_level("sweep", g, b, p, s));

  // One pool for all: the largest slotted footprint of any case.
  Pool pool;
  pool.fp8 = opt.fp8_kv;
  const int eb = pool.elem_bytes();
  int64_t pool_blocks = 0;
  for (const TreeSpec& t : cases) {
    const Layout l = lay_out(t);
    pool_blocks =
        std::max({pool_blocks, l.flat_blocks, l.compact_blocks * slots_for(l.compact_blocks, eb),
                  l.flat_blocks * std::min<int64_t>(slots_for(l.flat_blocks, eb), 2)});
  }
  // >= 4 GiB: the bandwidth measurement copies 2 GiB within the pool.
  pool_blocks = std::max<int64_t>(pool_blocks, (4ll << 30) / (kBlockElems * 2 * eb));
  pool.blocks = pool_blocks;
  pool.buf = kc::DeviceBuffer(size_t(pool_blocks) * kBlockElems * 2 * eb);
  std::printf("KV pool: %.1f GiB%s\n", pool.buf.bytes() / double(1ull << 30),
              pool.fp8 ? " of E4M3 codes (scales 1), bf16 queries" : " of fp16");
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  // Copy bandwidth: 2 GiB device-to-device, bytes read + written.
  double bw = 0;
  {
    const size_t n = 2ull << 30;
    char* base = static_cast<char*>(pool.buf.data());
    BENCH_CHECK(kc::fill_random(base, n / 2, kc::KvDtype::kF16, 7, 1.0f, stream));
    cudaEvent_t a, b;
    BENCH_CHECK(cudaEventCreate(&a));
    BENCH_CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < 3 + std::max(iters, 10); ++i) {
      BENCH_CHECK(cudaEventRecord(a, stream));
      BENCH_CHECK(cudaMemcpyAsync(base + n, base, n, cudaMemcpyDeviceToDevice, stream));
      BENCH_CHECK(cudaEventRecord(b, stream));
      BENCH_CHECK(cudaEventSynchronize(b));
      float t = 0;
      BENCH_CHECK(cudaEventElapsedTime(&t, a, b));
      if (i >= 3) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    bw = 2.0 * n / (ms[ms.size() / 2] * 1e-3);
    std::printf("copy bandwidth: %.0f GB/s (cudaMemcpy D2D of 2 GiB, read + write)\n", bw / 1e9);
  }
  // Random KV everywhere (|x| < 1): never zeros. Codes: random bf16 rows of one token's K+V
  // (2048 values) quantized per row (finite codes only), 256 MiB of rows at a time.
  if (pool.fp8) {
    constexpr int kDim = 2048;
    const int64_t rows = int64_t(pool.buf.bytes()) / kDim;
    const int64_t chunk = (int64_t{128} << 20) / kDim;  // rows of a 256 MiB bf16 chunk
    kc::DeviceBuffer src(size_t(chunk) * kDim * 2), scales(size_t(chunk) * 4);
    for (int64_t r = 0; r < rows; r += chunk) {
      const int n = static_cast<int>(std::min(chunk, rows - r));
      BENCH_CHECK(
          kc::fill_random(src.data(), size_t(n) * kDim, kc::KvDtype::kBF16, 99 + r, 1.0f, stream));
      BENCH_CHECK(kc::quantize_rows_fp8(src.data(), kDim, n, kDim,
                                        static_cast<char*>(pool.buf.data()) + r * kDim,
                                        scales.as<float>(), {n, 1}, stream));
    }
  } else {
    BENCH_CHECK(kc::fill_random(pool.buf.data(), pool.buf.bytes() / 2, kc::KvDtype::kF16, 99, 1.0f,
                                stream));
  }
  BENCH_CHECK(cudaStreamSynchronize(stream));

  std::printf("\n%-22s %5s %6s %5s %3s | %9s %9s %9s | %8s %6s | %6s %6s\n", "case", "S", "prefix",
              "batch", "grp", "flat_ms", "shared_ms", "casc_ms", "floor_ms", "ratio", "flatBW",
              "cascBW");
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < cases.size(); ++i) {
    if (opt.only >= 0 && static_cast<size_t>(opt.only) != i) continue;
    if (opt.prefix_only) cases[i].suffix = 0;
    nlohmann::json r = run_case(cases[i], pool, bw, iters, i < num_main, opt.cascade_only, stream);
    print_row(r);
    rows.push_back(r);
  }
  BENCH_CHECK(cudaStreamDestroy(stream));

  nlohmann::json doc;
  doc["device"] = kc::device_description();
  doc["copy_GBps"] = bw / 1e9;
  doc["layers"] = kLayers;
  doc["shape"] = {{"num_q_heads", kShape.num_q_heads},
                  {"num_kv_heads", kShape.num_kv_heads},
                  {"head_dim", kShape.head_dim},
                  {"block_size", kShape.block_size},
                  {"dtype", pool.fp8 ? "fp8 e4m3 KV, bf16 q" : "fp16"}};
  doc["iters"] = iters;
  doc["timing"] = "median of CUDA-graph replays of 32 layer launches, events, 3 warm-up replays";
  doc["bytes"] = "KV bytes of all 32 layers: flat = sum(context), cascade = nodes + suffixes";
  doc["rows"] = rows;
  if (!opt.out_json.empty()) {
    std::ofstream f(opt.out_json);
    f << doc.dump(1) << "\n";
    std::printf("\nwrote %s\n", opt.out_json.c_str());
  }
  return 0;
}

}  // namespace kvc::bench
