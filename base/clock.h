// Time is injected: anything that expires, backs off or measures takes a Clock&, and tests
// advance a FakeClock (tests/testing/fake_clock.h) instead of sleeping.
#pragma once

#include <chrono>
#include <thread>

namespace kvc {

class Clock {
 public:
  using Duration = std::chrono::nanoseconds;
  using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

  virtual ~Clock() = default;
  // Monotonic: never goes backwards.
  virtual TimePoint now() const = 0;
  // Returns at `t` or later (at once if `t` has passed). A simulated device waits here, so that
  // a fake clock moves instead of the test sleeping.
  virtual void sleep_until(TimePoint t) = 0;
};

class SteadyClock final : public Clock {
 public:
  TimePoint now() const override {
    return std::chrono::time_point_cast<Duration>(std::chrono::steady_clock::now());
  }
  void sleep_until(TimePoint t) override { std::this_thread::sleep_until(t); }
  // One process-wide instance for production wiring.
  static SteadyClock& instance() {
    static SteadyClock clock;
    return clock;
  }
};

}  // namespace kvc
