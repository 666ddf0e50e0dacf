#include "router/policy/sibling_tracker.h"

#include <gtest/gtest.h>

#include "tests/testing/fake_clock.h"

namespace kvc {
namespace {

using namespace std::chrono_literals;

TEST(SiblingTracker, BurstsStickWithinTheWindowAndExpireAfter) {
  testing::FakeClock clock;
  SiblingTracker t(clock, {2s, 100});
  const std::string k = SiblingTracker::key_for(std::nullopt, 42);
  EXPECT_FALSE(t.lookup(k));
  t.record(k, 3);
  clock.advance(1500ms);
  EXPECT_EQ(t.lookup(k), 3u);  // extends the window
  clock.advance(1500ms);
  EXPECT_EQ(t.lookup(k), 3u);
  clock.advance(2001ms);
  EXPECT_FALSE(t.lookup(k));
  EXPECT_EQ(t.size(), 0u);
}

TEST(SiblingTracker, GroupIdsAndPromptHashesAreSeparateKeys) {
  testing::FakeClock clock;
  SiblingTracker t(clock);
  t.record(SiblingTracker::key_for(std::string("7"), 7), 1);
  EXPECT_FALSE(t.lookup(SiblingTracker::key_for(std::nullopt, 7)));
  EXPECT_EQ(t.lookup(SiblingTracker::key_for(std::string("7"), 999)), 1u);
}

TEST(SiblingTracker, BoundedAndForgetsDeadReplicas) {
  testing::FakeClock clock;
  SiblingTracker t(clock, {10s, 3});
  for (uint64_t i = 0; i < 5; ++i)
    t.record(SiblingTracker::key_for(std::nullopt, i), i % 2);
  EXPECT_EQ(t.size(), 3u);
  EXPECT_FALSE(t.lookup(SiblingTracker::key_for(std::nullopt, 0)));  // oldest went first
  t.forget_replica(0);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.lookup(SiblingTracker::key_for(std::nullopt, 3)), 1u);
}

}  // namespace
}  // namespace kvc
