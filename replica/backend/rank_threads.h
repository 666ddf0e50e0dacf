// The threads of a tensor-parallel replica's ranks (replica/backend/cpu and cuda's
// tensor-parallel backends): run(f) calls f(r) for every rank r at once, each on its rank's
// thread, and returns when all have returned. Every rank runs the same step and the same
// collectives, so they proceed in lockstep. With caller_runs_first, rank 0 runs on the calling
// thread (the CPU ranks: no hand-off for it); without, every rank has a thread of its own for
// its whole life (a GPU rank's thread keeps its device current: NcclComm::bind_thread).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"

namespace kvc {

class RankThreads {
 public:
  RankThreads(int32_t size, bool caller_runs_first);
  ~RankThreads();  // joins the threads (no run() in progress)
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int32_t size() const { return size_; }
  // f(r) on every rank's thread; the first error in rank order, prefixed with its rank when
  // there are several ranks (an exception f throws is its rank's error). A rank whose f fails
  // calls on_failure (when given) on its thread at once, before the run ends: the hook that
  // releases ranks that would wait for it in a collective. Not reentrant: one run at a time.
  Status run(const std::function<Status(int32_t)>& f, const std::function<void()>& on_failure = {});

 private:
  void loop(int32_t r);

  const int32_t size_;
  const int32_t first_thread_;  // ranks below it run on the caller
  std::mutex mu_;
  std::condition_variable start_, done_;
  const std::function<Status(int32_t)>* job_ = nullptr;
  const std::function<void()>* on_failure_ = nullptr;
  uint64_t generation_ = 0;
  int32_t running_ = 0;
  bool stop_ = false;
  std::vector<Status> statuses_;
  std::vector<std::thread> threads_;
};

}  // namespace kvc
