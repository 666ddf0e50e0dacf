// A host-side vote among the threads of a tensor-parallel group (one thread per rank, in one
// process): every rank calls agree() once per round with its value, and each learns whether all
// of them passed the same one. The ranks use it to replay, capture or skip CUDA graphs together
// (kernels/cuda/llama_step.cu), so that their collectives stay in step. Header-only, std only.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace kvc::kernels::cuda {

class GroupVote {
 public:
  explicit GroupVote(int size) : size_(size) {}
  GroupVote(const GroupVote&) = delete;
  GroupVote& operator=(const GroupVote&) = delete;

  // Blocks until every rank of the group has called agree() in this round; true iff all passed
  // `value`. False at once (and for the ranks waiting) once abort() was called: a rank that
  // failed before its vote aborts the group rather than leave the others waiting.
  bool agree(int64_t value) {
    std::unique_lock lock(mu_);
    if (aborted_) return false;
    if (arrived_ == 0) {
      value_ = value;
      same_ = true;
    } else if (value != value_) {
      same_ = false;
    }
    if (++arrived_ == size_) {
      // The round is complete: its result stays until the next round completes, which needs
      // every rank (the waiters below included) to vote again.
      result_ = same_;
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
      return result_;
    }
    const uint64_t round = round_;
    cv_.wait(lock, [&] { return round_ != round || aborted_; });
    return round_ != round && result_;
  }

  void abort() {
    {
      std::lock_guard lock(mu_);
      aborted_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int size_;
  int arrived_ = 0;
  uint64_t round_ = 0;
  int64_t value_ = 0;
  bool same_ = true, result_ = true, aborted_ = false;
};

}  // namespace kvc::kernels::cuda
