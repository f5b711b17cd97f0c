// Checkpoints of real runs (docs/checkpoints.md "Real runs"): `atoll launch` killed as a whole
// with SIGKILL at a random moment and resumed with --resume ends exactly as the uninterrupted
// run; a torn set of checkpoints falls back to the previous common one; and the algorithms
// real runs do not checkpoint yet are refused with one line.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/json.h"
#include "tests/run/process_test_util.h"

namespace fs = std::filesystem;
using atl::core::json_find_string;
using atl::testing::lines;
using atl::testing::read;

namespace {

// Runs atoll with `args`; stdout and stderr to `log`. The exit code.
int run(const std::string& args, const fs::path& log) {
  const int status = std::system((std::string(ATOLL_BINARY) + " " + args + " >" + log.string() + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// metrics.jsonl as a sorted list of records that do not depend on wall time: membership
// records dropped; every record's wall_time_s, round records' sync_s, and the data plane's
// wire-byte counts (bytes_sent, bytes_recv, compression_ratio, bytes_sent_total: how many
// acknowledgements and hellos travel depends on timing, in any two real runs) removed. Lines
// of different islands interleave differently in any two real runs, hence sorted.
std::vector<std::string> comparable(const fs::path& metrics) {
  static const std::regex wall(
      R"re(,"(wall_time_s|sync_s|bytes_sent|bytes_recv|compression_ratio|bytes_sent_total)":[^,}]*)re");
  std::vector<std::string> out;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") == "membership") continue;
    out.push_back(std::regex_replace(l, wall, ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The lines only one of two sorted lists holds, for failure messages.
std::string difference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<std::string> only_a, only_b;
  std::set_difference(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(only_a));
  std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(only_b));
  std::string out = "only in the first:\n";
  for (const auto& l : only_a) out += "  " + l + "\n";
  out += "only in the second:\n";
  for (const auto& l : only_b) out += "  " + l + "\n";
  return out;
}

// metrics.jsonl records compared as comparable() lists; a failure lists the differences.
void expect_same_records(const std::vector<std::string>& got, const std::vector<std::string>& want) {
  EXPECT_TRUE(got == want) << difference(got, want);
}

// Waits up to `seconds` until metrics.jsonl holds `part`.
bool wait_for(const fs::path& metrics, const std::string& part, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    if (read(metrics).find(part) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

class Resume : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = atl::testing::make_test_dir("atoll_resume_test");
    port_ = atl::testing::test_port(10000);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // diloco-local.yaml made small: 3 islands, H = 5, a checkpoint every 10 steps.
  std::string config(int steps, const std::string& extra = "",
                     const std::string& algorithm = "{name: diloco, inner_steps: 5}", int checkpoint_every = 10) {
    std::ostringstream y;
    y << "run: {name: r, seed: 7, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
      << "model: {name: gpt, layers: 1, heads: 2, dim: 32, seq_len: 16}\n"
      << "data: {kind: text, path: " << (dir_ / "corpus.txt").string() << ", partition: contiguous}\n"
      << "train: {lr: 0.003, warmup_steps: 2, batch_size: 4, steps: " << steps
      << ", eval_every: 10, eval_batches: 1, log_every: 5}\n"
      << "islands: {count: 3}\n"
      << "algorithm: " << algorithm << "\n"
      << "checkpoint: {every: " << checkpoint_every << ", keep: 2}\n"
      << "transport: {coordinator: \"tcp://127.0.0.1:" << port_ << "\", base_port: " << port_ + 1
      << ", heartbeat_ms: 100, heartbeat_timeout_ms: 3000}\n"
      << extra;
    const fs::path p = dir_ / "c.yaml";
    std::ofstream(p) << y.str();
    return p.string();
  }
  fs::path run_dir(const std::string& name) const { return dir_ / "runs" / name; }

  // Starts run r by hand (`atoll coordinator` and three `atoll island`, each with the arguments
  // `with` gives), SIGKILLs the coordinator after a random round in [3, last_round] (the run
  // not finished yet), starts it again with the same command (and `again`, appended), and
  // expects every process to end with 0 and the new coordinator to have picked the run up.
  template <typename With>
  void run_and_restart_the_coordinator(const With& with, int last_round, const std::vector<std::string>& again = {}) {
    pid_t coordinator = atl::testing::spawn_atoll(with({"coordinator"}, {}), dir_ / "coordinator-1.log");
    ASSERT_GT(coordinator, 0);
    std::vector<pid_t> islands;
    for (int i = 0; i < 3; ++i) {
      islands.push_back(atl::testing::spawn_atoll(with({"island"}, {"--id", std::to_string(i)}),
                                                  dir_ / ("island-" + std::to_string(i) + ".log")));
    }
    std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
    const int round = std::uniform_int_distribution<int>(3, last_round)(rng);
    ASSERT_TRUE(wait_for(run_dir("r") / "metrics.jsonl", "\"round\":" + std::to_string(round) + ",", 60))
        << read(dir_ / "coordinator-1.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 20)(rng)));
    std::printf("[ info ] coordinator killed after round %d\n", round);
    std::fflush(stdout);
    ASSERT_FALSE(fs::exists(run_dir("r") / "summary.json")) << "the run finished before the kill";
    ASSERT_EQ(kill(coordinator, SIGKILL), 0);
    EXPECT_EQ(atl::testing::wait_exit(coordinator, 10), 128 + SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    coordinator = atl::testing::spawn_atoll(with({"coordinator"}, again), dir_ / "coordinator-2.log");
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(atl::testing::wait_exit(islands[static_cast<size_t>(i)], 120), 0)
          << read(dir_ / ("island-" + std::to_string(i) + ".log"));
    EXPECT_EQ(atl::testing::wait_exit(coordinator, 60), 0) << read(dir_ / "coordinator-2.log");
    EXPECT_NE(read(dir_ / "coordinator-2.log").find("coordinator: picking up the running run"), std::string::npos)
        << read(dir_ / "coordinator-2.log");
  }

  fs::path dir_;
  int port_ = 0;
};

// The acceptance test: killed as a whole (SIGKILL to launch's process group) at a random
// moment after the first checkpoint, resumed with --resume: final_params.bin bitwise equal to
// the uninterrupted run's, metrics.jsonl equal except wall-time fields; then a torn set (the
// newest checkpoint of one island unreadable) falls back to the previous common checkpoint
// and still ends the same.
TEST_F(Resume, LaunchKilledAndResumedEndsAsTheUninterruptedRun) {
  const std::string cfg = config(60);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=whole", dir_ / "whole.log"), 0) << read(dir_ / "whole.log");
  const std::string expected = read(run_dir("whole") / "final_params.bin");
  ASSERT_GT(expected.size(), 100u);
  const auto expected_metrics = comparable(run_dir("whole") / "metrics.jsonl");
  ASSERT_FALSE(expected_metrics.empty());
  // Checkpoints of every process: the newest `keep` (coordinator) and keep + 1 (islands).
  EXPECT_TRUE(fs::exists(run_dir("whole") / "checkpoints/coordinator/step-000000000050.ckpt"));
  EXPECT_TRUE(fs::exists(run_dir("whole") / "checkpoints/island-2/step-000000000030.ckpt"));

  const pid_t pid = atl::testing::spawn_atoll({"launch", cfg, "--quiet", "--set", "run.name=cut"}, dir_ / "cut.log",
                                            /*new_group=*/true);
  ASSERT_GT(pid, 0);
  const fs::path first = run_dir("cut") / "checkpoints/coordinator/step-000000000010.ckpt";
  for (int i = 0; i < 600 && !fs::exists(first); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(first)) << "no checkpoint within 30 s\n" << read(dir_ / "cut.log");
  std::mt19937 rng(static_cast<unsigned>(std::random_device{}()));
  const int wait_ms = std::uniform_int_distribution<int>(0, 1500)(rng);
  std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  ASSERT_EQ(kill(-pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the children are gone too
  SCOPED_TRACE("killed " + std::to_string(wait_ms) + " ms after the first checkpoint");

  ASSERT_EQ(run("launch " + cfg + " --quiet --resume --set run.name=cut", dir_ / "resume.log"), 0)
      << read(dir_ / "resume.log");
  EXPECT_TRUE(read(run_dir("cut") / "final_params.bin") == expected) << "final parameters differ after the resume";
  expect_same_records(comparable(run_dir("cut") / "metrics.jsonl"), expected_metrics);
  EXPECT_NE(read(dir_ / "resume.log").find("coordinator: resuming after step "), std::string::npos)
      << read(dir_ / "resume.log");
  EXPECT_NE(read(run_dir("cut") / "summary.json").find("\"islands_finished\":3"), std::string::npos);

  // A torn set: island 1's newest checkpoint is cut short; the coordinator's newest (50) is
  // then not common, and the run resumes from 40 with the same end.
  const fs::path newest = run_dir("cut") / "checkpoints/island-1/step-000000000050.ckpt";
  ASSERT_TRUE(fs::exists(newest));
  fs::resize_file(newest, fs::file_size(newest) / 2);
  ASSERT_EQ(run("launch " + cfg + " --quiet --resume --set run.name=cut", dir_ / "torn.log"), 0) << read(dir_ / "torn.log");
  const std::string torn = read(dir_ / "torn.log");
  EXPECT_NE(torn.find("step-000000000050.ckpt': truncated"), std::string::npos) << torn;
  EXPECT_NE(torn.find("coordinator: resuming after step 40"), std::string::npos) << torn;
  EXPECT_TRUE(read(run_dir("cut") / "final_params.bin") == expected) << "final parameters differ after the torn resume";
  expect_same_records(comparable(run_dir("cut") / "metrics.jsonl"), expected_metrics);
}

// SIGUSR1 to one island (what Slurm's --signal=USR1@N sends before a job's time limit): the
// coordinator takes the step it proposes as every island's extra cut, every process writes it,
// and the run, killed as a whole after it and resumed with --resume, ends bitwise as the
// uninterrupted run with the same records. checkpoint.every lies beyond the run's last step:
// the signal's is the only checkpoint.
TEST_F(Resume, ASignalsCheckpointIsCutAndTheRunResumesFromIt) {
  const std::string cfg = config(3000, "", "{name: diloco, inner_steps: 5}", 100000);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=whole", dir_ / "whole.log"), 0) << read(dir_ / "whole.log");
  const std::string expected = read(run_dir("whole") / "final_params.bin");
  ASSERT_GT(expected.size(), 100u);
  const auto expected_metrics = comparable(run_dir("whole") / "metrics.jsonl");

  const pid_t pid = atl::testing::spawn_atoll({"launch", cfg, "--set", "run.name=cut"}, dir_ / "cut.log",
                                            /*new_group=*/true);
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(wait_for(run_dir("cut") / "metrics.jsonl", "\"round\":20,", 60)) << read(dir_ / "cut.log");
  ASSERT_EQ(atl::testing::children_of(pid).size(), 4u);  // coordinator, islands 0, 1, 2
  const pid_t island1 = atl::testing::island_child(pid, 1);
  ASSERT_GT(island1, 0);
  ASSERT_EQ(kill(island1, SIGUSR1), 0);
  const fs::path coordinator_ckpts = run_dir("cut") / "checkpoints/coordinator";
  std::string written;
  for (int i = 0; i < 600 && written.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (fs::exists(coordinator_ckpts))
      for (const auto& f : fs::directory_iterator(coordinator_ckpts))
        if (f.path().filename().string().rfind("step-", 0) == 0) written = f.path().filename().string();
  }
  ASSERT_FALSE(written.empty()) << "no checkpoint within 30 s of the signal\n" << read(dir_ / "cut.log");
  ASSERT_FALSE(fs::exists(run_dir("cut") / "summary.json")) << "the run ended before the kill";
  ASSERT_EQ(kill(-pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const std::string log = read(dir_ / "cut.log");
  EXPECT_NE(log.find("island 1: a signal asks for a checkpoint; proposed step"), std::string::npos) << log;
  EXPECT_NE(log.find("coordinator: island 1 received a signal to checkpoint; every island cuts at step"),
            std::string::npos) << log;

  ASSERT_EQ(run("launch " + cfg + " --quiet --resume --set run.name=cut", dir_ / "resume.log"), 0)
      << read(dir_ / "resume.log");
  const std::string step = std::to_string(std::stoll(written.substr(5, 12)));
  EXPECT_NE(read(dir_ / "resume.log").find("coordinator: resuming after step " + step), std::string::npos)
      << read(dir_ / "resume.log");
  EXPECT_TRUE(read(run_dir("cut") / "final_params.bin") == expected) << "final parameters differ after the resume";
  expect_same_records(comparable(run_dir("cut") / "metrics.jsonl"), expected_metrics);
}

// ddp checkpoints every step's state as well: stopped and resumed, the same end.
TEST_F(Resume, DdpResumedFromACheckpointEndsTheSame) {
  const std::string cfg = config(30, "");
  const std::string ddp = " --quiet --set 'algorithm={name: ddp}'";
  ASSERT_EQ(run("launch " + cfg + ddp + " --set run.name=whole", dir_ / "whole.log"), 0) << read(dir_ / "whole.log");
  // A finished run resumed redoes the steps after its newest common checkpoint (20).
  ASSERT_EQ(run("launch " + cfg + ddp + " --resume --set run.name=whole", dir_ / "again.log"), 0) << read(dir_ / "again.log");
  EXPECT_NE(read(dir_ / "again.log").find("coordinator: resuming after step 20"), std::string::npos) << read(dir_ / "again.log");
  ASSERT_EQ(run("launch " + cfg + ddp + " --set run.name=fresh", dir_ / "fresh.log"), 0);
  EXPECT_TRUE(read(run_dir("whole") / "final_params.bin") == read(run_dir("fresh") / "final_params.bin"));
  expect_same_records(comparable(run_dir("whole") / "metrics.jsonl"), comparable(run_dir("fresh") / "metrics.jsonl"));
}

// Every algorithm without a server role checkpoints in real runs: a finished run resumed from
// an older checkpoint (the coordinator's newest removed: its older one is then the newest all hold) redoes
// the steps after it and ends as it did, bitwise, with the same records. streaming_diloco
// with fragments in flight across step boundaries and int8 with stochastic rounding (its
// seeds follow the collectives' sequence numbers, which the resumed groups continue); DiPaCo
// with sub-groups, with fewer islands than paths (islands take paths in turn), and over gloo;
// diloco with algorithm.overlap, an all-reduce in flight at every checkpoint, also with islands
// of two ranks.
TEST_F(Resume, EveryAlgorithmResumesBitwiseFromAnOlderCheckpoint) {
  struct Case {
    std::string name, algorithm, extra, sets;
  };
  const std::string two_paths = "dipaco: {levels: [{blocks: [0], modules: 2}], routing: none}\n";
  const std::vector<Case> cases = {
      {"demo", "{name: demo}", "", ""},
      {"sparseloco", "{name: sparseloco, inner_steps: 5, chunk: 16, topk: 8}", "compression: [{quantize: lut2}]\n", ""},
      {"streaming_diloco", "{name: streaming_diloco, inner_steps: 5, fragments: 2, overlap_steps: 1, error_feedback: true}",
       "compression: [{quantize: int8, rounding: stochastic}]\n", " --set model.layers=2"},
      {"dipaco", "{name: dipaco, inner_steps: 5}", two_paths, ""},
      {"dipaco_tasks", "{name: dipaco, inner_steps: 5}",
       "dipaco: {levels: [{blocks: [0], modules: 2}, {blocks: [1], modules: 2}], routing: none}\n",
       " --set model.layers=2"},
      {"dipaco_gloo", "{name: dipaco, inner_steps: 5}", two_paths, " --set transport.kind=gloo"},
      // An all-reduce in flight at every checkpoint (each island waits for it at the cut and
      // saves its result): eager with int8 and error feedback over zmq, delayed over gloo.
      {"diloco_eager", "{name: diloco, inner_steps: 5, overlap: eager, error_feedback: true}",
       "compression: [{quantize: int8, rounding: stochastic}]\n", ""},
      {"diloco_delayed_gloo", "{name: diloco, inner_steps: 5, overlap: delayed}", "", " --set transport.kind=gloo"},
      // Islands of two ranks (docs/ranks.md): rank 0 writes the island's checkpoint and sends
      // it to rank 1 when the run resumes.
      {"diloco_eager_two_ranks", "{name: diloco, inner_steps: 5, overlap: eager}", "",
       " --set islands.ranks=2 --set transport.rank_port=" + std::to_string(port_ + 10)},
      // The exchange sharded over the two ranks (docs/ranks.md): rank 1's shard plane resumes
      // where rank 0's file says it was, with int8's stochastic seeds and error feedback.
      {"diloco_eager_sharded", "{name: diloco, inner_steps: 5, overlap: eager, error_feedback: true}",
       "compression: [{quantize: int8, rounding: stochastic}]\n",
       " --set islands.ranks=2 --set islands.shard_exchange=true --set model.layers=2 --set transport.rank_port=" +
           std::to_string(port_ + 10)},
      {"diloco_delayed_gloo_sharded", "{name: diloco, inner_steps: 5, overlap: delayed}", "",
       " --set transport.kind=gloo --set islands.ranks=2 --set islands.shard_exchange=true --set model.layers=2"
       " --set transport.rank_port=" + std::to_string(port_ + 10)},
      // Sharded sub-groups (DiPaCo's modules: rank 1 resumes each module's shard sub-group of
      // its plane where the file says) and all-gathers in parts (SparseLoCo).
      {"dipaco_sharded", "{name: dipaco, inner_steps: 5}", two_paths + "compression: [{quantize: int8, rounding: stochastic}]\n",
       " --set islands.ranks=2 --set islands.shard_exchange=true --set model.layers=2 --set transport.rank_port=" +
           std::to_string(port_ + 10)},
      {"sparseloco_sharded", "{name: sparseloco, inner_steps: 5, chunk: 16, topk: 8}", "compression: [{quantize: lut2}]\n",
       " --set islands.ranks=2 --set islands.shard_exchange=true --set model.layers=2 --set transport.rank_port=" +
           std::to_string(port_ + 10)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    fs::remove_all(dir_ / "runs");
    const std::string cfg = config(60, c.extra, c.algorithm);
    const std::string launch = "launch " + cfg + " --quiet" + c.sets;
    ASSERT_EQ(run(launch, dir_ / "first.log"), 0) << read(dir_ / "first.log");
    const std::string expected = read(run_dir("r") / "final_params.bin");
    ASSERT_GT(expected.size(), 100u);
    const auto expected_metrics = comparable(run_dir("r") / "metrics.jsonl");
    // The coordinator's two checkpoints (keep: 2); streaming_diloco's fall past fragments in
    // flight, so not necessarily at 40 and 50.
    std::vector<std::string> kept;
    for (const auto& f : fs::directory_iterator(run_dir("r") / "checkpoints/coordinator"))
      if (f.path().filename().string().rfind("step-", 0) == 0) kept.push_back(f.path().string());
    std::sort(kept.begin(), kept.end());
    ASSERT_EQ(kept.size(), 2u);
    fs::remove(kept[1]);
    const std::string older = std::to_string(std::stoll(fs::path(kept[0]).stem().string().substr(5)));
    ASSERT_EQ(run(launch + " --resume", dir_ / "again.log"), 0) << read(dir_ / "again.log");
    EXPECT_NE(read(dir_ / "again.log").find("coordinator: resuming after step " + older), std::string::npos)
        << read(dir_ / "again.log");
    EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected) << "final parameters differ after the resume";
    expect_same_records(comparable(run_dir("r") / "metrics.jsonl"), expected_metrics);
  }
}

// fedavg in real runs cuts its checkpoints at server rounds (docs/checkpoints.md "fedavg: a cut
// at a server round"): 8 rounds of 2 of 3 clients, a cut every 3 rounds. With seed 7 the
// rounds select {1,2} {1,2} {1,2} {0,1} {0,2} {1,2} {0,1} {0,1}: client 0 arrives at cut 3
// before its first step, and client 2's plan ends with round 5, before cut 6. A finished run
// resumed from cut 6 (client 2 runs nothing again) and then from cut 3 (every client runs)
// ends as it did: the server's final model bitwise, the same records.
TEST_F(Resume, FedAvgResumesBitwiseFromServerRoundCuts) {
  const std::string cfg =
      config(60, "", "{name: fedavg, rounds: 8, local_steps: 4, client_fraction: 0.67}", /*checkpoint_every=*/3);
  const std::string launch = "launch " + cfg + " --quiet";
  // A round record's `members` is the client's view of the live islands when its round starts:
  // when a finished client's departure reaches it races with its next pull (two uninterrupted
  // runs differ there too), so it is left out of the comparison.
  auto records = [&] {
    static const std::regex members(R"re(,"members":[0-9]+)re");
    std::vector<std::string> v = comparable(run_dir("r") / "metrics.jsonl");
    for (auto& l : v) l = std::regex_replace(l, members, "");
    std::sort(v.begin(), v.end());
    return v;
  };
  ASSERT_EQ(run(launch, dir_ / "first.log"), 0) << read(dir_ / "first.log");
  const std::string expected = read(run_dir("r") / "final_params.bin");
  ASSERT_GT(expected.size(), 100u);
  const auto expected_metrics = records();
  for (const char* step : {"3", "6"})
    ASSERT_TRUE(fs::exists(run_dir("r") / ("checkpoints/coordinator/step-00000000000" + std::string(step) + ".ckpt")))
        << step << "\n" << read(dir_ / "first.log");
  EXPECT_TRUE(fs::exists(run_dir("r") / "checkpoints/island-0/step-000000000003.ckpt"));
  EXPECT_FALSE(fs::exists(run_dir("r") / "checkpoints/island-2/step-000000000006.ckpt"))
      << "client 2 had finished before cut 6";

  ASSERT_EQ(run(launch + " --resume", dir_ / "newest.log"), 0) << read(dir_ / "newest.log");
  const std::string newest = read(dir_ / "newest.log");
  EXPECT_NE(newest.find("coordinator: resuming after step 6 (islands 0,1)"), std::string::npos) << newest;
  EXPECT_NE(newest.find("island 2: it had finished before the checkpoint resumed from; nothing to run"),
            std::string::npos)
      << newest;
  EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected) << "final parameters differ after the resume from 6";
  expect_same_records(records(), expected_metrics);

  fs::remove(run_dir("r") / "checkpoints/coordinator/step-000000000006.ckpt");
  ASSERT_EQ(run(launch + " --resume", dir_ / "older.log"), 0) << read(dir_ / "older.log");
  EXPECT_NE(read(dir_ / "older.log").find("coordinator: resuming after step 3 (islands 0,1,2)"), std::string::npos)
      << read(dir_ / "older.log");
  EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected) << "final parameters differ after the resume from 3";
  expect_same_records(records(), expected_metrics);
}

// What real runs do not checkpoint yet is refused before anything starts, with one line that
// names the key; --resume without checkpoints too; a run directory without checkpoints is
// refused by the coordinator.
TEST_F(Resume, RefusesWhatRealRunsDoNotCheckpoint) {
  const std::string cfg = config(20);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set algorithm.name=async_local_sgd", dir_ / "o.log"), 2);
  EXPECT_NE(read(dir_ / "o.log").find("checkpoint.every"), std::string::npos) << read(dir_ / "o.log");
  EXPECT_NE(read(dir_ / "o.log").find("not async_local_sgd"), std::string::npos) << read(dir_ / "o.log");
  ASSERT_EQ(run("coordinator " + cfg + " --quiet --resume --set checkpoint.every=0", dir_ / "r.log"), 2);
  EXPECT_NE(read(dir_ / "r.log").find("run.resume"), std::string::npos) << read(dir_ / "r.log");
  fs::create_directories(run_dir("r"));
  ASSERT_EQ(run("coordinator " + cfg + " --quiet --resume", dir_ / "n.log"), 2);
  EXPECT_NE(read(dir_ / "n.log").find("holds no usable checkpoint"), std::string::npos) << read(dir_ / "n.log");
  // An unfinished run directory that a coordinator does not pick up: it says why, then refuses.
  ASSERT_EQ(run("coordinator " + cfg + " --quiet", dir_ / "p.log"), 2);
  EXPECT_NE(read(dir_ / "p.log").find("not picking up the unfinished run"), std::string::npos) << read(dir_ / "p.log");
  EXPECT_NE(read(dir_ / "p.log").find("no running state"), std::string::npos) << read(dir_ / "p.log");
  EXPECT_NE(read(dir_ / "p.log").find("already exists"), std::string::npos) << read(dir_ / "p.log");
}

}  // namespace

namespace {

// The child of `launch` that runs `atoll coordinator`; -1 if none.
pid_t coordinator_child(pid_t launch) {
  for (pid_t c : atl::testing::children_of(launch)) {
    std::string cmdline = read("/proc/" + std::to_string(c) + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(" coordinator ") != std::string::npos) return c;
  }
  return -1;
}


// island -> global_xxh64 of its island_end record.
std::map<int, std::string> final_hashes(const fs::path& metrics) {
  std::map<int, std::string> out;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "island_end") continue;
    out[static_cast<int>(atl::core::json_find_number(l, "island").value_or(-1))] =
        json_find_string(l, "global_xxh64").value_or("");
  }
  return out;
}

}  // namespace

// The coordinator is SIGKILLed mid-round (a checkpoint may be in progress) and started again
// by hand with the same command: it picks the run up from its running state, the islands
// reconnect and go on (they never stopped training: their all-reduces are peer to peer), and
// the run finishes with every island, bitwise as the uninterrupted run, with nothing lost
// from metrics.jsonl and nothing written twice.
TEST_F(Resume, CoordinatorKilledMidRoundAndRestartedFinishesTheRun) {
  // 40 rounds: the kill falls at a random round among the first 12, well before the end (with
  // 16 rounds and a kill up to 400 ms after round 3 the run could finish first on a fast
  // machine, and the restart then rightly refused the finished run's directory).
  const std::string cfg = config(200, "");
  const std::string slow = " --set transport.heartbeat_timeout_ms=3000";
  for (const std::string kind : {"zmq", "gloo"}) {
    SCOPED_TRACE(kind);
    fs::remove_all(dir_ / "runs");
    ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=whole --set transport.kind=" + kind + slow, dir_ / "whole.log"), 0)
        << read(dir_ / "whole.log");
    const std::string expected = read(run_dir("whole") / "final_params.bin");
    ASSERT_GT(expected.size(), 100u);
    const std::vector<std::string> common = {cfg, "--quiet", "--set", "run.name=r", "--set", "transport.heartbeat_timeout_ms=3000",
                                             "--set", "transport.kind=" + kind};
    auto with = [&](std::vector<std::string> head, std::vector<std::string> tail = {}) {
      head.insert(head.end(), common.begin(), common.end());
      head.insert(head.end(), tail.begin(), tail.end());
      return head;
    };
    run_and_restart_the_coordinator(with, 12);
    if (HasFatalFailure()) return;
    const fs::path metrics = run_dir("r") / "metrics.jsonl";

    EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected) << "final parameters differ after the restart";
    const auto hashes = final_hashes(metrics);
    ASSERT_EQ(hashes.size(), 3u);
    EXPECT_EQ(hashes.at(0), hashes.at(1));
    EXPECT_EQ(hashes.at(0), hashes.at(2));
    expect_same_records(comparable(metrics), comparable(run_dir("whole") / "metrics.jsonl"));
    EXPECT_NE(read(run_dir("r") / "summary.json").find("\"islands_finished\":3"), std::string::npos);
  }
}

// A coordinator found through the run directory (transport.coordinator "tcp://*:PORT") may come
// back elsewhere, as a requeued Slurm job on another node does, and writes its new address
// there: the islands, which cannot reach the old one, follow the file, and the run finishes
// with every island, bitwise as the uninterrupted run. Here it comes back on another port.
TEST_F(Resume, ACoordinatorThatComesBackElsewhereIsFollowed) {
  const std::string cfg = config(200, "");
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=whole", dir_ / "whole.log"), 0) << read(dir_ / "whole.log");
  const std::string expected = read(run_dir("whole") / "final_params.bin");
  ASSERT_GT(expected.size(), 100u);
  const int elsewhere = port_ + 10;  // in this test's block of ports, past the islands'
  const std::vector<std::string> common = {cfg, "--set", "run.name=r", "--set",
                                           "transport.coordinator=tcp://*:" + std::to_string(port_)};
  auto with = [&](std::vector<std::string> head, std::vector<std::string> tail = {}) {
    head.insert(head.end(), common.begin(), common.end());
    head.insert(head.end(), tail.begin(), tail.end());
    return head;
  };
  run_and_restart_the_coordinator(with, 12, {"--set", "transport.coordinator=tcp://*:" + std::to_string(elsewhere)});
  if (HasFatalFailure()) return;
  for (int i = 0; i < 3; ++i) {
    const std::string log = read(dir_ / ("island-" + std::to_string(i) + ".log"));
    EXPECT_NE(log.find("island " + std::to_string(i) + ": the coordinator is now at tcp://"), std::string::npos) << log;
    EXPECT_NE(log.find(":" + std::to_string(elsewhere) + "; dialling it instead of tcp://"), std::string::npos) << log;
  }
  EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected) << "final parameters differ after the move";
  EXPECT_NE(read(run_dir("r") / "summary.json").find("\"islands_finished\":3"), std::string::npos);
  EXPECT_FALSE(fs::exists(run_dir("r") / "coordinator.address")) << "the address outlived the run";
}

// The coordinator of a run with a server role (the global model lives in it) is SIGKILLed
// mid-run and started again by hand: the server role goes on from the state it saved before
// its last reply, the islands resend what it had not answered, and the run finishes with
// every island. fedavg (rounds close when every client delivered; deltas are summed in
// client order): bitwise the uninterrupted run, records equal. async_local_sgd (applied in
// arrival order, which differs in any two real runs): every island finishes, every eval
// step is recorded once.
TEST_F(Resume, CoordinatorOfAServerRoleKilledAndRestartedFinishesTheRun) {
  for (const std::string algorithm : {"{name: fedavg, rounds: 30, local_steps: 4, client_fraction: 1}",
                                      "{name: async_local_sgd, inner_steps: 5}"}) {
    SCOPED_TRACE(algorithm);
    const bool fedavg = algorithm.find("fedavg") != std::string::npos;
    fs::remove_all(dir_ / "runs");
    const std::string cfg = config(150, "", algorithm, 0);
    const std::vector<std::string> common = {cfg, "--quiet", "--set", "run.name=r"};
    auto with = [&](std::vector<std::string> head, std::vector<std::string> tail = {}) {
      head.insert(head.end(), common.begin(), common.end());
      head.insert(head.end(), tail.begin(), tail.end());
      return head;
    };
    std::string expected;
    std::vector<std::string> expected_records;
    if (fedavg) {
      ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=whole", dir_ / "whole.log"), 0) << read(dir_ / "whole.log");
      expected = read(run_dir("whole") / "final_params.bin");
      expected_records = comparable(run_dir("whole") / "metrics.jsonl");
      ASSERT_GT(expected.size(), 100u);
    }
    run_and_restart_the_coordinator(with, 10);
    if (HasFatalFailure()) return;
    const fs::path metrics = run_dir("r") / "metrics.jsonl";
    EXPECT_NE(read(run_dir("r") / "summary.json").find("\"islands_finished\":3"), std::string::npos);
    const std::vector<std::string> got = comparable(metrics);
    if (fedavg) {
      EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected) << "final parameters differ after the restart";
      expect_same_records(got, expected_records);
      continue;
    }
    // Each eval step of the server role once, the last one at every applied local step.
    std::set<double> eval_steps;
    int evals = 0;
    for (const auto& l : got) {
      if (json_find_string(l, "event") != "eval") continue;
      ++evals;
      eval_steps.insert(atl::core::json_find_number(l, "step").value_or(-1));
    }
    EXPECT_EQ(static_cast<size_t>(evals), eval_steps.size()) << "an eval step recorded twice";
    ASSERT_FALSE(eval_steps.empty());
    EXPECT_EQ(*eval_steps.rbegin(), 450) << "the final eval: 3 islands x 150 local steps applied";
  }
}

// `atoll launch` starts a coordinator that died again; the run finishes with every island on
// the same global model, and launch exits 0.
TEST_F(Resume, LaunchRestartsACoordinatorThatDied) {
  const std::string cfg = config(80, "");
  const pid_t pid = atl::testing::spawn_atoll(
      {"launch", cfg, "--quiet", "--set", "run.name=r", "--set", "transport.heartbeat_timeout_ms=3000"}, dir_ / "launch.log");
  ASSERT_GT(pid, 0);
  const fs::path metrics = run_dir("r") / "metrics.jsonl";
  ASSERT_TRUE(wait_for(metrics, "\"round\":3,", 60)) << read(dir_ / "launch.log");
  const pid_t coordinator = coordinator_child(pid);
  ASSERT_GT(coordinator, 0);
  ASSERT_EQ(kill(coordinator, SIGKILL), 0);
  EXPECT_EQ(atl::testing::wait_exit(pid, 120), 0) << read(dir_ / "launch.log");
  const std::string log = read(dir_ / "launch.log");
  EXPECT_NE(log.find("launch: the coordinator died (signal 9); restarting it"), std::string::npos) << log;
  const auto hashes = final_hashes(metrics);
  ASSERT_EQ(hashes.size(), 3u);
  EXPECT_EQ(hashes.at(0), hashes.at(1));
  EXPECT_EQ(hashes.at(0), hashes.at(2));
  EXPECT_NE(read(run_dir("r") / "summary.json").find("\"islands_finished\":3"), std::string::npos);
}

// Over gloo: a run resumed with --resume ends as it did (a finished run redoes the steps
// after its newest checkpoint, 10); with the star all-reduce a restarted coordinator refuses
// to pick the run up, with one line.
TEST_F(Resume, GlooResumesAndAStarRunRefusesACoordinatorRestart) {
  const std::string cfg = config(20, "");
  const std::string gloo = " --quiet --set transport.kind=gloo";
  ASSERT_EQ(run("launch " + cfg + gloo, dir_ / "g.log"), 0) << read(dir_ / "g.log");
  const std::string expected = read(run_dir("r") / "final_params.bin");
  ASSERT_GT(expected.size(), 100u);
  const auto expected_metrics = comparable(run_dir("r") / "metrics.jsonl");
  ASSERT_EQ(run("launch " + cfg + gloo + " --resume", dir_ / "again.log"), 0) << read(dir_ / "again.log");
  EXPECT_NE(read(dir_ / "again.log").find("coordinator: resuming after step 10"), std::string::npos) << read(dir_ / "again.log");
  EXPECT_TRUE(read(run_dir("r") / "final_params.bin") == expected);
  expect_same_records(comparable(run_dir("r") / "metrics.jsonl"), expected_metrics);
  // (A coordinator restart over gloo: CoordinatorKilledMidRoundAndRestartedFinishesTheRun.)
  // The running state of a run with the star all-reduce, as a coordinator killed mid-run
  // leaves it: a restart refuses to pick it up, with one line.
  const std::string star = " --quiet --set transport.collective=star --set checkpoint.every=0 --set run.name=s";
  ASSERT_EQ(run("launch " + cfg + star, dir_ / "s.log"), 0) << read(dir_ / "s.log");
  ASSERT_TRUE(fs::exists(run_dir("s") / "checkpoints/coordinator/run-state.ckpt"));
  fs::remove(run_dir("s") / "summary.json");
  ASSERT_EQ(run("coordinator " + cfg + star, dir_ / "c.log"), 2);
  EXPECT_NE(read(dir_ / "c.log").find("key 'transport.collective': a coordinator restarted mid-run cannot pick up a run "
                                      "with the star all-reduce"),
            std::string::npos)
      << read(dir_ / "c.log");
}
