#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace kvc::kernels::cpu {
namespace {

// True while this thread runs a body: a parallel_for from there runs inline.
thread_local bool t_in_body = false;

int threads_from_env() {
  if (const char* env = std::getenv("KVC_CPU_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v > 0) return static_cast<int>(std::min(v, 1024L));
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// One job at a time: the submitting thread publishes it, wakes every worker, takes chunks itself
// and waits until each worker has finished with this generation (the job lives on its stack).
class Pool {
 public:
  explicit Pool(int threads) {
    for (int i = 1; i < threads; ++i)
      workers_.emplace_back([this] { worker_loop(); });
  }
  ~Pool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_)
      t.join();
  }
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Returns false, running nothing, when another thread's job holds the pool.
  bool try_run(int64_t n, int64_t chunk, const void* body, detail::RangeFn fn) {
    std::unique_lock submit(submit_mu_, std::try_to_lock);
    if (!submit.owns_lock()) return false;
    {
      std::lock_guard lock(mu_);
      body_ = body;
      fn_ = fn;
      n_ = n;
      chunk_ = chunk;
      next_.store(0, std::memory_order_relaxed);
      num_busy_ = static_cast<int>(workers_.size());
      ++generation_;
    }
    wake_.notify_all();
    run_chunks();
    std::unique_lock lock(mu_);
    done_.wait(lock, [this] { return num_busy_ == 0; });
    return true;
  }

 private:
  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
      }
      run_chunks();
      std::lock_guard lock(mu_);
      if (--num_busy_ == 0) done_.notify_one();
    }
  }

  void run_chunks() {
    t_in_body = true;
    for (;;) {
      int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
      if (begin >= n_) break;
      fn_(body_, begin, std::min(n_, begin + chunk_));
    }
    t_in_body = false;
  }

  std::mutex submit_mu_;  // held for a whole job
  std::mutex mu_;         // guards the fields below and the job's publication
  std::condition_variable wake_;
  std::condition_variable done_;
  uint64_t generation_ = 0;
  int num_busy_ = 0;
  bool stop_ = false;
  const void* body_ = nullptr;
  detail::RangeFn fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 1;
  std::atomic<int64_t> next_{0};
  std::vector<std::thread> workers_;
};

Pool& pool() {
  static Pool p(num_threads());
  return p;
}

}  // namespace

int num_threads() {
  static const int n = threads_from_env();
  return n;
}

namespace detail {

void run_parallel(int64_t n, int64_t min_chunk, const void* body, RangeFn fn) {
  const int threads = num_threads();
  // About four chunks per thread: enough to even out unequal items, few enough to stay cheap.
  const int64_t chunk = std::max<int64_t>({1, min_chunk, (n + 4 * threads - 1) / (4 * threads)});
  if (threads == 1 || n <= chunk || t_in_body || !pool().try_run(n, chunk, body, fn)) {
    const bool outer = t_in_body;
    t_in_body = true;
    fn(body, 0, n);
    t_in_body = outer;
  }
}

}  // namespace detail
}  // namespace kvc::kernels::cpu
