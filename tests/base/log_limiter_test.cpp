// src/base/log_limiter.h: a burst per window, then a count of what was held back, reported
// with the next line let through.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "src/base/log_limiter.h"

namespace atl {
namespace {

TEST(LogLimiter, BurstThenCountsAndReportsTheSuppressedLines) {
  LogLimiter limiter;
  const auto t0 = LogLimiter::Clock::time_point{} + std::chrono::hours(1);
  uint64_t suppressed = 99;
  for (int i = 0; i < LogLimiter::kBurst; ++i) {
    ASSERT_TRUE(limiter.allow(t0, &suppressed)) << i;
    EXPECT_EQ(suppressed, 0u);
  }
  suppressed = 77;
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.allow(t0 + std::chrono::seconds(1), &suppressed));
  EXPECT_EQ(suppressed, 77u);  // untouched while lines are held back
  // Still inside the window: nothing more gets through.
  EXPECT_FALSE(limiter.allow(t0 + LogLimiter::kWindow, &suppressed));
  // A new window: the next line goes out and carries the count (6), which then restarts.
  const auto t1 = t0 + LogLimiter::kWindow + std::chrono::milliseconds(1);
  ASSERT_TRUE(limiter.allow(t1, &suppressed));
  EXPECT_EQ(suppressed, 6u);
  ASSERT_TRUE(limiter.allow(t1, &suppressed));
  EXPECT_EQ(suppressed, 0u);
}

}  // namespace
}  // namespace atl
