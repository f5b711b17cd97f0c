// `atoll sweep`, `atoll report` and `atoll compare` as a user runs them: the real binary,
// real child processes, real files. Each sweep is a handful of tiny synthetic runs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/cli_test_util.h"
#include "tests/run/process_test_util.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;

using atl::testing::Result;
using atl::testing::run;

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A base config with synthetic data and a small MLP: runs take about a second.
// `algorithm`: the base's algorithm section; a sweep over algorithm.name names only keys every
// swept algorithm reads there (kThreeRuns: "{name: diloco}", H under per_algorithm).
std::string spec(const std::string& name, int steps, const std::string& sweep,
                 const std::string& algorithm = "{name: diloco, inner_steps: 5}") {
  return "run: {name: x, threads: 1}\n"
         "model: {name: mlp, hidden: [16]}\n"
         "data: {kind: synthetic, synthetic_examples: 512, synthetic_dim: 8, synthetic_classes: 3}\n"
         "train: {steps: " + std::to_string(steps) + ", eval_every: 10, batch_size: 16, warmup_steps: 0, log_every: 5}\n"
         "islands: {count: 2}\n"
         "algorithm: " + algorithm + "\n"
         "sweep:\n  name: " + name + "\n" + sweep;
}

// ddp once, diloco with two values of H: three runs.
const std::string kNames = "{name: diloco}";  // the base of kThreeRuns
const std::string kThreeRuns =
    "  grid: {algorithm.name: [ddp, diloco]}\n"
    "  per_algorithm:\n"
    "    diloco: {grid: {algorithm.inner_steps: [5, 10]}}\n";

class SweepCli : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("atoll_sweep_cli_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::string out() const { return " --out " + (dir_ / "sweeps").string(); }
  fs::path sweep_dir(const std::string& name) const { return dir_ / "sweeps" / name; }
  fs::path dir_;
};

TEST_F(SweepCli, SecondRunSkipsFinishedRuns) {
  const std::string path = write("s.yaml", spec("resume", 20, kThreeRuns, kNames));
  Result first = run("sweep " + path + out() + " --no-report -j 2");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("3 ok"), std::string::npos) << first.output;
  const fs::path runs = sweep_dir("resume") / "runs";
  const fs::path keep = runs / "algorithm=ddp,seed=0" / "summary.json";
  const fs::path lost = runs / "algorithm=diloco,inner_steps=10,seed=0" / "summary.json";
  ASSERT_TRUE(fs::exists(keep));
  ASSERT_TRUE(fs::exists(lost));
  const std::string kept = read(keep);  // holds the wall time: a re-run would change it

  // As if the sweep had been killed during that run.
  fs::remove(lost);
  Result second = run("sweep " + path + out() + " --no-report -j 2");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("2 finished before, 1 to run"), std::string::npos) << second.output;
  EXPECT_EQ(count(second.output, "algorithm=ddp,seed=0"), 0) << second.output;
  EXPECT_EQ(count(second.output, "algorithm=diloco,inner_steps=10,seed=0"), 1) << second.output;
  EXPECT_EQ(read(keep), kept);
  EXPECT_TRUE(fs::exists(lost));

  // A summary of another config does not count as finished: changing the base re-runs all.
  Result dry = run("sweep " + path + out() + " --dry-run");
  EXPECT_NE(dry.output.find("3 already done"), std::string::npos) << dry.output;
  write("s.yaml", spec("resume", 30, kThreeRuns, kNames));
  dry = run("sweep " + path + out() + " --dry-run");
  EXPECT_EQ(dry.code, 0) << dry.output;
  EXPECT_NE(dry.output.find("0 already done"), std::string::npos) << dry.output;
  EXPECT_EQ(count(dry.output, "  todo  "), 3) << dry.output;

  const std::string table = read(sweep_dir("resume") / "summary.csv");
  EXPECT_EQ(count(table, ",ok,"), 3) << table;
}

// Starts `atoll sweep PATH --out DIR --no-report -j 1` in the background, output to `log`,
// and returns once its first run (ddp) has finished, while the second one runs: runs of a few
// seconds, one at a time. Returns the sweep's pid, or -1 when the first run never finished.
pid_t start_and_wait_for_first_run(const std::string& path, const fs::path& out_dir, const std::string& name,
                                   const std::string& log) {
  std::vector<std::string> args = {ATOLL_BINARY, "sweep", path, "--out", out_dir.string(), "--no-report", "-j", "1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, ATOLL_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return -1;
  const fs::path first = out_dir / name / "runs" / "algorithm=ddp,seed=0" / "summary.json";
  for (int i = 0; i < 500 && !fs::exists(first); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return fs::exists(first) ? pid : -1;
}

// Whether `pid` is a process that has not exited: a zombie has (its state in /proc/PID/stat,
// after the command name, is Z).
bool alive(pid_t pid) {
  const std::string stat = read(fs::path("/proc") / std::to_string(pid) / "stat");
  const size_t close = stat.rfind(')');
  return close != std::string::npos && close + 2 < stat.size() && stat[close + 2] != 'Z' && stat[close + 2] != 'X';
}

// Where process `pid` maps libtorch_cpu's first segment ("" if it does not).
std::string libtorch_at(pid_t pid) {
  std::istringstream maps(read(fs::path("/proc") / std::to_string(pid) / "maps"));
  for (std::string line; std::getline(maps, line);)
    if (line.find("libtorch_cpu") != std::string::npos) return line.substr(0, line.find('-'));
  return "";
}

std::string cmdline_of(pid_t pid) {
  std::string cmdline = read(fs::path("/proc") / std::to_string(pid) / "cmdline");
  std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
  return cmdline;
}

TEST_F(SweepCli, InterruptedSweepFinishesOnTheNextRun) {
  const std::string path = write("s.yaml", spec("stop", 3000, kThreeRuns, kNames));
  const std::string log = (dir_ / "sweep.log").string();
  const pid_t pid = start_and_wait_for_first_run(path, dir_ / "sweeps", "stop", log);
  ASSERT_GT(pid, 0) << read(log);
  ::kill(pid, SIGINT);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130) << read(log);
  EXPECT_NE(read(log).find("interrupted"), std::string::npos) << read(log);

  Result again = run("sweep " + path + out() + " --no-report -j 1");
  ASSERT_EQ(again.code, 0) << again.output;
  std::smatch m;
  const std::string text = again.output;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("(\\d) finished before, (\\d) to run"))) << text;
  EXPECT_GE(std::stoi(m[1]), 1) << text;
  EXPECT_GE(std::stoi(m[2]), 1) << text;
  EXPECT_EQ(std::stoi(m[1]) + std::stoi(m[2]), 3) << text;
  EXPECT_EQ(count(read(sweep_dir("stop") / "summary.csv"), ",ok,"), 3);
}

TEST_F(SweepCli, KilledSweepTakesItsRunsAlong) {
  const std::string path = write("s.yaml", spec("kill", 3000, kThreeRuns, kNames));
  const std::string log = (dir_ / "sweep.log").string();
  const pid_t pid = start_and_wait_for_first_run(path, dir_ / "sweeps", "kill", log);
  ASSERT_GT(pid, 0) << read(log);
  // The second run is under way: a fork of the sweep that did not execute atoll again, so it
  // skipped atoll's start-up: libtorch is where the sweep mapped it (an executed process maps
  // it afresh, at a random address), and the run shows its own command line.
  const fs::path second = sweep_dir("kill") / "runs" / "algorithm=diloco,inner_steps=5,seed=0" / "metrics.jsonl";
  for (int i = 0; i < 100 && !fs::exists(second); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::vector<pid_t> runs;
  for (pid_t p : atl::testing::children_of(pid))
    if (alive(p)) runs.push_back(p);
  ASSERT_EQ(runs.size(), 1u) << "-j 1: one run at a time, the second one now\n" << read(log);
  if (read("/proc/sys/kernel/randomize_va_space").rfind("0", 0) != 0) {
    EXPECT_FALSE(libtorch_at(pid).empty()) << read("/proc/" + std::to_string(pid) + "/maps").substr(0, 2000);
    EXPECT_EQ(libtorch_at(runs[0]), libtorch_at(pid)) << "the run executed a program instead of running in a fork";
  }
  EXPECT_NE(cmdline_of(runs[0]).find(" simulate "), std::string::npos) << cmdline_of(runs[0]);
  EXPECT_NE(cmdline_of(runs[0]).find("/configs/algorithm=diloco,inner_steps=5,seed=0.yaml"), std::string::npos)
      << cmdline_of(runs[0]);
  ::kill(pid, SIGKILL);
  ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
  for (int i = 0; i < 100 && alive(runs[0]); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(alive(runs[0])) << "a run outlived the killed sweep";

  Result again = run("sweep " + path + out() + " --no-report -j 2");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("1 finished before, 2 to run"), std::string::npos) << again.output;
}

TEST_F(SweepCli, DivergedRunIsReportedAndTheOthersFinish) {
  // SGD without clipping at lr 1e30 overflows to inf/NaN within a few steps.
  std::string text = spec("nan", 200, "  grid: {train.lr: [0.01, 1.0e+30]}\n");
  text.replace(text.find("warmup_steps: 0"), 15, "warmup_steps: 0, optimizer: sgd, grad_clip: 0");
  const std::string path = write("s.yaml", text);
  Result r = run("sweep " + path + out() + " --no-report");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("1 ok"), std::string::npos) << r.output;
  const std::string table = read(sweep_dir("nan") / "summary.csv");
  EXPECT_EQ(count(table, ",ok,"), 1) << table;
  EXPECT_EQ(count(table, ",diverged,"), 1) << table;
  EXPECT_NE(table.find("not finite"), std::string::npos) << table;
}

TEST_F(SweepCli, TypoInASweptKeyFailsBeforeRunningAnything) {
  const std::string path = write("s.yaml", spec("typo", 20, "  grid: {algorithm.inner_step: [5, 10]}\n"));
  Result r = run("sweep " + path + out());
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
  EXPECT_NE(r.output.find("algorithm.inner_step'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("algorithm.inner_steps"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(sweep_dir("typo")));
}

TEST_F(SweepCli, ReportAndCompare) {
  const std::string path = write("s.yaml", spec("rep", 20, "  seeds: [1, 2]\n" + kThreeRuns, kNames));
  ASSERT_EQ(run("sweep " + path + out() + " --no-report").code, 0);
  const fs::path dir = sweep_dir("rep");
  Result r = run("report " + dir.string());
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* png : {"loss_vs_steps.png", "loss_vs_bytes.png", "final_bars.png"}) {
    const std::string bytes = read(dir / "plots" / png);
    EXPECT_EQ(bytes.substr(0, 4), "\x89PNG") << png;
  }
  const std::string html = read(dir / "report.html");
  EXPECT_GE(count(html, "data:image/png;base64,"), 3);
  EXPECT_NE(html.find("algorithm=diloco,inner_steps=10,seed=2"), std::string::npos);
  const std::string aggregate = read(dir / "aggregate.csv");
  EXPECT_NE(aggregate.find("final_val_loss_mean,final_val_loss_std"), std::string::npos) << aggregate;
  EXPECT_EQ(count(aggregate, "\n"), 4) << aggregate;  // header + three configurations

  Result c = run("compare " + dir.string() + "/runs/algorithm=ddp,seed=1 " + dir.string() +
                 "/runs/algorithm=diloco,inner_steps=5,seed=2");
  ASSERT_EQ(c.code, 0) << c.output;
  EXPECT_EQ(count(c.output, "\n"), 3) << c.output;
  for (const char* column : {"algorithm.name", "run.seed", "final val", "sent"})
    EXPECT_NE(c.output.find(column), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("train.lr"), std::string::npos) << c.output;  // same in both
  EXPECT_EQ(run("compare " + (dir_ / "nothing").string()).code, 2);
}

}  // namespace
