// The collectives tensor parallelism needs between the ranks of one replica: an all-reduce (sum)
// after the row-parallel projections and an all-gather of the vocab-parallel logits. Every rank
// calls the same collectives in the same order (the ranks run one forward in lockstep). Here the
// in-process group of the CPU backend's ranks (one thread each); the GPU's is NCCL's, on the
// same interface.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace kvc {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  // data[0, n) becomes the sum over the ranks of theirs, the same bits on every rank.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  // out[r * n, (r + 1) * n) becomes rank r's in[0, n), on every rank. out holds size() * n.
  virtual void all_gather(const float* in, int64_t n, float* out) = 0;
};

// `size` communicators of one group in this process, rank i at [i]: each used by one thread.
// Sums run in rank order on every rank, so every rank gets the same bits (and the same as a
// single rank adding the partial sums in rank order).
std::vector<std::unique_ptr<Communicator>> make_local_group(int32_t size);

}  // namespace kvc
