// A Clock that only moves when a test says so.
#pragma once

#include <algorithm>

#include "base/clock.h"

namespace kvc::testing {

class FakeClock final : public Clock {
 public:
  TimePoint now() const override { return now_; }
  // Sleeping moves the clock to `t` at once (never backwards).
  void sleep_until(TimePoint t) override { now_ = std::max(now_, t); }
  void advance(Duration d) { now_ += d; }
  void set(TimePoint t) { now_ = t; }

 private:
  TimePoint now_{Duration{1'000'000'000}};
};

}  // namespace kvc::testing
