#include "kernels/cuda/sampling.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

namespace kvc::kernels::cuda {
namespace {

namespace fp = sampling::fp;
using sampling::Cutoff;
using sampling::SampleParams;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBuckets = 256;   // 8 bits of the key per radix pass
constexpr int kListCap = 4096;  // candidates kept in shared memory
constexpr unsigned kFull = 0xffffffffu;
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Smem {
  uint64_t warp_hist[kWarps][kBuckets];  // per-warp weight histograms of a radix pass
  uint64_t lane_weight[kWarps][32];      // a warp's weights, summed by each bucket's leader lane
  uint64_t hist[kBuckets];               // the pass's histogram (summed over warps)
  uint32_t count[kBuckets];              // participants per bucket
  float list_x[kListCap];                // candidates moved out of the row
  int32_t list_id[kListCap];
  int32_t list_n;
  // One pass's choice (written by warp 0).
  int32_t sel_found;
  uint32_t sel_bucket;
  uint32_t sel_count_above;
  uint64_t sel_above;
  uint64_t sel_target;
  // Per-warp partials of block reductions.
  float red_v[4][kWarps];
  int32_t red_i[2][kWarps];
};

// Where a row's tokens are read from: the logits row, or the candidate list in shared memory.
struct Source {
  const float* row;
  int n;
  bool vec;   // the row is 16-byte aligned: float4 loads
  bool list;  // read Smem::list_* instead of the row
};

// Calls f(x, id, valid) for every token of a logits row of n tokens (float4 loads when vec).
// Every lane of a warp makes the same calls (valid false past the end), so f may use warp
// collectives.
template <class F>
__device__ __forceinline__ void for_each_in_row(const float* row, int n, bool vec, F&& f) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = (n + 3) >> 2;
  for (int base = warp * 32; base < chunks; base += kThreads) {
    const int c = base + lane;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (c < chunks) {
      if (vec && 4 * c + 4 <= n) {
        const float4 q = __ldg(reinterpret_cast<const float4*>(row) + c);
        v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (4 * c + j < n) v[j] = row[4 * c + j];
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
      f(v[j], 4 * c + j, c < chunks && 4 * c + j < n);
  }
}

// The same for every token of src: the row, or the candidate list.
template <class F>
__device__ __forceinline__ void for_each(const Smem& s, const Source& src, F&& f) {
  if (!src.list) return for_each_in_row(src.row, src.n, src.vec, f);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n = s.list_n;
  for (int base = warp * 32; base < n; base += kThreads) {
    const int i = base + lane;
    const bool valid = i < n;
    f(valid ? s.list_x[i] : 0.0f, valid ? s.list_id[i] : 0, valid);
  }
}

// ---- reductions -----------------------------------------------------------------------------

__device__ __forceinline__ void warp_best(float& v, int32_t& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, o);
    const int32_t oi = __shfl_xor_sync(kFull, i, o);
    if (sampling::better(ov, oi, v, i)) v = ov, i = oi;
  }
}

// (m, s) summarises sum(exp(x)) as s * exp(m); m = -inf, s = 0 is empty.
__device__ __forceinline__ void lse_merge(float& m, float& s, float om, float os) {
  const float nm = fmaxf(m, om);
  if (nm == -kInf) return;
  s = s * __expf(m - nm) + os * __expf(om - nm);
  m = nm;
}

// The best (value, id) of the block, in every thread.
__device__ void block_best(Smem& s, float& v, int32_t& i) {
  warp_best(v, i);
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) s.red_v[0][warp] = v, s.red_i[0][warp] = i;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) {
    if (sampling::better(s.red_v[0][w], s.red_i[0][w], v, i)) v = s.red_v[0][w], i = s.red_i[0][w];
  }
  __syncthreads();
}

// The sum of v over the block, in every thread.
__device__ float block_sum(Smem& s, float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(kFull, v, o);
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) s.red_v[0][warp] = v;
  __syncthreads();
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w)
    sum += s.red_v[0][w];
  __syncthreads();
  return sum;
}

// ---- radix select ---------------------------------------------------------------------------

// Adds w to bucket `digit` of this warp's histogram for the lanes with `in`: lanes of one digit
// are summed by their lowest lane, so no two lanes write one address.
__device__ __forceinline__ void add_to_histogram(Smem& s, bool in, uint32_t digit, uint64_t w) {
  if (!__any_sync(kFull, in)) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const unsigned group = __match_any_sync(kFull, in ? digit : 0x100u);
  s.lane_weight[warp][lane] = w;
  __syncwarp();
  if (in && lane == __ffs(group) - 1) {
    uint64_t sum = 0;
    for (unsigned m = group; m != 0; m &= m - 1)
      sum += s.lane_weight[warp][__ffs(m) - 1];
    s.warp_hist[warp][digit] += sum;
    atomicAdd(&s.count[digit], static_cast<unsigned>(__popc(group)));
  }
  __syncwarp();
}

// Appends (x, id) of the lanes with `keep` to the candidate list (in no fixed order: everything
// that reads the list is order-independent).
__device__ __forceinline__ void append(Smem& s, bool keep, float x, int32_t id) {
  const unsigned who = __ballot_sync(kFull, keep);
  if (who == 0) return;
  const int lane = threadIdx.x & 31;
  int base = 0;
  if (lane == 0) base = atomicAdd(&s.list_n, __popc(who));
  base = __shfl_sync(kFull, base, 0);
  if (keep) {
    const int i = base + __popc(who & ((1u << lane) - 1));
    if (i < kListCap) s.list_x[i] = x, s.list_id[i] = id;
  }
}

// Warp 0: the bucket (highest first) where the cumulative weight reaches rem. With
// from_top_p, rem is first set to the top-p target of the histogram's total (0 when empty).
__device__ void choose_bucket(Smem& s, uint64_t rem, bool from_top_p, float top_p) {
  const int lane = threadIdx.x;
  uint64_t w_local = 0;
  uint32_t c_local = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    w_local += s.hist[kBuckets - 1 - 8 * lane - j];
    c_local += s.count[kBuckets - 1 - 8 * lane - j];
  }
  uint64_t w_incl = w_local;
  uint32_t c_incl = c_local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint64_t w = __shfl_up_sync(kFull, w_incl, o);
    const uint32_t c = __shfl_up_sync(kFull, c_incl, o);
    if (lane >= o) w_incl += w, c_incl += c;
  }
  if (from_top_p) {
    const uint64_t total = __shfl_sync(kFull, w_incl, 31);
    rem = total == 0 ? 0 : sampling::top_p_target(top_p, total);
    if (lane == 0) s.sel_target = rem;
  }
  const uint64_t w_excl = w_incl - w_local;
  const bool here = rem != 0 && w_excl < rem && rem <= w_incl;
  const unsigned who = __ballot_sync(kFull, here);
  if (lane == 0) s.sel_found = who != 0, s.sel_bucket = 0, s.sel_above = 0, s.sel_count_above = 0;
  __syncwarp();
  if (here) {
    uint64_t w = w_excl;
    uint32_t c = c_incl - c_local;
    for (int j = 0; j < 8; ++j) {
      const int b = kBuckets - 1 - 8 * lane - j;
      if (rem <= w + s.hist[b]) {
        s.sel_bucket = b, s.sel_above = w, s.sel_count_above = c;
        break;
      }
      w += s.hist[b];
      c += s.count[b];
    }
  }
}

struct Select {
  bool found = false;
  uint32_t key = 0;       // K
  uint64_t rem = 0;       // weight still needed at K: target - W(key > K), in [1, W(key == K)]
  uint32_t count_at = 0;  // participants with key == K
};

// Weighted radix select over the participants of src (tokens with weight_of(x, id, key) > 0,
// key = key_of(x, id)): the key K with W(key > K) < target <= W(key >= K). from_top_p: the target
// is top_p_target(top_p, total weight) instead, and nothing is found when the total is 0. Four
// passes of 8 bits from the top. may_compact: once at most kListCap participants can have a key
// at or above the chosen prefix (count_bound bounds them all before the first pass), the next
// pass also copies those into the list and src reads the list from then on.
template <class KeyOf, class WeightOf>
__device__ Select radix_select(Smem& s, Source& src, KeyOf key_of, WeightOf weight_of,
                               uint64_t target, bool from_top_p, float top_p, int64_t count_bound,
                               bool may_compact) {
  Select r;
  uint32_t prefix = 0;
  uint64_t rem = target;
  int64_t count_ge = count_bound;  // participants with key >= prefix (a bound before pass 1)
  int64_t count_above = 0;         // participants above the prefix's range
  for (int shift = 24; shift >= 0; shift -= 8) {
    const uint32_t hi_mask = shift == 24 ? 0u : ~0u << (shift + 8);
    const bool compact = may_compact && !src.list && count_ge <= kListCap;
    for (int i = threadIdx.x; i < kWarps * kBuckets; i += kThreads)
      (&s.warp_hist[0][0])[i] = 0;
    for (int i = threadIdx.x; i < kBuckets; i += kThreads)
      s.count[i] = 0;
    if (compact && threadIdx.x == 0) s.list_n = 0;
    __syncthreads();
    for_each(s, src, [&](float x, int32_t id, bool valid) {
      uint32_t key = 0;
      uint64_t w = 0;
      if (valid) {
        key = key_of(x, id);
        if (compact ? key >= prefix : (key & hi_mask) == prefix) w = weight_of(x, id, key);
      }
      if (compact) append(s, w != 0, x, id);
      add_to_histogram(s, w != 0 && (key & hi_mask) == prefix, (key >> shift) & 0xFFu, w);
    });
    __syncthreads();
    for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
      uint64_t sum = 0;
      for (int w = 0; w < kWarps; ++w)
        sum += s.warp_hist[w][b];
      s.hist[b] = sum;
    }
    __syncthreads();
    if (threadIdx.x < 32) choose_bucket(s, rem, from_top_p && shift == 24, top_p);
    __syncthreads();
    const bool found = s.sel_found != 0;
    const uint32_t b = s.sel_bucket;
    const uint64_t above = s.sel_above;
    const int64_t c_above = s.sel_count_above;
    const uint32_t c_at = s.count[b];
    if (from_top_p && shift == 24) rem = s.sel_target;
    __syncthreads();       // the next pass clears what was just read
    if (!found) return r;  // (a list just filled is dropped: src stays what it was)
    if (compact) src.list = true;
    rem -= above;
    count_above += c_above;
    count_ge = count_above + c_at;
    prefix |= b << shift;
    r.count_at = c_at;
  }
  r.found = true;
  r.key = prefix;
  r.rem = rem;
  return r;
}

struct LogitKey {
  __device__ uint32_t operator()(float x, int32_t) const { return sampling::order_key(x); }
};

// The need-th smallest id (need >= 1) among the tokens with order key `key` and id_ok(id).
template <class IdOk>
__device__ int32_t nth_id(Smem& s, Source& src, uint32_t key, IdOk id_ok, uint64_t need) {
  const Select r = radix_select(
      s, src, [](float, int32_t id) { return ~static_cast<uint32_t>(id); },
      [key, id_ok](float x, int32_t id, uint32_t) -> uint64_t {
        return sampling::order_key(x) == key && id_ok(id) ? 1 : 0;
      },
      need, false, 0.0f, std::numeric_limits<int64_t>::max(), false);
  return r.found ? static_cast<int32_t>(~r.key) : INT32_MAX;
}

// The candidates' cutoff of a top-k / top-p row whose largest logit is max_logit.
__device__ Cutoff find_cutoff(Smem& s, Source& src, const SampleParams& p, float max_logit,
                              float inv_t) {
  Cutoff c;
  if (p.top_k > 0 && p.top_k < src.n) {
    // Every token takes part (NaN has key 0, last); the top_k-th in the order is the cutoff.
    const Select r = radix_select(
        s, src, LogitKey{}, [](float, int32_t, uint32_t) -> uint64_t { return 1; },
        static_cast<uint64_t>(p.top_k), false, 0.0f, src.n, true);
    if (r.found) {
      c = {r.key, INT32_MAX};
      if (r.rem < r.count_at)
        c.id = nth_id(
            s, src, r.key, [](int32_t) { return true; }, r.rem);
    }
  }
  if (p.top_p < 1.0f) {
    // Participants: the top-k candidates of positive mass (the others follow them in the order).
    const Cutoff ck = c;
    const Select r = radix_select(
        s, src, LogitKey{},
        [ck, max_logit, inv_t](float x, int32_t id, uint32_t key) -> uint64_t {
          return sampling::within(key, id, ck) ? sampling::mass(x, max_logit, inv_t) : 0;
        },
        0, true, p.top_p, p.top_k > 0 && p.top_k < src.n ? p.top_k : src.n, true);
    if (r.found) {
      // Tokens at K share one mass q: the cutoff is the ceil(rem / q)-th of them by id.
      const uint64_t q = sampling::mass(sampling::key_logit(r.key), max_logit, inv_t);
      const uint64_t need = (r.rem + q - 1) / q;
      const uint32_t key = r.key;
      c = {key, key == ck.key ? ck.id : INT32_MAX};
      if (need < r.count_at) {
        c.id = nth_id(
            s, src, key, [key, ck](int32_t id) { return sampling::within(key, id, ck); }, need);
      }
    }
  }
  return c;
}

// Gumbel-max over the tokens of src within c (INT32_MAX when none is choosable).
__device__ int32_t race(Smem& s, const Source& src, Cutoff c, float inv_t, uint64_t key) {
  float best = -kInf;
  int32_t token = INT32_MAX;
  for_each(s, src, [&](float x, int32_t id, bool valid) {
    if (!valid || x != x || !sampling::within(sampling::order_key(x), id, c)) return;
    if (fp::add(fp::mul(x, inv_t), sampling::kGumbelMax) < best) return;  // cannot win
    const float sc = sampling::score(x, inv_t, key, id);
    if (sampling::better(sc, id, best, token)) best = sc, token = id;
  });
  block_best(s, best, token);
  return token;
}

struct SampleArgs {
  const float* logits;
  int64_t stride;
  int vocab;
  bool vec;
  const SampleParams* params;
  int32_t* tokens;
  float* logprobs;
  sampling::LogprobNorm* norms;
};

// One CTA per row. The first pass over the logits gives the argmax, the log-sum-exp and, for a
// row without top-k / top-p, the Gumbel race; other rows find their cutoff and race after it.
// (512, 1): ~90 registers and no spills (without the 1, ptxas capped it at 64 and spilled).
__global__ void __launch_bounds__(kThreads, 1) sample_kernel(const SampleArgs a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Smem& s = *reinterpret_cast<Smem*>(smem_raw);
  const int64_t row = blockIdx.x;
  const SampleParams p = a.params[row];
  Source src{a.logits + row * a.stride, a.vocab, a.vec, false};
  const bool greedy = !(p.temperature > 0.0f) || p.top_k == 1;
  const bool cut = !greedy && ((p.top_k > 0 && p.top_k < a.vocab) || p.top_p < 1.0f);
  const bool race_now = !greedy && !cut;
  const float inv_t = greedy ? 0.0f : sampling::inverse_temperature(p.temperature);
  const uint64_t key = sampling::row_key(p.seed, p.sibling, p.position);

  float max_x = -kInf, m = -kInf, sum = 0.0f, best = -kInf;
  int32_t argmax = INT32_MAX, token = INT32_MAX;
  for_each(s, src, [&](float x, int32_t id, bool valid) {
    if (!valid || x != x) return;
    if (sampling::better(x, id, max_x, argmax)) max_x = x, argmax = id;
    if (x == -kInf) {
    } else if (x > m) {
      sum = sum * __expf(m - x) + 1.0f;
      m = x;
    } else {
      sum += __expf(x - m);
    }
    if (race_now && !(fp::add(fp::mul(x, inv_t), sampling::kGumbelMax) < best)) {
      const float sc = sampling::score(x, inv_t, key, id);
      if (sampling::better(sc, id, best, token)) best = sc, token = id;
    }
  });
  warp_best(max_x, argmax);
  warp_best(best, token);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(kFull, m, o), os = __shfl_xor_sync(kFull, sum, o);
    lse_merge(m, sum, om, os);
  }
  const int warp = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    s.red_v[0][warp] = max_x, s.red_i[0][warp] = argmax;
    s.red_v[1][warp] = best, s.red_i[1][warp] = token;
    s.red_v[2][warp] = m, s.red_v[3][warp] = sum;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) {
    if (sampling::better(s.red_v[0][w], s.red_i[0][w], max_x, argmax)) {
      max_x = s.red_v[0][w], argmax = s.red_i[0][w];
    }
    if (sampling::better(s.red_v[1][w], s.red_i[1][w], best, token)) {
      best = s.red_v[1][w], token = s.red_i[1][w];
    }
  }
  m = s.red_v[2][0], sum = s.red_v[3][0];
  for (int w = 1; w < kWarps; ++w)
    lse_merge(m, sum, s.red_v[2][w], s.red_v[3][w]);
  __syncthreads();

  Cutoff c;
  if (greedy) {
    token = argmax;
  } else if (cut) {
    c = find_cutoff(s, src, p, max_x, inv_t);  // may move src to the list
    token = race(s, src, c, inv_t, key);
  }
  if (token == INT32_MAX) token = 0;
  // The row's logprob normalizer (sampling::LogprobNorm).
  const bool processed = sampling::processed_logprobs(p);
  sampling::LogprobNorm norm;
  if (!processed) {
    norm.lse = m == -kInf ? -kInf : m + logf(sum);
  } else if (greedy) {
    norm.scale = 0.0f;
    if (argmax != INT32_MAX) norm.cut = {sampling::order_key(max_x), argmax};
  } else {
    // log-sum-exp of x / T over the candidates (src holds every one of them).
    norm.scale = inv_t;
    norm.cut = c;
    const float top = max_x * inv_t;
    float part = 0.0f;
    for_each(s, src, [&](float x, int32_t id, bool valid) {
      if (valid && x == x && sampling::within(sampling::order_key(x), id, c))
        part += __expf(x * inv_t - top);
    });
    norm.lse = top + logf(block_sum(s, part));
  }
  if (threadIdx.x == 0) {
    a.tokens[row] = token;
    if (a.logprobs != nullptr) {
      a.logprobs[row] =
          processed ? sampling::logprob(norm, src.row[token], token) : src.row[token] - norm.lse;
    }
    if (a.norms != nullptr) a.norms[row] = norm;
  }
}

// ---- top logprobs ---------------------------------------------------------------------------

constexpr int kTopK = sampling::kMaxTopLogprobs;

struct TopArgs {
  const float* logits;
  int64_t stride;
  int vocab;
  bool vec;
  const SampleParams* params;
  const sampling::LogprobNorm* norms;
  int32_t* ids;     // [rows, kTopK]
  float* logprobs;  // [rows, kTopK]
};

// One CTA per row: each thread keeps the K best of its share of the row, sorted, in registers
// (fully unrolled, constant indices; K >= every row's k: 5 or kTopK, so the common k <= 5 inserts
// into a short list); the row's k best are then k rounds of a block argmax over the threads'
// heads, the winner's thread popping its head.
template <int K>
__global__ void __launch_bounds__(kThreads) top_logprobs_kernel(const TopArgs a) {
  __shared__ float red_v[kWarps];
  __shared__ int32_t red_i[kWarps];
  const int64_t row = blockIdx.x;
  const int k = min(sampling::top_logprobs(a.params[row]), K);
  int32_t* out_ids = a.ids + row * kTopK;
  float* out_lps = a.logprobs + row * kTopK;
  if (threadIdx.x < kTopK) out_ids[threadIdx.x] = -1, out_lps[threadIdx.x] = -kInf;
  if (k == 0) return;
  const float* x_row = a.logits + row * a.stride;
  float tv[K];
  int32_t ti[K];
#pragma unroll
  for (int j = 0; j < K; ++j)
    tv[j] = -kInf, ti[j] = INT32_MAX;
  for_each_in_row(x_row, a.vocab, a.vec, [&](float x, int32_t id, bool valid) {
    if (!valid || x != x || !sampling::better(x, id, tv[K - 1], ti[K - 1])) return;
    bool placed = false;
#pragma unroll
    for (int j = K - 1; j > 0; --j) {
      if (placed) continue;
      if (sampling::better(x, id, tv[j - 1], ti[j - 1])) {
        tv[j] = tv[j - 1], ti[j] = ti[j - 1];
      } else {
        tv[j] = x, ti[j] = id, placed = true;
      }
    }
    if (!placed) tv[0] = x, ti[0] = id;
  });
  const sampling::LogprobNorm norm = a.norms[row];
  const int warp = threadIdx.x >> 5;
  for (int r = 0; r < k; ++r) {
    float v = tv[0];
    int32_t i = ti[0];
    warp_best(v, i);
    if ((threadIdx.x & 31) == 0) red_v[warp] = v, red_i[warp] = i;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w)
      if (sampling::better(red_v[w], red_i[w], v, i)) v = red_v[w], i = red_i[w];
    __syncthreads();
    if (i == INT32_MAX) break;  // the row has fewer than k numbers
    if (ti[0] == i) {           // ids are unique: one thread pops
#pragma unroll
      for (int j = 0; j < K - 1; ++j)
        tv[j] = tv[j + 1], ti[j] = ti[j + 1];
      tv[K - 1] = -kInf, ti[K - 1] = INT32_MAX;
    }
    if (threadIdx.x == 0) out_ids[r] = i, out_lps[r] = sampling::logprob(norm, v, i);
  }
}

}  // namespace

cudaError_t sample(const float* logits, int rows, int vocab, int64_t vocab_stride,
                   const SampleParams* params, int32_t* tokens, float* logprobs,
                   sampling::LogprobNorm* norms, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || vocab < 1 || vocab_stride < vocab) return cudaErrorInvalidValue;
  static const cudaError_t attr = cudaFuncSetAttribute(
      sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem));
  if (attr != cudaSuccess) return attr;
  const bool vec = vocab_stride % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  const SampleArgs args{logits, vocab_stride, vocab, vec, params, tokens, logprobs, norms};
  sample_kernel<<<rows, kThreads, sizeof(Smem), stream>>>(args);
  return cudaGetLastError();
}

cudaError_t top_logprobs(const float* logits, int rows, int vocab, int64_t vocab_stride,
                         const SampleParams* params, const sampling::LogprobNorm* norms,
                         int32_t* ids, float* logprobs, int max_k, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (rows < 0 || vocab < 1 || vocab_stride < vocab) return cudaErrorInvalidValue;
  const bool vec = vocab_stride % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  const TopArgs args{logits, vocab_stride, vocab, vec, params, norms, ids, logprobs};
  if (max_k <= 5) {
    top_logprobs_kernel<5><<<rows, kThreads, 0, stream>>>(args);
  } else {
    top_logprobs_kernel<kTopK><<<rows, kThreads, 0, stream>>>(args);
  }
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
