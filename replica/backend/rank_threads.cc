#include "replica/backend/rank_threads.h"

#include <exception>
#include <string>

namespace kvc {

namespace {

// f(r), with an exception (std::bad_alloc of a rank's host copy of its weights, say) as its
// error: a rank thread must report, not end the process.
Status call(const std::function<Status(int32_t)>& f, int32_t r) {
  try {
    return f(r);
  } catch (const std::exception& e) {
    return Error{std::string("exception: ") + e.what()};
  }
}

}  // namespace

RankThreads::RankThreads(int32_t size, bool caller_runs_first)
    : size_(size), first_thread_(caller_runs_first ? 1 : 0), statuses_(static_cast<size_t>(size)) {
  for (int32_t r = first_thread_; r < size_; ++r)
    threads_.emplace_back([this, r] { loop(r); });
}

RankThreads::~RankThreads() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : threads_)
    t.join();
}

void RankThreads::loop(int32_t r) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<Status(int32_t)>* job;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    Status s = call(*job, r);
    std::lock_guard lock(mu_);
    statuses_[static_cast<size_t>(r)] = std::move(s);
    if (--running_ == 0) done_.notify_one();
  }
}

Status RankThreads::run(const std::function<Status(int32_t)>& f) {
  {
    std::lock_guard lock(mu_);
    job_ = &f;
    running_ = static_cast<int32_t>(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  for (int32_t r = 0; r < first_thread_; ++r)
    statuses_[static_cast<size_t>(r)] = call(f, r);
  {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
  }
  for (int32_t r = 0; r < size_; ++r) {
    const Status& s = statuses_[static_cast<size_t>(r)];
    if (s.ok()) continue;
    return size_ > 1 ? Error{"rank " + std::to_string(r) + ": " + s.message()} : s;
  }
  return Status::Ok();
}

}  // namespace kvc
