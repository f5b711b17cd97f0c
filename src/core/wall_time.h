// Wall-clock time for real runs: the TimeSource algorithms see in an island process
// (seconds since the island started; sleeping really sleeps).
#pragma once

#include <chrono>
#include <thread>

#include "algorithms/algorithm.h"

namespace atl::core {

class WallTime final : public algorithms::TimeSource {
 public:
  double now_s() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void sleep_until_s(double t) override {
    const double wait = t - now_s();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace atl::core
