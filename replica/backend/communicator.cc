#include "replica/backend/communicator.h"

#include <algorithm>
#include <barrier>
#include <cassert>
#include <cstring>

namespace kvc {
namespace {

// What the ranks of a local group share: each collective publishes every rank's buffer, waits
// for all, reads them, and waits again before anyone may reuse its buffer.
struct LocalShared {
  explicit LocalShared(int32_t size)
      : size(size), sync(size), inputs(static_cast<size_t>(size), nullptr) {}
  int32_t size;
  std::barrier<> sync;
  std::vector<const float*> inputs;
};

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalShared> shared, int32_t rank)
      : shared_(std::move(shared)), rank_(rank) {}
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return shared_->size; }

  void all_reduce_sum(float* data, int64_t n) override {
    if (shared_->size == 1) return;
    sum_.assign(static_cast<size_t>(n), 0.0f);
    publish(data);
    for (int32_t r = 0; r < shared_->size; ++r) {
      const float* in = shared_->inputs[static_cast<size_t>(r)];
      for (int64_t i = 0; i < n; ++i)
        sum_[static_cast<size_t>(i)] += in[i];
    }
    shared_->sync.arrive_and_wait();  // every rank has read every input
    std::memcpy(data, sum_.data(), static_cast<size_t>(n) * sizeof(float));
  }

  void all_gather(const float* in, int64_t n, float* out) override {
    publish(in);
    for (int32_t r = 0; r < shared_->size; ++r) {
      std::memcpy(out + r * n, shared_->inputs[static_cast<size_t>(r)],
                  static_cast<size_t>(n) * sizeof(float));
    }
    shared_->sync.arrive_and_wait();
  }

 private:
  void publish(const float* p) {
    shared_->inputs[static_cast<size_t>(rank_)] = p;
    shared_->sync.arrive_and_wait();  // every rank's input is in place
  }

  std::shared_ptr<LocalShared> shared_;
  int32_t rank_;
  std::vector<float> sum_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_group(int32_t size) {
  assert(size > 0);
  auto shared = std::make_shared<LocalShared>(size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int32_t r = 0; r < size; ++r)
    out.push_back(std::make_unique<LocalCommunicator>(shared, r));
  return out;
}

}  // namespace kvc
