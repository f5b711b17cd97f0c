// Faults that used to cost a run its time or its data (docs/errors.md "Outputs", "Supervisor
// reports"), each reproduced with real processes and, for a full disk, a real tmpfs mounted
// by the test (root only; skipped elsewhere):
//  - an island killed before it joins: the run fails (or starts with min_islands) at once,
//    not after transport.join_timeout_s, and launch ends with one closing line;
//  - a disk that fills up at the end of a run: no summary.json, no *.tmp left behind;
//  - a disk that fills up under metrics.jsonl: the run stops at the first failed record and
//    the file ends on a whole line; a torn file of an older build is named by its readers;
//  - checkpoints that cannot be written: counted in the end line and summary.json, or the
//    run stops (checkpoint.on_failure: stop), in the simulator and in real runs;
//  - a refused CURVE key while the other islands are still starting: the line names only it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/json.h"
#include "src/core/run_dir.h"
#include "tests/run/process_test_util.h"

namespace fs = std::filesystem;
using atl::core::json_find_number;
using atl::core::json_find_string;
using atl::testing::contains;
using atl::testing::lines;
using atl::testing::read;
using atl::testing::seconds_since;
using atl::testing::spawn_atoll;
using atl::testing::wait_exit;

namespace {

using Clock = std::chrono::steady_clock;


// A tmpfs of `bytes` mounted at `dir` while this lives (root only: ok() says whether it is).
class Tmpfs {
 public:
  Tmpfs(const fs::path& dir, size_t bytes) : dir_(dir) {
    fs::create_directories(dir_);
    ok_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, ("size=" + std::to_string(bytes)).c_str()) == 0;
  }
  ~Tmpfs() {
    if (ok_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool ok() const { return ok_; }

 private:
  fs::path dir_;
  bool ok_ = false;
};

// Files under `dir` whose name ends in ".tmp".
std::vector<std::string> tmp_files(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) out.push_back(it->path().string());
  }
  return out;
}

// SIGKILLs island `id` of `launch` as soon as its process runs atoll (long before it can have
// joined: loading libtorch alone takes longer). False if it never appeared.
bool kill_island_at_start(pid_t launch, int id) {
  for (int i = 0; i < 1000; ++i) {
    if (const pid_t victim = atl::testing::island_child(launch, id); victim > 0) return ::kill(victim, SIGKILL) == 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// `atoll ARGS`, stdout and stderr together.
struct Output {
  int code = -1;
  std::string log;
};
Output atoll(const std::string& args, const fs::path& log) {
  const int status = std::system((std::string(ATOLL_BINARY) + " " + args + " >" + log.string() + " 2>&1").c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(log)};
}

class Faults : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = atl::testing::make_test_dir("atoll_faults_test");
    port_ = atl::testing::test_port(10100, 3800);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A small GPT with DiLoCo (H = 5) on the test corpus; `extra` YAML appended.
  std::string config(int islands, int steps, const std::string& extra = "") {
    return atl::testing::write_gpt_config(dir_, {islands, steps, 1, 10, 1, "algorithm: {name: diloco, inner_steps: 5}\n" + extra});
  }
  // --set overrides of a real run: this test's ports, fast heartbeats, and `more`.
  std::vector<std::string> args(std::vector<std::string> a, const std::vector<std::string>& more) const {
    for (const std::string& s : {"transport.coordinator=tcp://127.0.0.1:" + std::to_string(port_),
                                 "transport.base_port=" + std::to_string(port_ + 1), std::string("transport.heartbeat_ms=100"),
                                 std::string("transport.heartbeat_timeout_ms=5000")})
      a.insert(a.end(), {"--set", s});
    for (const auto& m : more) a.insert(a.end(), {"--set", m});
    return a;
  }
  fs::path run_dir() const { return dir_ / "runs/r"; }

  // `atoll launch` of three islands (40 steps) with `more` overrides, island 2 SIGKILLed as
  // soon as it runs; the exit code (-1: still running after 90 s), wall seconds and output.
  // The heartbeat timeout leaves islands 0 and 1 time to join on a loaded machine.
  struct Launched {
    int rc = -1;
    double wall_s = 0;
    std::string log;
  };
  Launched launch_killing_island_2(std::vector<std::string> more) {
    more.insert(more.end(), {"transport.join_timeout_s=60", "transport.heartbeat_timeout_ms=15000"});
    const auto t0 = Clock::now();
    const pid_t launch = spawn_atoll(args({"launch", config(3, 40), "--quiet"}, more), dir_ / "launch.log");
    Launched out;
    if (launch <= 0) return out;
    const bool killed = kill_island_at_start(launch, 2);
    out.rc = wait_exit(launch, 90);
    out.wall_s = seconds_since(t0);
    out.log = (killed ? "" : "(island 2 never appeared)\n") + read(dir_ / "launch.log");
    return out;
  }

  fs::path dir_;
  int port_ = 0;
};

// The first reproduction: island 2 SIGKILLed before it joins. The coordinator hears of
// it from launch and fails the run at once, naming island 2 and how it ended; launch's last
// line says the run failed and why; nothing waits for transport.join_timeout_s (60 s here).
TEST_F(Faults, IslandKilledBeforeJoiningFailsTheRunAtOnce) {
  const Launched run = launch_killing_island_2({});
  const std::string& log = run.log;
  ASSERT_NE(run.rc, -1) << log;
  EXPECT_EQ(run.rc, 1) << log;
  EXPECT_LT(run.wall_s, 30) << "the run waited for the dead island (join timeout 60 s)\n" << log;
  EXPECT_TRUE(contains(log, "coordinator: the run cannot start: 2 of 3 islands joined and the others cannot, fewer than "
                            "transport.min_islands 3; missing: island 2 (its process ended with signal 9 before it joined)"))
      << log;
  for (int id : {0, 1})
    EXPECT_TRUE(contains(log, "island " + std::to_string(id) + ": the run did not start: ")) << log;
  // One closing line, the last, and the coordinator says why it failed (not "a signal").
  std::vector<std::string> all;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) all.push_back(l);
  ASSERT_FALSE(all.empty());
  EXPECT_TRUE(contains(all.back(), "launch: the run failed: it could not start: 2 of 3 islands joined")) << all.back();
  EXPECT_TRUE(contains(all.back(), "(exit code 1)")) << all.back();
  EXPECT_FALSE(contains(log, "stopped by a signal")) << log;
  // The run directory says the run failed: no sweep or report takes it for a result.
  const std::string summary = read(run_dir() / "summary.json");
  EXPECT_EQ(json_find_string(summary, "status"), "failed") << summary;
  EXPECT_TRUE(contains(json_find_string(summary, "error").value_or(""), "island 2 (its process ended with signal 9"))
      << summary;
}

// The same kill with transport.min_islands 2: the run starts with islands 0 and 1 at once and
// finishes with survivors (exit code 3).
TEST_F(Faults, IslandKilledBeforeJoiningLeavesMinIslandsToStartAtOnce) {
  const Launched run = launch_killing_island_2({"transport.min_islands=2"});
  const std::string& log = run.log;
  ASSERT_NE(run.rc, -1) << log;
  EXPECT_EQ(run.rc, 3) << log;
  EXPECT_LT(run.wall_s, 40) << log;
  EXPECT_TRUE(contains(log, "starting with 2 of 3 islands (transport.min_islands 2); missing: island 2 (its process ended "
                            "with signal 9 before it joined)"))
      << log;
  EXPECT_TRUE(contains(log, "launch: the run finished with 2 of 3 islands; lost: island 2 (signal 9)")) << log;
  const std::string summary = read(run_dir() / "summary.json");
  EXPECT_EQ(json_find_string(summary, "status"), "finished") << summary;
  EXPECT_EQ(json_find_number(summary, "islands_finished"), 2) << summary;
  EXPECT_EQ(json_find_number(summary, "steps"), 40) << summary;
}

// Island 2's CURVE key is refused while islands 0 and 1 are still starting (started 1 s after
// it): the run cannot start, and the coordinator's line names island 2 alone, not the two
// healthy islands as "never connected".
TEST_F(Faults, RefusalNamesOnlyTheRefusedIslandWhileOthersAreStarting) {
  const std::string keys = (dir_ / "keys").string();
  for (const char* name : {"coordinator", "island-0", "island-1", "island-2"}) {
    const std::string cmd = std::string(ATOLL_BINARY) + " keygen " + keys + " --name " + name + " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) GTEST_SKIP() << "no CURVE in this libzmq";
  }
  fs::create_directories(keys + "/allowed");
  fs::copy_file(keys + "/island-0.pub", keys + "/allowed/island-0.pub");
  fs::copy_file(keys + "/island-1.pub", keys + "/allowed/island-1.pub");
  const std::string cfg = config(3, 40);
  // A heartbeat timeout long enough for islands started late on a loaded machine.
  const std::vector<std::string> more = {"transport.curve=true", "transport.keys_dir=" + keys,
                                         "transport.heartbeat_timeout_ms=15000"};
  const pid_t coord = spawn_atoll(args({"coordinator", cfg, "--quiet"}, more), dir_ / "coordinator.log");
  const pid_t i2 = spawn_atoll(args({"island", cfg, "--id", "2", "--quiet"}, more), dir_ / "island2.log");
  EXPECT_EQ(wait_exit(i2, 60), 1) << read(dir_ / "island2.log");
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const pid_t i0 = spawn_atoll(args({"island", cfg, "--id", "0", "--quiet"}, more), dir_ / "island0.log");
  const pid_t i1 = spawn_atoll(args({"island", cfg, "--id", "1", "--quiet"}, more), dir_ / "island1.log");
  const int rcc = wait_exit(coord, 60), rc0 = wait_exit(i0, 30), rc1 = wait_exit(i1, 30);
  const std::string log = read(dir_ / "coordinator.log");
  EXPECT_EQ(rcc, 1) << log;
  EXPECT_TRUE(contains(log, "coordinator: the run cannot start: 2 of 3 islands joined and the others cannot, fewer than "
                            "transport.min_islands 3; missing: island 2 (CURVE key refused: "))
      << log;
  EXPECT_FALSE(contains(log, "never connected")) << log;
  EXPECT_EQ(rc0, 1) << read(dir_ / "island0.log");
  EXPECT_EQ(rc1, 1) << read(dir_ / "island1.log");
  EXPECT_TRUE(contains(read(dir_ / "island0.log"), "island 0: the run did not start: 2 of 3 islands joined"))
      << read(dir_ / "island0.log");
}

// The second reproduction, scaled down: the disk fills up at the end of a run (the
// checkpoints already could not be written). The run fails naming final_params.bin, and
// leaves no summary.json that claims success and no *.tmp filling the disk.
TEST_F(Faults, FullDiskAtTheEndLeavesNoSummaryAndNoTempFile) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 96 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cfg = config(2, 40, "checkpoint: {every: 10}\n");
  // 200,000 parameters (800 KB of final_params.bin) against 96 KB of disk.
  const auto r = atl::testing::run_atoll("simulate " + cfg + " --quiet --set run.out_dir=" + mnt.string() +
                                         " --set model.dim=128 --set train.log_every=10");
  EXPECT_EQ(r, 1);
  const fs::path run = mnt / "r";
  EXPECT_TRUE(fs::exists(run / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(run / "summary.json")) << read(run / "summary.json");
  EXPECT_FALSE(fs::exists(run / "final_params.bin"));
  EXPECT_TRUE(tmp_files(mnt).empty()) << tmp_files(mnt).front();
  // Every record written is whole.
  const std::string metrics = read(run / "metrics.jsonl");
  ASSERT_FALSE(metrics.empty());
  EXPECT_EQ(metrics.back(), '\n');
}

// The run's own words when the disk is full at the end: `atoll simulate` prints one line that
// names the file and the reason.
TEST_F(Faults, FullDiskAtTheEndIsOneLineNamingTheFile) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 96 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cfg = config(2, 20);
  const Output r = atoll("simulate " + cfg + " --quiet --set run.out_dir=" + mnt.string() +
                             " --set model.dim=128 --set train.log_every=10",
                         dir_ / "out.log");
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(contains(r.log, "atoll: run failed: cannot write " + (mnt / "r/final_params.bin").string() +
                                  ": No space left on device"))
      << r.log;
}

// The same full disk in a real run: the lead island cannot write final_params.bin, tells the
// coordinator, and the run fails with that reason in summary.json and launch's closing line.
TEST_F(Faults, FullDiskAtTheEndOfARealRunFailsItNamingTheFile) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 96 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cfg = config(2, 20);
  const pid_t launch = spawn_atoll(
      args({"launch", cfg, "--quiet"}, {"run.out_dir=" + mnt.string(), "model.dim=128", "train.log_every=10"}),
      dir_ / "launch.log");
  const int rc = wait_exit(launch, 120);
  const std::string log = read(dir_ / "launch.log");
  EXPECT_EQ(rc, 1) << log;
  const std::string file = (mnt / "r/final_params.bin").string();
  EXPECT_TRUE(contains(log, "launch: the run failed: island 0: cannot write " + file + ": No space left on device")) << log;
  const std::string summary = read(mnt / "r/summary.json");
  EXPECT_EQ(json_find_string(summary, "status"), "failed") << summary;
  EXPECT_FALSE(fs::exists(file));
  EXPECT_TRUE(tmp_files(mnt).empty());
}

// The third reproduction: a 16 KB disk under metrics.jsonl. The run stops at the first
// record that cannot be written (run.metrics_on_failure: stop, the default), saying so in one
// line, instead of training to the end; metrics.jsonl ends on a whole record.
TEST_F(Faults, FullDiskUnderMetricsStopsTheRunAndLeavesNoTornLine) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 16 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cfg = config(2, 2000);
  const Output r = atoll("simulate " + cfg + " --quiet --set run.out_dir=" + mnt.string() +
                             " --set train.eval_every=20 --set train.eval_batches=2",
                         dir_ / "out.log");
  const std::string& log = r.log;
  EXPECT_EQ(r.code, 1) << log;
  EXPECT_TRUE(contains(log, "atoll: run failed: " + (mnt / "r").string() +
                                "/metrics.jsonl: cannot append a record (No space left on device) after "))
      << log;
  EXPECT_TRUE(contains(log, "the run stops (run.metrics_on_failure: stop)")) << log;
  const auto records = lines(mnt / "r/metrics.jsonl");
  ASSERT_FALSE(records.empty());
  const std::string text = read(mnt / "r/metrics.jsonl");
  EXPECT_EQ(text.back(), '\n') << "torn: ..." << text.substr(text.size() - 40);
  for (const auto& l : records) EXPECT_EQ(l.back(), '}') << l;
  // It stopped at the first failure: far fewer than 2000 steps' records were attempted.
  int64_t last_step = 0;
  for (const auto& l : records) last_step = std::max<int64_t>(last_step, json_find_number(l, "step").value_or(0));
  EXPECT_LT(last_step, 2000);
  EXPECT_FALSE(fs::exists(mnt / "r/summary.json"));
  EXPECT_TRUE(tmp_files(mnt).empty());
}

// run.metrics_on_failure: warn on a disk that fills up and then frees space again: the records
// that could not be written are counted, every line in the file is whole (no bytes of a cut
// record, no hole of NULs where it was), and metrics_bytes() is the file's length.
TEST_F(Faults, RecordsOnAFullDiskAreWholeOrNotThere) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 64 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  atl::config::Config config;
  config.run.out_dir = mnt.string();
  config.run.name = "u";
  config.run.metrics_on_failure = "warn";
  atl::core::RunDir dir(config, /*force=*/false);
  {  // leave about 20 KB free
    std::ofstream filler(mnt / "filler", std::ios::binary);
    filler << std::string(40 * 1024, 'x');
  }
  const std::string pad(10000, 'p');  // records across pages: a write is cut part-way
  for (int i = 0; i < 100; ++i)
    dir.record("{\"event\":\"train\",\"n\":" + std::to_string(i) + ",\"pad\":\"" + pad + "\"}");
  const uint64_t lost = dir.records_lost();
  EXPECT_GT(lost, 0u) << "the disk never filled";
  EXPECT_NE(dir.first_failure().find("No space left on device"), std::string::npos) << dir.first_failure();
  fs::remove(mnt / "filler");  // space again: later records land right after the last whole one
  for (int i = 100; i < 110; ++i) dir.record("{\"event\":\"train\",\"n\":" + std::to_string(i) + "}");
  EXPECT_EQ(dir.records_lost(), lost);
  const std::string text = read(mnt / "u/metrics.jsonl");
  EXPECT_EQ(text.find('\0'), std::string::npos) << "a hole of NULs where a cut record was";
  EXPECT_EQ(dir.metrics_bytes(), text.size());
  const auto records = lines(mnt / "u/metrics.jsonl");
  EXPECT_EQ(records.size(), 110 - lost);
  for (const auto& l : records) EXPECT_TRUE(l.front() == '{' && l.back() == '}') << l;
  EXPECT_EQ(json_find_number(records.back(), "n"), 109);
}

// A metrics.jsonl that ends in a torn line (as older builds left on a full disk): `atoll
// compare` reads every whole record and says where the file is torn.
TEST_F(Faults, ReadersNameATornMetricsLine) {
  const std::string cfg = config(2, 20);
  ASSERT_EQ(atl::testing::run_atoll("simulate " + cfg + " --quiet"), 0);
  const size_t records = lines(run_dir() / "metrics.jsonl").size();
  const std::string torn = "{\"event\":\"train\",\"island\":0,\"wall_time_s\":0.";
  std::ofstream(run_dir() / "metrics.jsonl", std::ios::app) << torn;
  const Output r = atoll("compare " + run_dir().string(), dir_ / "compare.log");
  EXPECT_EQ(r.code, 0) << r.log;
  EXPECT_TRUE(contains(r.log, "metrics.jsonl: line " + std::to_string(records + 1) +
                                      " is torn (" + std::to_string(torn.size()) + " bytes without a newline, the run's writes were cut off); ignored"))
      << r.log;
}

// The fifth reproduction: every checkpoint fails (its directory is a full disk). The
// run trains to the end, and its end line and summary.json say how many were asked for and
// how many were written; with checkpoint.on_failure: stop, the first failure ends the run.
TEST_F(Faults, FailedCheckpointsAreCountedOrStopTheRun) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 8 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cfg = config(2, 40, "checkpoint: {every: 10, dir: " + (mnt / "ckpt").string() + "}\n");
  Output r = atoll("simulate " + cfg, dir_ / "out.log");
  EXPECT_EQ(r.code, 0) << r.log;
  EXPECT_TRUE(contains(r.log, "; checkpoints: 0 of 3 written")) << r.log;  // steps 10, 20, 30 (not the last)
  const std::string summary = read(run_dir() / "summary.json");
  EXPECT_EQ(json_find_string(summary, "status"), "finished") << summary;
  EXPECT_EQ(json_find_number(summary, "checkpoints_asked"), 3) << summary;
  EXPECT_EQ(json_find_number(summary, "checkpoints_written"), 0) << summary;
  EXPECT_TRUE(tmp_files(mnt).empty());

  r = atoll("simulate " + cfg + " --force --set checkpoint.on_failure=stop", dir_ / "out.log");
  EXPECT_EQ(r.code, 1) << r.log;
  EXPECT_TRUE(contains(r.log, "atoll: run failed: checkpoint of step 10 not written: ")) << r.log;
  EXPECT_TRUE(contains(r.log, "(checkpoint.on_failure: stop)")) << r.log;
  EXPECT_FALSE(fs::exists(run_dir() / "summary.json"));
}

// The same in a real run: the islands' and the coordinator's checkpoint files cannot be
// written; launch's closing line and summary.json count them, or the run stops.
TEST_F(Faults, FailedCheckpointsOfARealRunAreCountedOrStopTheRun) {
  const fs::path mnt = dir_ / "mnt";
  Tmpfs disk(mnt, 8 * 1024);
  if (!disk.ok()) GTEST_SKIP() << "cannot mount a tmpfs here (needs root)";
  const std::string cfg = config(2, 40, "checkpoint: {every: 10, dir: " + (mnt / "ckpt").string() + "}\n");
  pid_t launch = spawn_atoll(args({"launch", cfg, "--quiet"}, {}), dir_ / "launch.log");
  int rc = wait_exit(launch, 120);
  std::string log = read(dir_ / "launch.log");
  EXPECT_EQ(rc, 0) << log;
  EXPECT_TRUE(contains(log, "launch: the run finished with all 2 islands; checkpoints: 0 of 3 written (exit code 0)")) << log;
  const std::string summary = read(run_dir() / "summary.json");
  EXPECT_EQ(json_find_string(summary, "status"), "finished") << summary;
  EXPECT_EQ(json_find_number(summary, "checkpoints_asked"), 3) << summary;
  EXPECT_EQ(json_find_number(summary, "checkpoints_written"), 0) << summary;

  launch = spawn_atoll(args({"launch", cfg, "--quiet", "--force"}, {"checkpoint.on_failure=stop"}), dir_ / "launch.log");
  rc = wait_exit(launch, 120);
  log = read(dir_ / "launch.log");
  EXPECT_EQ(rc, 1) << log;
  EXPECT_TRUE(contains(log, "launch: the run failed: checkpoint of step 10 not written (")) << log;
  EXPECT_TRUE(contains(log, "the run stops (checkpoint.on_failure: stop)")) << log;
  EXPECT_EQ(json_find_string(read(run_dir() / "summary.json"), "status"), "failed");
  // The coordinator told the islands: each stops at its next step, saying why, instead of
  // training on until launch stops it (a heartbeat timeout + 5 s after the coordinator ended).
  for (int island : {0, 1}) {
    EXPECT_TRUE(contains(log, "island " + std::to_string(island) + ": the coordinator ended the run: the run failed: "
                                  "checkpoint of step 10 not written")) << log;
  }
  EXPECT_FALSE(contains(log, "cut off from the run")) << log;
  EXPECT_FALSE(contains(read(run_dir() / "metrics.jsonl"), "\"event\":\"island_end\"")) << "an island trained to its end";
}

// A coordinator that exits with an error code (here: it cannot make its checkpoint directory,
// whose parent is a file) has ended the run: launch stops the islands at once instead of a
// heartbeat timeout + 5 s later, when it takes islands that outlive their coordinator for
// cut off from a run that goes on.
TEST_F(Faults, LaunchStopsTheIslandsAtOnceWhenTheCoordinatorFails) {
  std::ofstream(dir_ / "file") << "not a directory";
  const std::string cfg = config(2, 4000, "checkpoint: {every: 10, dir: " + (dir_ / "file/ckpt").string() + "}\n");
  const pid_t launch = spawn_atoll(args({"launch", cfg, "--quiet"}, {}), dir_ / "launch.log");
  const int rc = wait_exit(launch, 120);
  const std::string log = read(dir_ / "launch.log");
  EXPECT_EQ(rc, 1) << log;
  EXPECT_TRUE(contains(log, "launch: [coordinator] exited with code 1")) << log;
  EXPECT_TRUE(contains(log, "launch: the coordinator failed the run; stopping 2 island(s)")) << log;
  EXPECT_FALSE(contains(log, "cut off from the run")) << log;
}

}  // namespace
