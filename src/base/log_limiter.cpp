#include "src/base/log_limiter.h"

namespace atl {

bool LogLimiter::allow(Clock::time_point now, uint64_t* suppressed) {
  if (now - window_start_ > kWindow) {
    window_start_ = now;
    used_ = 0;
  }
  if (used_ >= kBurst) {
    ++suppressed_;
    return false;
  }
  ++used_;
  *suppressed = suppressed_;
  suppressed_ = 0;
  return true;
}

}  // namespace atl
