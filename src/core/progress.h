// Progress reporting for long runs: one self-overwriting line on a TTY, a plain line every
// few seconds otherwise, nothing with --quiet. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace atl::core {

struct ProgressState {
  int64_t steps_done = 0;     // inner steps done, summed over islands
  int64_t steps_total = 0;    // planned, summed over islands
  double last_loss = 0;       // latest training loss seen
  double val_loss = -1;       // latest validation loss (-1 = none yet)
  int64_t rounds = 0;         // outer rounds completed (max over islands)
  uint64_t bytes = 0;         // bytes sent, all islands
};

class Progress {
 public:
  enum class Mode { kAuto, kQuiet };
  explicit Progress(Mode mode);
  void update(const ProgressState& state);  // rate-limited
  void message(const std::string& line);    // a line that stays (clears the bar first)
  void finish(const ProgressState& state);

 private:
  void draw(const ProgressState& state, bool final);
  bool quiet_;
  bool tty_;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_;
  bool drawn_ = false;
};

std::string human_bytes(double bytes);

}  // namespace atl::core
