// A deadline that costs no system call when it moves later (private to http/). A connection
// moves its deadline at every read phase, write and response piece; with one Asio timer armed per
// move, each move cancels the pending wait (a handler run with operation_aborted) and may
// reprogram the reactor's timerfd (bench/results/router.md: 12 timerfd_settime per proxied 2 KB
// request). Here one wait is pending at most: a later deadline is only stored, and the wait,
// when it fires before it, waits again for it; an earlier deadline re-waits at once (the timer's
// expires_at cancels the pending wait). Used on the owner's executor only (its strand, or the one
// I/O thread's).
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>
#include <cstdint>
#include <utility>

namespace kvc::http {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  template <typename Executor>
  explicit Deadline(const Executor& ex) : timer_(ex) {}

  // The deadline becomes `timeout` from now; when it passes (and was neither moved later nor
  // cleared since), `on_expiry()` runs on the timer's executor. The pending wait's handler holds
  // `on_expiry` (and what it captures: the owner, kept alive) until the wait ends: cancel() it
  // when the owner closes.
  template <typename OnExpiry>
  void arm(Clock::duration timeout, OnExpiry on_expiry) {
    deadline_ = Clock::now() + timeout;
    armed_ = true;
    if (pending_ && expiry_ <= deadline_) return;  // that wait will wait again
    wait(std::move(on_expiry));
  }

  // No deadline: the pending wait, if any, ends without calling its handler when it fires.
  void clear() { armed_ = false; }

  // No deadline, and the pending wait ends now (its handler, and what it holds, is released).
  void cancel() {
    armed_ = false;
    if (pending_) timer_.cancel();
  }

  bool armed() const { return armed_; }

 private:
  template <typename OnExpiry>
  void wait(OnExpiry on_expiry) {
    pending_ = true;
    expiry_ = deadline_;
    const uint64_t generation = ++generation_;
    timer_.expires_at(expiry_);  // cancels a pending wait: its handler sees another generation
    timer_.async_wait(
        [this, generation, on_expiry = std::move(on_expiry)](boost::system::error_code ec) mutable {
          if (generation != generation_) return;  // superseded by a newer wait
          pending_ = false;
          if (ec || !armed_) return;
          if (Clock::now() < deadline_) return wait(std::move(on_expiry));  // moved later
          armed_ = false;
          on_expiry();
        });
  }

  boost::asio::steady_timer timer_;
  Clock::time_point deadline_{};
  Clock::time_point expiry_{};  // of the pending wait
  uint64_t generation_ = 0;
  bool armed_ = false;
  bool pending_ = false;
};

}  // namespace kvc::http
