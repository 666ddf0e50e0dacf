// http/deadline.h: a deadline moved later fires at the later time with no second wait started
// early, moved earlier fires at the earlier time, cleared fires nothing, and cancel() releases
// what the pending wait holds.
#include "http/deadline.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <memory>

namespace kvc::http {
namespace {

using namespace std::chrono_literals;
using Clock = Deadline::Clock;

// Runs the io_context until nothing is pending, returning how long that took.
Clock::duration drain(boost::asio::io_context& ioc) {
  const auto start = Clock::now();
  ioc.run();
  ioc.restart();
  return Clock::now() - start;
}

TEST(Deadline, MovedLaterFiresAtTheLaterTime) {
  boost::asio::io_context ioc;
  Deadline d(ioc.get_executor());
  Clock::time_point fired{};
  const auto start = Clock::now();
  d.arm(30ms, [&] { fired = Clock::now(); });
  d.arm(120ms, [&] { fired = Clock::now(); });  // later: stored, the first wait waits again
  EXPECT_TRUE(d.armed());
  drain(ioc);
  ASSERT_NE(fired, Clock::time_point{});
  EXPECT_GE(fired - start, 120ms);
  EXPECT_FALSE(d.armed());
}

TEST(Deadline, MovedEarlierFiresAtTheEarlierTime) {
  boost::asio::io_context ioc;
  Deadline d(ioc.get_executor());
  int calls = 0;
  d.arm(10s, [&] { ++calls; });
  d.arm(20ms, [&] { ++calls; });  // earlier: waits again at once
  const auto took = drain(ioc);
  EXPECT_EQ(calls, 1);
  EXPECT_LT(took, 5s) << "the first (10 s) wait was not replaced";
}

TEST(Deadline, ClearedFiresNothingAndRearmsAfterwards) {
  boost::asio::io_context ioc;
  Deadline d(ioc.get_executor());
  int calls = 0;
  d.arm(20ms, [&] { ++calls; });
  d.clear();
  drain(ioc);
  EXPECT_EQ(calls, 0);
  d.arm(20ms, [&] { ++calls; });
  drain(ioc);
  EXPECT_EQ(calls, 1);
}

TEST(Deadline, ClearedThenArmedWhileTheWaitIsPendingFiresOnce) {
  boost::asio::io_context ioc;
  Deadline d(ioc.get_executor());
  int calls = 0;
  d.arm(20ms, [&] { ++calls; });
  d.clear();
  d.arm(40ms, [&] { ++calls; });  // the pending 20 ms wait serves it
  drain(ioc);
  EXPECT_EQ(calls, 1);
}

TEST(Deadline, CancelReleasesWhatThePendingWaitHolds) {
  boost::asio::io_context ioc;
  Deadline d(ioc.get_executor());
  auto owner = std::make_shared<int>(0);
  d.arm(10s, [owner] { ++*owner; });
  EXPECT_EQ(owner.use_count(), 2);
  d.cancel();
  const auto took = drain(ioc);
  EXPECT_EQ(owner.use_count(), 1);
  EXPECT_EQ(*owner, 0);
  EXPECT_LT(took, 5s);
}

}  // namespace
}  // namespace kvc::http
