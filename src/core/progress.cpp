#include "src/core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace atl::core {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

Progress::Progress(Mode mode)
    : quiet_(mode == Mode::kQuiet), tty_(isatty(fileno(stderr)) != 0) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::update(const ProgressState& s) {
  if (quiet_) return;
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  const double since = std::chrono::duration<double>(now - last_).count();
  if (since < (tty_ ? 0.2 : 10.0)) return;
  last_ = now;
  draw(s, false);
}

void Progress::message(const std::string& line) {
  if (quiet_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", line.c_str());
  drawn_ = false;
}

void Progress::finish(const ProgressState& s) {
  if (quiet_) return;
  std::lock_guard<std::mutex> lock(mu_);
  draw(s, true);
  if (tty_) std::fprintf(stderr, "\n");
  drawn_ = false;
}

void Progress::draw(const ProgressState& s, bool final) {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = s.steps_total > 0 ? static_cast<double>(s.steps_done) / s.steps_total : 0;
  const double eta = frac > 0 ? elapsed * (1 - frac) / frac : 0;
  char val[32] = "-";
  if (s.val_loss >= 0) std::snprintf(val, sizeof val, "%.4f", s.val_loss);
  char line[256];
  std::snprintf(line, sizeof line,
                "%3.0f%% steps %lld/%lld  loss %.4f  val %s  rounds %lld  sent %s  %s %.0fs",
                frac * 100, static_cast<long long>(s.steps_done),
                static_cast<long long>(s.steps_total), s.last_loss, val,
                static_cast<long long>(s.rounds), human_bytes(static_cast<double>(s.bytes)).c_str(),
                final ? "took" : "eta", final ? elapsed : eta);
  if (tty_) std::fprintf(stderr, "\r\033[K%s", line);
  else std::fprintf(stderr, "%s\n", line);
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace atl::core
