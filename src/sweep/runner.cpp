#include "src/sweep/runner.h"

#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "src/core/json.h"
#include "src/core/run_dir.h"
#include "src/sweep/process.h"
#include "src/sweep/results.h"

namespace fs = std::filesystem;

namespace atl::sweep {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_stop_signal(int) { g_stop = 1; }

// Installs on_stop_signal for SIGINT and SIGTERM for its lifetime.
class StopSignals {
 public:
  StopSignals() {
    g_stop = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string duration_text(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600, static_cast<int>(s) / 60 % 60);
  return buf;
}

// Reads a growing metrics.jsonl: complete lines since the last call.
class MetricsTail {
 public:
  explicit MetricsTail(std::string path) : path_(std::move(path)) {}
  std::vector<std::string> new_lines() {
    std::vector<std::string> lines;
    std::ifstream in(path_, std::ios::binary);
    if (!in) return lines;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    offset_ += chunk.size();
    partial_ += chunk;
    size_t start = 0, nl = 0;
    while ((nl = partial_.find('\n', start)) != std::string::npos) {
      lines.push_back(partial_.substr(start, nl - start));
      start = nl + 1;
    }
    partial_.erase(0, start);
    return lines;
  }

 private:
  std::string path_;
  size_t offset_ = 0;
  std::string partial_;
};

// The reason a metrics record shows divergence, or "": a training or validation loss that is
// not finite (JsonObject writes NaN and infinities as null).
std::string divergence(const std::string& record) {
  const auto event = core::json_find_string(record, "event");
  const char* key = event == "train" ? "loss" : event == "eval" ? "val_loss" : nullptr;
  if (!key || record.find(core::json_quote(key) + ":null") == std::string::npos) return "";
  const auto step = core::json_find_number(record, "step");
  return std::string(event == "train" ? "training" : "validation") + " loss is not finite at step " +
         std::to_string(static_cast<long long>(step.value_or(-1)));
}

// The last non-empty line of a log file (a failed run's error message), or "".
std::string last_line(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string line, last;
  while (std::getline(in, line)) {
    line.erase(std::remove(line.begin(), line.end(), '\r'), line.end());
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  return last;
}

int terminal_width() {
  struct winsize ws {};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20) return ws.ws_col;
  return 120;
}

// One run in progress.
struct Running {
  Running(size_t i, pid_t p, std::string metrics_path)
      : index(i), pid(p), start(Clock::now()), metrics(std::move(metrics_path)) {}
  size_t index;
  pid_t pid;
  Clock::time_point start;
  MetricsTail metrics;
  int64_t step = 0;              // highest inner step seen in its training records
  std::string diverged;          // reason, once a non-finite loss is seen
  bool stopping = false;         // SIGTERM sent
  Clock::time_point stop_sent;
};

class Runner {
 public:
  Runner(const ExpandedSweep& sweep, const RunnerOptions& options)
      : sweep_(sweep), plan_(sweep.plan), options_(options), tty_(isatty(STDERR_FILENO) != 0) {}

  SweepOutcome run() {
    prepare();
    StopSignals signals;
    const auto t0 = Clock::now();
    size_t next = 0;
    while (next < todo_.size() || !running_.empty()) {
      while (!g_stop && next < todo_.size() && static_cast<int>(running_.size()) < options_.jobs)
        start(todo_[next++]);
      if (g_stop && !stopping_all_) stop_all();
      watch();
      reap();
      draw(next);
      if (!running_.empty() || (next < todo_.size() && !g_stop))
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (g_stop && running_.empty()) break;
    }
    clear_bar();
    outcome_.interrupted = g_stop != 0;
    summary_line(t0);
    return outcome_;
  }

 private:
  std::string log_path(size_t i) const { return plan_.dir + "/logs/" + plan_.runs[i].id + ".log"; }
  std::string outcome_path(size_t i) const { return plan_.dir + "/logs/" + plan_.runs[i].id + ".json"; }

  void prepare() {
    todo_ = prepare_runs(sweep_);
    outcome_.skipped = static_cast<int>(plan_.runs.size() - todo_.size());
    std::printf("sweep %s: %zu runs, %d finished before, %zu to run, %d at a time -> %s\n",
                plan_.name.c_str(), plan_.runs.size(), outcome_.skipped, todo_.size(), options_.jobs,
                plan_.dir.c_str());
    std::fflush(stdout);
  }

  void start(size_t i) {
    const auto& run = plan_.runs[i];
    const std::string dir = plan_.run_dir(run);
    // A previous attempt's records must not be read as this one's (the child clears them
    // too, but only once it has started).
    std::error_code ec;
    for (const char* f : {"metrics.jsonl", "summary.json"}) fs::remove(fs::path(dir) / f, ec);
    fs::remove(outcome_path(i), ec);
    fs::remove(log_path(i), ec);
    const std::vector<std::string> argv = {"atoll", "simulate", plan_.dir + "/configs/" + run.id + ".yaml",
                                           "--force", "--quiet"};
    try {
      running_.emplace_back(i, spawn_logged(options_.atoll_exe, argv, log_path(i), options_.warm), dir + "/metrics.jsonl");
    } catch (const std::runtime_error& e) {
      record(i, 0, "failed", e.what(), -1);
    }
  }

  void stop_all() {
    stopping_all_ = true;
    for (auto& r : running_) terminate(r);
  }

  void terminate(Running& r) {
    if (r.stopping) return;
    ::kill(-r.pid, SIGTERM);
    r.stopping = true;
    r.stop_sent = Clock::now();
  }

  // Reads new metrics of each run; stops runs that diverged or ignore SIGTERM.
  void watch() {
    for (auto& r : running_) {
      for (const auto& line : r.metrics.new_lines()) {
        if (auto step = core::json_find_number(line, "step"); step && core::json_find_string(line, "event") == "train")
          r.step = std::max(r.step, static_cast<int64_t>(*step));
        if (r.diverged.empty()) r.diverged = divergence(line);
      }
      if (!r.diverged.empty()) terminate(r);
      if (r.stopping && seconds(Clock::now() - r.stop_sent) > 5) ::kill(-r.pid, SIGKILL);
    }
  }

  void reap() {
    for (auto it = running_.begin(); it != running_.end();) {
      int status = 0;
      if (::waitpid(it->pid, &status, WNOHANG) != it->pid) {
        ++it;
        continue;
      }
      ::kill(-it->pid, SIGKILL);  // anything the run left behind in its group
      finish(*it, status);
      it = running_.erase(it);
    }
  }

  // Decides how run `r` ended.
  void finish(const Running& r, int status) {
    const auto& run = plan_.runs[r.index];
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string state = "ok", reason;
    const RunMetrics summary = read_run_metrics(plan_.run_dir(run));
    const bool own_summary = summary.has_summary && summary.config_hash == run.hash;
    if (!r.diverged.empty()) {
      state = "diverged";
      reason = r.diverged;
    } else if (own_summary && summary.diverged_step >= 0) {  // the simulator stopped itself
      state = summary_status(summary, &reason);
    } else if (r.stopping) {
      state = "interrupted";
      reason = "stopped by the sweep's interruption";
    } else if (code != 0) {
      state = "failed";
      reason = WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                   : "exit code " + std::to_string(code);
      if (auto line = last_line(log_path(r.index)); !line.empty()) reason += ": " + line;
    } else {
      const std::string summary = read_file(plan_.run_dir(run) + "/summary.json");
      const auto loss = core::json_find_number(summary, "final_val_loss");
      if (core::json_find_string(summary, "config_hash") != run.hash) {
        state = "failed";
        reason = "summary.json does not carry the run's config hash " + run.hash;
      } else if (!loss || !std::isfinite(*loss)) {
        state = "diverged";
        reason = "final validation loss is not finite";
      }
    }
    record(r.index, seconds(Clock::now() - r.start), state, reason, code);
  }

  // Writes logs/<id>.json, counts the outcome and prints its line.
  void record(size_t index, double wall, const std::string& state, std::string reason, int code) {
    const auto& run = plan_.runs[index];
    std::replace(reason.begin(), reason.end(), '"', '\'');
    core::write_file_atomic(outcome_path(index),
                           core::JsonObject()
                               .add("run", run.id)
                               .add("status", state)
                               .add("reason", reason)
                               .add("exit_code", code)
                               .add("wall_time_s", wall)
                               .add("config_hash", run.hash)
                               .str() + "\n");
    if (state == "ok") {
      ++outcome_.ok;
      durations_.push_back(wall);
    } else if (state == "failed") {
      ++outcome_.failed;
    } else if (state == "diverged") {
      ++outcome_.diverged;
    }
    if (state == "failed" || state == "diverged") outcome_.problems.push_back(run.id + ": " + reason);
    ++ended_;
    const auto loss = core::json_find_number(read_file(plan_.run_dir(run) + "/summary.json"), "final_val_loss");
    char val[48] = "";
    if (state == "ok" && loss) std::snprintf(val, sizeof val, "  val loss %.4f", *loss);
    clear_bar();
    std::printf("[%*zu/%zu] %-11s %s%s  %s%s%s\n", width(), ended_, todo_.size(), state.c_str(),
                run.id.c_str(), val, duration_text(wall).c_str(), reason.empty() ? "" : "  ", reason.c_str());
    std::fflush(stdout);
  }

  int width() const { return static_cast<int>(std::to_string(todo_.size()).size()); }

  // Seconds left: runs not started plus what the running ones still need, at `jobs` at a time.
  // One run's duration: the mean of finished runs, else extrapolated from the running ones.
  double eta(size_t next) const {
    double per_run = 0;
    if (!durations_.empty()) {
      for (double d : durations_) per_run += d;
      per_run /= static_cast<double>(durations_.size());
    } else {
      for (const auto& r : running_) {
        const double frac = fraction(r);
        if (frac > 0.02) per_run = std::max(per_run, seconds(Clock::now() - r.start) / frac);
      }
    }
    if (per_run <= 0) return -1;
    double work = static_cast<double>(todo_.size() - next) * per_run;
    for (const auto& r : running_) work += per_run * (1 - fraction(r));
    const size_t parallel = std::min<size_t>(static_cast<size_t>(options_.jobs), todo_.size() - next + running_.size());
    return work / static_cast<double>(std::max<size_t>(1, parallel));
  }

  double fraction(const Running& r) const {
    const double steps = static_cast<double>(sweep_.configs[r.index].train.steps);
    return std::clamp(static_cast<double>(r.step) / steps, 0.0, 1.0);
  }

  void draw(size_t next) {
    if (!tty_ || seconds(Clock::now() - last_draw_) < 0.5) return;
    last_draw_ = Clock::now();
    const double left = eta(next);
    std::string line = "sweep " + plan_.name + ": " + std::to_string(outcome_.ok) + "/" +
                       std::to_string(todo_.size()) + " done, " + std::to_string(running_.size()) +
                       " running, " + std::to_string(outcome_.failed + outcome_.diverged) + " failed, " +
                       std::to_string(todo_.size() - next) + " waiting, eta " +
                       (left < 0 ? "?" : duration_text(left));
    if (g_stop) line += "  (stopping runs)";
    for (const auto& r : running_)
      line += " | " + plan_.runs[r.index].id + " " + std::to_string(static_cast<int>(100 * fraction(r))) + "%";
    const size_t max = static_cast<size_t>(terminal_width() - 1);
    if (line.size() > max) line = line.substr(0, max - 3) + "...";
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    bar_ = true;
  }

  void clear_bar() {
    if (!bar_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    bar_ = false;
  }

  void summary_line(Clock::time_point t0) {
    std::printf("sweep %s: %d ok, %d failed, %d diverged, %d finished before%s, %s\n", plan_.name.c_str(),
                outcome_.ok, outcome_.failed, outcome_.diverged, outcome_.skipped,
                outcome_.interrupted ? ", interrupted (run the same command again to finish it)" : "",
                duration_text(seconds(Clock::now() - t0)).c_str());
    std::fflush(stdout);
  }

  const ExpandedSweep& sweep_;
  const SweepPlan& plan_;
  RunnerOptions options_;
  bool tty_;
  std::vector<size_t> todo_;       // indices of runs to run, in plan order
  std::vector<Running> running_;
  std::vector<double> durations_;  // wall seconds of runs that ended ok
  size_t ended_ = 0;
  bool stopping_all_ = false;
  bool bar_ = false;
  Clock::time_point last_draw_{};
  SweepOutcome outcome_;
};

}  // namespace

std::vector<size_t> prepare_runs(const ExpandedSweep& sweep) {
  const SweepPlan& plan = sweep.plan;
  for (const char* sub : {"configs", "logs", "runs"}) fs::create_directories(fs::path(plan.dir) / sub);
  write_plan(plan);
  std::vector<size_t> todo;
  for (size_t i = 0; i < plan.runs.size(); ++i) {
    const auto& run = plan.runs[i];
    core::write_file_atomic(plan.dir + "/configs/" + run.id + ".yaml", config::to_yaml(sweep.configs[i]));
    if (!run_finished(plan, run)) todo.push_back(i);
  }
  return todo;
}

int default_jobs(const ExpandedSweep& sweep) {
  cpu_set_t set;
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  cores = std::max(1, cores);
  int threads = 1;
  for (const auto& c : sweep.configs) threads = std::max(threads, c.run.threads == 0 ? cores : c.run.threads);
  return std::max(1, cores / threads);
}

SweepOutcome run_sweep(const ExpandedSweep& sweep, const RunnerOptions& options) {
  return Runner(sweep, options).run();
}

}  // namespace atl::sweep
