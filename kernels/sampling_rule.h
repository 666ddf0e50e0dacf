// The sampling rule shared by the CPU and CUDA samplers (kernels/cpu/sampling.h,
// kernels/cuda/sampling.h): per-row parameters, the order of tokens, the fixed-point probability
// mass top-p cuts on, and the per-token Gumbel noise.
//
// The rule, for one row of logits x[0, vocab):
//   - greedy (temperature <= 0 or top_k == 1): argmax x, lowest id on ties;
//   - otherwise the candidates are a prefix of the token order (logit descending, id ascending):
//     the first top_k tokens (0 < top_k < vocab), then, if top_p < 1, the shortest prefix of
//     those whose mass (below) reaches max(1, ceil(top_p * their total mass)). The token is the
//     candidate with the largest score x / T + g(seed, sibling, position, token) (Gumbel-max:
//     an exact draw from softmax(x / T) restricted to the candidates), lowest id on ties;
//   - NaN logits are never chosen (they sort last); a row without a choosable token gives 0.
// Randomness is a pure function of (seed, sibling, position, token): a preempted sibling that is
// recomputed draws the same tokens, whatever batch it lands in.
//
// Every function here is plain IEEE single precision with its own log and exp and no operation
// a compiler may fuse or reorder (device code uses the _rn intrinsics; the CPU file is compiled
// with -ffp-contract=off), so both samplers compute the same bits and pick the same token.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVC_SAMPLING_FN __host__ __device__ inline
#else
#define KVC_SAMPLING_FN inline
#endif

namespace kvc::kernels::sampling {

// One row's parameters (an array of these lives on the device for the CUDA sampler).
struct SampleParams {
  uint64_t seed = 0;
  float temperature = 1.0f;  // <= 0: greedy
  float top_p = 1.0f;        // >= 1: off
  int32_t top_k = 0;         // <= 0 or >= vocab: off; 1: greedy
  int32_t sibling = 0;
  int32_t position = 0;
  // Logprobs the row reports besides its chosen token's: the top_logprobs() most likely tokens
  // (0-kMaxTopLogprobs), of the raw distribution or, with kProcessedLogprobs, of the one the
  // token was drawn from (logprob_norm).
  int32_t logprobs = 0;
};
static_assert(sizeof(SampleParams) == 32);

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's limit for top_logprobs
inline constexpr int32_t kTopLogprobsMask = 0xFF;
inline constexpr int32_t kProcessedLogprobs = 0x100;
KVC_SAMPLING_FN int top_logprobs(const SampleParams& p) {
  const int k = p.logprobs & kTopLogprobsMask;
  return k < kMaxTopLogprobs ? k : kMaxTopLogprobs;
}
KVC_SAMPLING_FN bool processed_logprobs(const SampleParams& p) {
  return (p.logprobs & kProcessedLogprobs) != 0;
}

// Fixed-point bits of the probability mass: mass(x) = floor(2^40 * exp((x - max) / T)).
inline constexpr int kMassBits = 40;
// Upper bound of the Gumbel noise (the uniform is clamped at 2^-32: g <= -log(2^-32) = 22.18):
// a token with x / T + kGumbelMax below the best score so far cannot win.
inline constexpr float kGumbelMax = 22.25f;

// A prefix of the token order: every token before (key, id) and (key, id) itself. The default
// is every token.
struct Cutoff {
  uint32_t key = 0;
  int32_t id = INT32_MAX;
};

namespace fp {  // single-precision operations that are never contracted into an FMA

KVC_SAMPLING_FN float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
KVC_SAMPLING_FN float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
KVC_SAMPLING_FN float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
KVC_SAMPLING_FN float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
KVC_SAMPLING_FN float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
KVC_SAMPLING_FN float round_even(float a) {  // to the nearest integer, ties to even
#if defined(__CUDA_ARCH__)
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}
KVC_SAMPLING_FN uint32_t bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
KVC_SAMPLING_FN float from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

// log(y) for a positive, normal, finite y: y = 2^e * f with f in [sqrt(1/2), sqrt(2)),
// log f = 2 atanh(s), s = (f - 1) / (f + 1), |s| < 0.172 (series to s^11: error < 1e-10).
KVC_SAMPLING_FN float log_positive(float y) {
  const uint32_t b = bits(y);
  int e = static_cast<int>(b >> 23) - 127;
  float f = from_bits((b & 0x7FFFFFu) | 0x3F800000u);
  if (f > 1.41421356f) {
    f = mul(f, 0.5f);
    e += 1;
  }
  const float s = div(sub(f, 1.0f), add(f, 1.0f));
  const float s2 = mul(s, s);
  float p = 0.0909090909f;  // 1/11
  p = fma(p, s2, 0.111111111f);
  p = fma(p, s2, 0.142857143f);
  p = fma(p, s2, 0.2f);
  p = fma(p, s2, 0.333333333f);
  p = fma(p, s2, 1.0f);
  const float ef = static_cast<float>(e);
  // ln 2 split so that e * ln2_hi is exact.
  return fma(ef, 0.693145751953125f, fma(ef, 1.42860682e-6f, mul(add(s, s), p)));
}

}  // namespace fp

// The token order's key: larger key = earlier; -0 == +0; NaN is 0, below every number.
KVC_SAMPLING_FN uint32_t order_key(float x) {
  if (x != x) return 0;
  const uint32_t b = x == 0.0f ? 0u : fp::bits(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// The logit of a key (inverse of order_key for numbers).
KVC_SAMPLING_FN float key_logit(uint32_t key) {
  return fp::from_bits((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}
KVC_SAMPLING_FN bool within(uint32_t key, int32_t id, Cutoff c) {
  return key > c.key || (key == c.key && id <= c.id);
}
// a before b in argmax order: larger value, then lower id (NaN never before anything).
KVC_SAMPLING_FN bool better(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

KVC_SAMPLING_FN float inverse_temperature(float temperature) {
  return fp::div(1.0f, temperature);
}

// floor(2^kMassBits * exp((x - max_logit) * inv_t)), 0 when that is below 1 (and for -inf, NaN).
// exp: 2^n * e^r with |r| <= ln2 / 2, Taylor to r^7 (error < 1e-8).
KVC_SAMPLING_FN uint64_t mass(float x, float max_logit, float inv_t) {
  const float a = fp::mul(fp::sub(x, max_logit), inv_t);
  if (!(a > -28.0f)) return 0;  // 2^40 * e^-28 < 1; also -inf and NaN

  const float n = fp::round_even(fp::mul(a, 1.44269504f));  // in [-40, 0]
  float r = fp::fma(-n, 0.693145751953125f, a);
  r = fp::fma(-n, 1.42860682e-6f, r);
  float p = 1.98412698e-4f;  // 1/5040
  p = fp::fma(p, r, 1.38888889e-3f);
  p = fp::fma(p, r, 8.33333333e-3f);
  p = fp::fma(p, r, 4.16666667e-2f);
  p = fp::fma(p, r, 0.166666667f);
  p = fp::fma(p, r, 0.5f);
  p = fp::fma(p, r, 1.0f);
  p = fp::fma(p, r, 1.0f);
  const float scale = fp::from_bits(static_cast<uint32_t>(static_cast<int>(n) + kMassBits + 127)
                                    << 23);  // 2^(n + 40), exact
  return static_cast<uint64_t>(fp::mul(p, scale));
}

// The mass top-p keeps: max(1, ceil(top_p * total)). Double arithmetic on both sides.
KVC_SAMPLING_FN uint64_t top_p_target(float top_p, uint64_t total) {
  const double want = static_cast<double>(top_p) * static_cast<double>(total);
#if defined(__CUDA_ARCH__)
  const double t = ceil(want);
#else
  const double t = std::ceil(want);
#endif
  return t < 1.0 ? 1 : static_cast<uint64_t>(t);
}

KVC_SAMPLING_FN uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The row's noise key: a pure function of (seed, sibling, position).
KVC_SAMPLING_FN uint64_t row_key(uint64_t seed, int32_t sibling, int32_t position) {
  return splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint32_t>(sibling)) ^
                    static_cast<uint32_t>(position));
}

// Gumbel noise g = -log(E), E = -log(1 - w) an Exp(1) draw, w = 2^-64 * hash(row_key, token)
// clamped to [2^-32, 1 - 2^-24]. w keeps its relative precision near 0, so E does too (the
// winner's E is small when the row is flat): below 1/4, -log(1 - w) = 2 atanh(w / (2 - w)).
KVC_SAMPLING_FN float gumbel(uint64_t key, int32_t token) {
  const uint64_t h = splitmix64(key ^ static_cast<uint32_t>(token));
  float w = fp::mul(static_cast<float>(h), 0x1p-64f);  // conversion rounds to nearest
  w = w < 0x1p-32f ? 0x1p-32f : (w > 0x1.fffffep-1f ? 0x1.fffffep-1f : w);
  float e;
  if (w < 0.25f) {
    const float s = fp::div(w, fp::sub(2.0f, w));  // < 1/7
    const float s2 = fp::mul(s, s);
    float p = 0.0909090909f;
    p = fp::fma(p, s2, 0.111111111f);
    p = fp::fma(p, s2, 0.142857143f);
    p = fp::fma(p, s2, 0.2f);
    p = fp::fma(p, s2, 0.333333333f);
    p = fp::fma(p, s2, 1.0f);
    e = fp::mul(fp::add(s, s), p);
  } else {
    e = -fp::log_positive(fp::sub(1.0f, w));
  }
  return -fp::log_positive(e);
}

// How a row's logprobs are read off its logits: logprob(x, id) = x * scale - lse for the tokens
// within `cut`, -inf for the others. Raw logprobs (log_softmax of the logits): scale 1, the
// row's log-sum-exp, every token. Processed ones (the distribution the token is drawn from):
// scale 1 / T, the log-sum-exp of x / T over the candidates, cut at the candidates' cutoff; a
// greedy row is a point mass on its argmax (scale 0, lse 0, cut at the argmax).
struct LogprobNorm {
  float scale = 1.0f;
  float lse = 0.0f;
  Cutoff cut;
};

KVC_SAMPLING_FN float logprob(const LogprobNorm& n, float x, int32_t id) {
  if (x != x || !within(order_key(x), id, n.cut)) return -INFINITY;
  return fp::add(fp::sub(fp::mul(x, n.scale), n.lse), 0.0f);  // + 0: a point mass is 0, not -0
}

// The Gumbel-max score of a token.
KVC_SAMPLING_FN float score(float x, float inv_t, uint64_t key, int32_t token) {
  return fp::add(fp::mul(x, inv_t), gumbel(key, token));
}

}  // namespace kvc::kernels::sampling
