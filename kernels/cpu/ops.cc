#include "kernels/cpu/ops.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>

#include "kernels/cpu/parallel.h"

namespace kvc::kernels::cpu {
namespace {

// Output columns per matmul work item: a tile of w (kColTile rows of k floats) stays in L2 while
// every row of x passes over it.
constexpr int kColTile = 16;
// Rows of an elementwise op per work item; smaller inputs run inline.
constexpr int64_t kElemsPerChunk = 1 << 14;

// Dot products of x against four rows of w at once: each load of x feeds four accumulators, and
// eight partial sums per column let the compiler use vector registers. Fixed summation order.
void dot4(const float* x, const float* w0, const float* w1, const float* w2, const float* w3, int k,
          float* y) {
  float a0[8] = {}, a1[8] = {}, a2[8] = {}, a3[8] = {};
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j) {
      const float xv = x[i + j];
      a0[j] += xv * w0[i + j];
      a1[j] += xv * w1[i + j];
      a2[j] += xv * w2[i + j];
      a3[j] += xv * w3[i + j];
    }
  }
  float t[4] = {};
  for (; i < k; ++i) {
    t[0] += x[i] * w0[i];
    t[1] += x[i] * w1[i];
    t[2] += x[i] * w2[i];
    t[3] += x[i] * w3[i];
  }
  auto reduce = [](const float* a) {
    return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7]));
  };
  y[0] = reduce(a0) + t[0];
  y[1] = reduce(a1) + t[1];
  y[2] = reduce(a2) + t[2];
  y[3] = reduce(a3) + t[3];
}

float dot1(const float* x, const float* w, int k) {
  float a[8] = {};
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int j = 0; j < 8; ++j)
      a[j] += x[i + j] * w[i + j];
  }
  float t = 0;
  for (; i < k; ++i)
    t += x[i] * w[i];
  return ((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])) + t;
}

}  // namespace

void matmul(const float* x, const float* w, float* y, int m, int n, int k) {
  const int tiles = (n + kColTile - 1) / kColTile;
  // A work item costs m * kColTile * k multiply-adds; keep items above ~64k of them.
  const int64_t min_chunk =
      std::max<int64_t>(1, 65536 / (static_cast<int64_t>(m) * kColTile * k + 1));
  parallel_for(
      tiles,
      [&](int64_t begin, int64_t end) {
        for (int64_t tile = begin; tile < end; ++tile) {
          const int c0 = static_cast<int>(tile) * kColTile;
          const int c1 = std::min(n, c0 + kColTile);
          for (int r = 0; r < m; ++r) {
            const float* xr = x + static_cast<int64_t>(r) * k;
            float* yr = y + static_cast<int64_t>(r) * n;
            int c = c0;
            for (; c + 4 <= c1; c += 4) {
              const float* wc = w + static_cast<int64_t>(c) * k;
              dot4(xr, wc, wc + k, wc + 2 * static_cast<int64_t>(k),
                   wc + 3 * static_cast<int64_t>(k), k, yr + c);
            }
            for (; c < c1; ++c)
              yr[c] = dot1(xr, w + static_cast<int64_t>(c) * k, k);
          }
        }
      },
      min_chunk);
}

void rms_norm(const float* x, const float* w, float* y, int rows, int dim, float eps) {
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* xr = x + r * dim;
          float* yr = y + r * dim;
          double sum_sq = 0;
          for (int i = 0; i < dim; ++i)
            sum_sq += static_cast<double>(xr[i]) * xr[i];
          const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
          for (int i = 0; i < dim; ++i)
            yr[i] = w[i] * (xr[i] * inv);
        }
      },
      std::max<int64_t>(1, kElemsPerChunk / std::max(dim, 1)));
}

void add_bias(float* y, const float* bias, int rows, int n) {
  for (int r = 0; r < rows; ++r) {
    float* yr = y + int64_t{r} * n;
    for (int i = 0; i < n; ++i)
      yr[i] += bias[i];
  }
}

void qkv_bias_norm(float* qkv, int64_t stride, int rows, int q_heads, int kv_heads, int head_dim,
                   const float* bias, const float* q_norm, const float* k_norm, float eps,
                   StorageType storage) {
  const int heads = q_heads + 2 * kv_heads;
  for (int r = 0; r < rows; ++r) {
    float* row = qkv + r * stride;
    for (int h = 0; h < heads; ++h) {
      float* x = row + int64_t{h} * head_dim;
      const float* w = h < q_heads ? q_norm : h < q_heads + kv_heads ? k_norm : nullptr;
      if (bias == nullptr && w == nullptr) continue;
      if (bias != nullptr) {
        for (int i = 0; i < head_dim; ++i)
          x[i] += bias[int64_t{h} * head_dim + i];
      }
      if (w != nullptr) {
        double sum_sq = 0;
        for (int i = 0; i < head_dim; ++i)
          sum_sq += static_cast<double>(x[i]) * x[i];
        const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / head_dim + eps));
        for (int i = 0; i < head_dim; ++i)
          x[i] = x[i] * inv * w[i];
      }
      round_to(x, head_dim, storage);
    }
  }
}

void rope_inv_freq(int head_dim, const RopeConfig& cfg, double* inv_freq) {
  for (int i = 0; i < head_dim / 2; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(cfg.theta), 2.0 * i / head_dim);
    if (cfg.llama3_scaling) {
      // Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated.
      const double old_len = cfg.original_max_position;
      const double low_freq_wavelen = old_len / cfg.low_freq_factor;
      const double high_freq_wavelen = old_len / cfg.high_freq_factor;
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= cfg.factor;
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth = (old_len / wavelen - cfg.low_freq_factor) /
                              (cfg.high_freq_factor - cfg.low_freq_factor);
        f = (1 - smooth) * f / cfg.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
}

void rope(float* x, const int32_t* positions, int tokens, int heads, int head_dim,
          const RopeConfig& cfg) {
  assert(head_dim % 2 == 0 && head_dim <= 1024);
  const int half = head_dim / 2;
  double inv_freq[512];
  rope_inv_freq(head_dim, cfg, inv_freq);
  parallel_for(
      tokens,
      [&](int64_t begin, int64_t end) {
        float cos_t[512], sin_t[512];
        for (int64_t t = begin; t < end; ++t) {
          for (int i = 0; i < half; ++i) {
            const double angle = positions[t] * inv_freq[i];
            cos_t[i] = static_cast<float>(std::cos(angle));
            sin_t[i] = static_cast<float>(std::sin(angle));
          }
          for (int h = 0; h < heads; ++h) {
            float* xh = x + (t * heads + h) * head_dim;
            for (int i = 0; i < half; ++i) {
              const float a = xh[i];
              const float b = xh[i + half];
              xh[i] = a * cos_t[i] - b * sin_t[i];
              xh[i + half] = b * cos_t[i] + a * sin_t[i];
            }
          }
        }
      },
      std::max<int64_t>(1, kElemsPerChunk / (static_cast<int64_t>(heads) * head_dim + 1)));
}

void silu_mul(const float* gate_up, float* out, int rows, int inter) {
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const float* gate = gate_up + r * 2 * inter;
          const float* up = gate + inter;
          float* o = out + r * inter;
          for (int i = 0; i < inter; ++i)
            o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
        }
      },
      std::max<int64_t>(1, kElemsPerChunk / std::max(inter, 1)));
}

void add_inplace(float* y, const float* x, int64_t n) {
  parallel_for((n + kElemsPerChunk - 1) / kElemsPerChunk,
               [&](int64_t begin, int64_t end) {
                 const int64_t hi = std::min(n, end * kElemsPerChunk);
                 for (int64_t i = begin * kElemsPerChunk; i < hi; ++i)
                   y[i] += x[i];
               },
               4);
}

float round_to(float x, StorageType t) {
  if (t == StorageType::kF32 || !std::isfinite(x)) return x;
  if (t == StorageType::kBF16) {
    const uint32_t u = std::bit_cast<uint32_t>(x);
    return std::bit_cast<float>((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
  }
  // fp16: 11 significant bits down to 2^-14, then a fixed step of 2^-24; 65520 and up round to inf.
  const float a = std::fabs(x);
  if (a >= 65520.0f) return std::copysign(std::numeric_limits<float>::infinity(), x);
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  const float step = std::ldexp(1.0f, std::max(e - 1, -14) - 10);
  return std::copysign(std::nearbyint(a / step) * step, x);  // both scalings are exact
}

void round_to(float* x, int64_t n, StorageType t) {
  for (int64_t i = 0; i < n; ++i)
    x[i] = round_to(x[i], t);
}

void embedding_gather(const float* table, int vocab, int hidden, const int32_t* tokens,
                      int num_tokens, float* out) {
  for (int t = 0; t < num_tokens; ++t) {
    float* o = out + int64_t{t} * hidden;
    if (tokens[t] < 0 || tokens[t] >= vocab) {
      std::fill_n(o, hidden, 0.0f);
    } else {
      std::copy_n(table + int64_t{tokens[t]} * hidden, hidden, o);
    }
  }
}

void add_rms_norm(const float* x, float* residual, bool accumulate, const float* w, float* y,
                  int rows, int dim, float eps) {
  parallel_for(
      rows,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          float* res = residual + r * dim;
          const float* xr = x != nullptr ? x + r * dim : nullptr;
          double sum_sq = 0;
          for (int i = 0; i < dim; ++i) {
            if (xr != nullptr) res[i] = (accumulate ? res[i] : 0.0f) + xr[i];
            sum_sq += static_cast<double>(res[i]) * res[i];
          }
          const float inv = static_cast<float>(1.0 / std::sqrt(sum_sq / dim + eps));
          for (int i = 0; i < dim; ++i)
            y[r * dim + i] = w[i] * (res[i] * inv);
        }
      },
      std::max<int64_t>(1, kElemsPerChunk / std::max(dim, 1)));
}

void kv_append(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
               const int32_t* slots, int tokens, int kv_row, StorageType cache_type, float* k_cache,
               float* v_cache) {
  for (int t = 0; t < tokens; ++t) {
    if (slots[t] < 0) continue;
    const int64_t dst = int64_t{slots[t]} * kv_row;
    for (int i = 0; i < kv_row; ++i) {
      k_cache[dst + i] = round_to(k[t * k_stride + i], cache_type);
      v_cache[dst + i] = round_to(v[t * v_stride + i], cache_type);
    }
  }
}

void gather_vocab_parts(const float* ranks, int num_ranks, int rows, int part, int vocab,
                        float* out) {
  for (int k = 0; k < num_ranks; ++k) {
    const int begin = std::min(vocab, k * part), count = std::min(part, vocab - begin);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(ranks + (int64_t{k} * rows + r) * part, count, out + int64_t{r} * vocab + begin);
    }
  }
}

bool valid_block_move(int32_t kind, int32_t block, int32_t other, int num_blocks,
                      int num_host_blocks) {
  const int others = kind == 2 ? num_blocks : num_host_blocks;
  return kind >= 0 && kind <= 2 && block >= 0 && block < num_blocks && other >= 0 && other < others;
}

bool move_blocks(float* caches, int num_blocks, float* host_caches, int num_host_blocks,
                 int num_layers, int64_t block_elems, const int32_t* moves, int n) {
  // Arguments first, in the CUDA twin's order: the count and the layers decide whether there is
  // anything to do, the sizes matter only then (a tier's slot count only with a tier); then every
  // move in range, since a bad one would write outside the caches.
  if (n < 0 || num_layers < 0) return false;
  if (n == 0 || num_layers == 0) return true;
  const bool tier = host_caches != nullptr;
  if (num_blocks < 0 || block_elems < 0 || (tier && num_host_blocks < 0)) return false;
  if (caches == nullptr || moves == nullptr) return false;
  const int slots = tier ? num_host_blocks : 0;  // no tier: copies only
  for (int64_t i = 0; i < n; ++i) {
    if (!valid_block_move(moves[3 * i], moves[3 * i + 1], moves[3 * i + 2], num_blocks, slots)) {
      return false;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const int32_t kind = moves[3 * i], block = moves[3 * i + 1], other = moves[3 * i + 2];
    for (int64_t cache = 0; cache < 2 * int64_t{num_layers}; ++cache) {
      float* device = caches + cache * num_blocks * block_elems;
      float* host = slots > 0 ? host_caches + cache * num_host_blocks * block_elems : nullptr;
      const float* src = kind == 0 ? device + block * block_elems
                                   : (kind == 1 ? host : device) + other * block_elems;
      float* dst = kind == 0 ? host + other * block_elems : device + block * block_elems;
      if (src != dst) std::memmove(dst, src, static_cast<size_t>(block_elems) * sizeof(float));
    }
  }
  return true;
}

}  // namespace kvc::kernels::cpu
