// The KV cache's block moves (kernels/cuda/ops.h): copy-on-write copies within the cache and the
// host tier's offloads and loads, in order.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <unordered_set>

#include "kernels/cuda/ops.h"
#include "kernels/fp8_rule.h"

namespace kvc::kernels::cuda {
namespace {

#include "kernels/cuda/ops_common.cuh"

// One (move, cache) pair per CTA: blockIdx.x the move, blockIdx.y the layer's K or V.
template <typename U>
__global__ void move_blocks_kernel(unsigned char* device, int64_t device_cache_units,
                                   unsigned char* host, int64_t host_cache_units,
                                   int64_t block_units, const int32_t* moves) {
  const int32_t kind = moves[3 * blockIdx.x], block = moves[3 * blockIdx.x + 1],
                other = moves[3 * blockIdx.x + 2];
  U* d = reinterpret_cast<U*>(device) + blockIdx.y * device_cache_units;
  U* h = reinterpret_cast<U*>(host) + blockIdx.y * host_cache_units;
  const U* src = kind == 0 ? d + block * block_units
                           : (kind == 1 ? h + other * block_units : d + other * block_units);
  U* dst = kind == 0 ? h + other * block_units : d + block * block_units;
  if (src == dst) return;
  for (int64_t i = threadIdx.x; i < block_units; i += blockDim.x)
    dst[i] = src[i];
}

}  // namespace

cudaError_t move_blocks(void* caches, const KvCacheLayout& layout, void* host_caches,
                        const KvCacheLayout& host_layout, const int32_t* moves,
                        const int32_t* host_moves, int n, cudaStream_t stream) {
  // Arguments first (nothing to move is no excuse for nonsense); the grid's y is each layer's K
  // and V (at most 65,535).
  if (n < 0 || layout.num_layers < 0 || layout.num_layers > 65535 / 2) return cudaErrorInvalidValue;
  if (n == 0 || layout.num_layers == 0) return cudaSuccess;
  // Something to move: the cache and both copies of the moves (the host's is read here).
  if (caches == nullptr || moves == nullptr || host_moves == nullptr) return cudaErrorInvalidValue;
  // Offloads and loads need a host tier laid out as the cache (its slots as blocks).
  const bool tier = host_caches != nullptr;
  if (tier && (host_layout.num_layers != layout.num_layers ||
               host_layout.block_elements() != layout.block_elements() ||
               host_layout.element_bytes() != layout.element_bytes())) {
    return cudaErrorInvalidValue;
  }
  const int32_t slots = tier ? host_layout.num_blocks : 0;
  const int64_t block = layout.block_elements() * layout.element_bytes();  // bytes
  const int64_t cache = layout.cache_elements() * layout.element_bytes();
  const int64_t host_cache = tier ? host_layout.cache_elements() * host_layout.element_bytes() : 0;
  const bool wide = block % 16 == 0 && aligned16(caches) && aligned16(host_caches);
  auto* dev = static_cast<unsigned char*>(caches);
  auto* host = static_cast<unsigned char*>(host_caches);
  auto launch = [&](int first, int count) {
    const dim3 grid(static_cast<unsigned>(count), static_cast<unsigned>(2 * layout.num_layers));
    const int32_t* m = moves + 3 * int64_t{first};
    if (wide) {
      move_blocks_kernel<uint4><<<grid, threads_for(block / 16), 0, stream>>>(
          dev, cache / 16, host, host_cache / 16, block / 16, m);
    } else {
      move_blocks_kernel<unsigned char>
          <<<grid, threads_for(block), 0, stream>>>(dev, cache, host, host_cache, block, m);
    }
  };
  // Every move in range first: a bad one would write outside the caches.
  for (int i = 0; i < n; ++i) {
    const int32_t kind = host_moves[3 * i], block_id = host_moves[3 * i + 1],
                  other = host_moves[3 * i + 2];
    const int32_t others = kind == 2 ? layout.num_blocks : slots;
    if (kind < 0 || kind > 2 || block_id < 0 || block_id >= layout.num_blocks || other < 0 ||
        other >= others) {
      return cudaErrorInvalidValue;
    }
  }
  // Runs of moves go as one launch while none writes what another of the run reads or writes
  // (keys: block b, slot -1 - s); reads of one source together are fine (a fork's copies).
  std::unordered_set<int64_t> read, written;
  int first = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t kind = host_moves[3 * i], block_id = host_moves[3 * i + 1],
                  other = host_moves[3 * i + 2];
    const int64_t slot_key = -1 - int64_t{other};
    const int64_t src = kind == 0 ? block_id : (kind == 1 ? slot_key : other);
    const int64_t dst = kind == 0 ? slot_key : block_id;
    if (written.contains(src) || written.contains(dst) || read.contains(dst)) {
      launch(first, i - first);
      read.clear();
      written.clear();
      first = i;
    }
    read.insert(src);
    written.insert(dst);
  }
  launch(first, n - first);
  return cudaGetLastError();
}

}  // namespace kvc::kernels::cuda
