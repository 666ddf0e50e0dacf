#include "replica/backend/rank_threads.h"

#include <exception>
#include <string>

namespace kvc {

namespace {

// f(r), with an exception (std::bad_alloc of a rank's host copy of its weights, say) as its
// error: a rank thread must report, not end the process. A failure calls on_failure (if set).
Status call(const std::function<Status(int32_t)>& f, const std::function<void()>* on_failure,
            int32_t r) {
  Status s = Status::Ok();
  try {
    s = f(r);
  } catch (const std::exception& e) {
    s = Error{std::string("exception: ") + e.what()};
  }
  if (!s.ok() && on_failure != nullptr && *on_failure) (*on_failure)();
  return s;
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
    const std::function<void()>* on_failure;
    {
      std::unique_lock lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      on_failure = on_failure_;
    }
    Status s = call(*job, on_failure, r);
    std::lock_guard lock(mu_);
    statuses_[static_cast<size_t>(r)] = std::move(s);
    if (--running_ == 0) done_.notify_one();
  }
}

Status RankThreads::run(const std::function<Status(int32_t)>& f,
                        const std::function<void()>& on_failure) {
  {
    std::lock_guard lock(mu_);
    job_ = &f;
    on_failure_ = &on_failure;
    running_ = static_cast<int32_t>(threads_.size());
    ++generation_;
  }
  start_.notify_all();
  for (int32_t r = 0; r < first_thread_; ++r)
    statuses_[static_cast<size_t>(r)] = call(f, &on_failure, r);
  {
    std::unique_lock lock(mu_);
    done_.wait(lock, [&] { return running_ == 0; });
    job_ = nullptr;
    on_failure_ = nullptr;
  }
  for (int32_t r = 0; r < size_; ++r) {
    const Status& s = statuses_[static_cast<size_t>(r)];
    if (s.ok()) continue;
    return size_ > 1 ? Error{"rank " + std::to_string(r) + ": " + s.message()} : s;
  }
  return Status::Ok();
}

}  // namespace kvc
