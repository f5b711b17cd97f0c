// A rate limit for log lines that peers can trigger (garbage frames, refused requests): keeps
// a flood of bad input from flooding the log, without losing count of it.
//
// Not thread-safe: owned by the one thread that writes those lines.
#pragma once

#include <chrono>
#include <cstdint>

namespace atl {

// Lets through at most `burst` log lines per window, then counts the rest and reports the
// count with the next line let through.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  // True when a line may be written now; *suppressed receives how many were held back since
  // the last line written (left unchanged when false is returned).
  bool allow(Clock::time_point now, uint64_t* suppressed);

  static constexpr int kBurst = 20;
  static constexpr auto kWindow = std::chrono::seconds(10);

 private:
  Clock::time_point window_start_{};
  int used_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace atl
