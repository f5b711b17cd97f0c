// The atoll binary as a user meets it: bad configs give one clear line and exit code 2.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/cli_test_util.h"

namespace fs = std::filesystem;

namespace {

using atl::testing::Result;
using atl::testing::run;

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// How often the output says `needle`.
int count(const std::string& s, const std::string& needle) {
  int n = 0;
  for (size_t at = s.find(needle); at != std::string::npos; at = s.find(needle, at + 1)) ++n;
  return n;
}

// The output of shell command `cmd`, stdout and stderr together, and its exit status.
Result run_command(const std::string& cmd) {
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (p && fgets(buf.data(), buf.size(), p)) r.output += buf.data();
  const int status = p ? pclose(p) : -1;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// `env ENV ATOLL_BINARY ARGS`.
Result run_env(const std::string& env, const std::string& args) {
  return run_command("env " + env + " " + std::string(ATOLL_BINARY) + " " + args + " 2>&1");
}

// libgomp reads OMP_WAIT_POLICY when it loads, before main(); the engine sets PASSIVE before
// that (src/cli/main.cpp, from the executable's pre-initialisation) without re-executing
// itself, and a user's own setting wins. OMP_DISPLAY_ENV makes libgomp print what it read,
// once per process start: one start, not two (the front end, which hands `export` to the
// engine, does not load libgomp).
TEST(Startup, OpenMpWaitsPassivelyWithoutReExecution) {
  const std::string engine_command = "export /nonexistent-atoll-run";
  const Result plain = run_env("-u OMP_WAIT_POLICY OMP_DISPLAY_ENV=true", engine_command);
  EXPECT_EQ(count(plain.output, "OMP_WAIT_POLICY = "), 1) << plain.output;
  EXPECT_EQ(count(plain.output, "OMP_WAIT_POLICY = 'PASSIVE'"), 1) << plain.output;
  const Result user = run_env("OMP_WAIT_POLICY=ACTIVE OMP_DISPLAY_ENV=true", engine_command);
  EXPECT_EQ(count(user.output, "OMP_WAIT_POLICY = "), 1) << user.output;
  EXPECT_EQ(count(user.output, "OMP_WAIT_POLICY = 'ACTIVE'"), 1) << user.output;
}

// The front end answers help, usage errors, `validate`, `report`, `compare`, a sweep's
// plan and the refusal of a config that any command takes without loading libtorch (the loader's own record of the files it opens), and hands a
// command that trains to the engine, which loads it (docs/architecture.md "Front end and engine").
TEST(Startup, FrontEndDoesNotLoadLibtorch) {
  const std::string config = std::string(ATOLL_SOURCE_DIR) + "/configs/quickstart.yaml";
  const std::string sweep = std::string(ATOLL_SOURCE_DIR) + "/configs/sweeps/compare-algorithms.yaml";
  const std::string out = (fs::temp_directory_path() / ("atoll_front_" + std::to_string(::getpid()))).string();
  for (const std::string& args : std::vector<std::string>{
           "--help", "validate " + config, "validate " + config + " --set train.stepz=3", "simulate",
           "simulate " + config + " --set train.stepz=3", "launch " + config + " --set algorithm.topk=8",
           "island " + config + " --id 0 --set train.steps=-1", "sweep " + sweep + " --set x=1",
           "sweep " + sweep + " --dry-run --out " + out, "compare /nonexistent-atoll-run",
           "report /nonexistent-atoll-sweep"}) {
    const Result r = run_env("LD_DEBUG=files", args);
    EXPECT_EQ(count(r.output, "file=libtorch"), 0) << args << "\n" << r.output.substr(0, 2000);
    EXPECT_GT(count(r.output, "file=libyaml-cpp"), 0) << args << ": the loader's record is missing";
  }
  const Result engine = run_env("LD_DEBUG=files", "export /nonexistent-atoll-run");
  EXPECT_GT(count(engine.output, "file=libtorch_cpu"), 0) << engine.output.substr(0, 2000);
}

// `validate`, a sweep's plan, `compare` and `report` answered by the front end and by the
// engine: the same output, the same refusals.
TEST(Startup, FrontEndAndEngineAnswerAlike) {
  const std::string front = ATOLL_BINARY;
  const std::string engine = front.substr(0, front.rfind('/') + 1) + "atoll-engine";
  const std::string config = std::string(ATOLL_SOURCE_DIR) + "/configs/quickstart.yaml";
  for (const std::string& args : std::vector<std::string>{"validate " + config, "validate " + config + " --set algorithm.topk=8",
                                 "validate " + config + " --set model.dim=100", "validate " + config +
                                 " --set compression=[{op: topk, fraction: 0.1}] --set algorithm.name=demo",
                                 "validate " + config + " --set run.device=gpu",
                                 "simulate " + config + " --set algorithm.topk=8",
                                 "coordinator " + config + " --set islands.events=[{kill: 1, at_step: 2}]",
                                 "sweep " + std::string(ATOLL_SOURCE_DIR) + "/configs/sweeps/compare-algorithms.yaml "
                                 "--dry-run --out /nonexistent-atoll-sweeps",
                                 "compare /nonexistent-atoll-run", "report /nonexistent-atoll-sweep"}) {
    const Result a = run(args);
    const Result e = run_command(engine + " " + args + " 2>&1");
    EXPECT_EQ(a.code, e.code) << args;
    EXPECT_EQ(a.output, e.output) << args;
  }
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atoll_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "corpus.txt") << std::string(20000, 'a');
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& yaml) {
    std::ofstream(dir_ / name) << yaml;
    return (dir_ / name).string();
  }
  std::string good() const {
    return "data: {kind: text, path: " + (dir_ / "corpus.txt").string() + "}\n";
  }
  // A DiLoCo run of 10 steps of 10 ms on the simulator's clock, named `name` (also its file):
  // an MLP of `hidden` layers on `dim` synthetic features, `islands` and `network` sections.
  std::string clock_config(const std::string& name, const std::string& hidden, int dim, const std::string& islands,
                           const std::string& network) {
    return write(name + ".yaml",
                 "run: {name: " + name + ", threads: 1, out_dir: " + (dir_ / "runs").string() + "}\n" +
                     "model: {name: mlp, hidden: " + hidden + "}\n" +
                     "data: {kind: synthetic, synthetic_examples: 64, synthetic_dim: " + std::to_string(dim) +
                     ", synthetic_classes: 2}\n" + "train: {steps: 10, batch_size: 4, warmup_steps: 0, eval_every: 0}\n" +
                     "islands: " + islands + "\n" + "algorithm: {name: diloco, inner_steps: 5}\n" +
                     "compute: {step_time_s: 0.01}\n" + "network: " + network + "\n");
  }
  // `atoll simulate` of the config at `path` (run.name `name`, under dir_/runs) with `sets`:
  // its summary's sim_time_s (-1 when it has none).
  double sim_time(const std::string& path, const std::string& name, const std::string& sets) {
    EXPECT_EQ(run("simulate " + path + " --force --quiet" + sets).code, 0);
    std::ifstream in(dir_ / "runs" / name / "summary.json");
    const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = s.find("\"sim_time_s\":");
    return at == std::string::npos ? -1.0 : std::stod(s.substr(at + 13));
  }
  fs::path dir_;
};

TEST_F(Cli, ValidateAcceptsAGoodConfig) {
  Result r = run("validate " + write("ok.yaml", good()));
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("ok"), std::string::npos);
}

TEST_F(Cli, MisspeltKeyNamesFileLineKeyAndSuggestion) {
  const std::string path = write("typo.yaml", good() + "algorithm:\n  name: diloco\n  inner_step: 10\n");
  Result r = run("validate " + path);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find(path + ":4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("inner_step"), std::string::npos);
  EXPECT_NE(r.output.find("algorithm.inner_steps"), std::string::npos) << r.output;
}

TEST_F(Cli, WrongTypeIsOneLineExitTwo) {
  Result r = run("validate " + write("type.yaml", good() + "train:\n  batch_size: lots\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("train.batch_size"), std::string::npos) << r.output;
}

TEST_F(Cli, NegativeStepsIsOneLineExitTwo) {
  Result r = run("validate " + write("neg.yaml", good() + "train:\n  steps: -5\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("train.steps"), std::string::npos) << r.output;
}

TEST_F(Cli, MissingDataFileIsOneLineExitTwo) {
  Result r = run("validate " + write("missing.yaml", "data: {kind: text, path: /nonexistent/kjv.txt}\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/kjv.txt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("data.path"), std::string::npos) << r.output;
}

TEST_F(Cli, MissingWarmStartFileIsOneLineExitTwo) {
  Result r = run("validate " + write("warm.yaml", good() + "model: {init_from: /nonexistent/final_params.bin}\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("model.init_from"), std::string::npos) << r.output;
}

TEST_F(Cli, UnknownAlgorithmListsValidNames) {
  Result r = run("validate " + write("algo.yaml", good() + "algorithm: {name: dilogo}\n"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("diloco"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fedavg"), std::string::npos) << r.output;
}

TEST_F(Cli, SetOverridesApplyAndAreValidated) {
  const std::string path = write("ok.yaml", good());
  EXPECT_EQ(run("validate " + path + " --set algorithm.inner_steps=7").code, 0);
  Result r = run("validate " + path + " --set algorithm.inner_stepz=7");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("algorithm.inner_steps"), std::string::npos) << r.output;
}

// Every config and sweep the repository ships validates (run from the source tree, where
// their data/ paths point). model.init_from is cleared: the warm-start file is made by a
// run (configs/pretrain-kjv.yaml), not by setup.
TEST(ShippedConfigs, AllValidate) {
  const fs::path root = ATOLL_SOURCE_DIR;
  if (!fs::exists(root / "data/kjv.txt"))
    GTEST_SKIP() << "data/ is not prepared (scripts/setup.sh prepares it)";
  int checked = 0;
  for (const auto& entry : fs::directory_iterator(root / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string rel = fs::relative(entry.path(), root).string();
    Result r = run("validate " + rel + " --set model.init_from=", root.string());
    EXPECT_EQ(r.code, 0) << rel << ": " << r.output;
    ++checked;
  }
  for (const auto& entry : fs::directory_iterator(root / "configs/sweeps")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string rel = fs::relative(entry.path(), root).string();
    Result r = run("sweep " + rel + " --dry-run", root.string());
    EXPECT_EQ(r.code, 0) << rel << ": " << r.output;
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// Every reproduction sweep (configs/sweeps/paper-*.yaml, docs/reproductions.md) still runs:
// its smoke plan (`atoll sweep --smoke`: the first run of each algorithm, shrunk by the file's
// smoke: keys) ends ok, and small (at most 20 steps), so that none rots between the hour-long
// runs that fill the document.
TEST(ShippedConfigs, EveryPaperSweepsSmokeRunsEnd) {
  const fs::path root = ATOLL_SOURCE_DIR;
  if (!fs::exists(root / "data/kjv.txt") || !fs::exists(root / "data/fashion-mnist"))
    GTEST_SKIP() << "data/ is not prepared (scripts/setup.sh prepares it)";
  const fs::path out = fs::temp_directory_path() / ("atoll_paper_smoke_" + std::to_string(::getpid()));
  int sweeps = 0;
  for (const auto& entry : fs::directory_iterator(root / "configs/sweeps")) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("paper-", 0) != 0 || entry.path().extension() != ".yaml") continue;
    ++sweeps;
    const std::string rel = fs::relative(entry.path(), root).string();
    Result r = run("sweep " + rel + " --smoke --no-report --out " + out.string(), root.string());
    EXPECT_EQ(r.code, 0) << rel << ": " << r.output;
    // Every run ended ok and small: a run of more than 20 steps means the file lacks smoke: keys.
    int runs = 0;
    const fs::path runs_dir = out / (entry.path().stem().string() + "-smoke") / "runs";
    for (const auto& run_dir : fs::directory_iterator(runs_dir)) {
      ++runs;
      std::ifstream in(run_dir.path() / "summary.json");
      const std::string summary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      EXPECT_NE(summary.find("\"status\":\"finished\""), std::string::npos) << rel << ": " << summary;
      const size_t at = summary.find("\"steps\":");
      ASSERT_NE(at, std::string::npos) << rel << ": " << summary;
      EXPECT_LE(std::stoll(summary.substr(at + 8)), 20) << rel << ": " << run_dir.path().filename();
    }
    EXPECT_GE(runs, 1) << rel << ": " << r.output;
  }
  fs::remove_all(out);
  EXPECT_GE(sweeps, 2);
}

TEST_F(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(run("").code, 2);
  EXPECT_EQ(run("frobnicate").code, 2);
  EXPECT_EQ(run("simulate").code, 2);
}

}  // namespace

// islands.ranks on the simulator's clock (docs/ranks.md): a step takes step_time / (R ×
// compute.rank_scaling) plus the ring all-reduce on network.intra_island_* (here 2 (R - 1)
// latencies; the bandwidth made free).
TEST_F(Cli, RanksDivideTheSimulatedStepAndAddTheIslandsAllReduce) {
  const std::string path =
      clock_config("r", "[8]", 4, "{count: 2}", "{intra_island_mbps: 1e12, intra_island_latency_ms: 0}");
  auto sim_time = [&](const std::string& sets) { return Cli::sim_time(path, "r", sets); };
  const double one = sim_time("");
  ASSERT_GT(one, 0.1);
  EXPECT_NEAR(one - sim_time(" --set islands.ranks=2"), 10 * 0.005, 1e-6);
  EXPECT_NEAR(sim_time(" --set islands.ranks=2 --set compute.rank_scaling=0.5"), one, 1e-6);
  EXPECT_NEAR(sim_time(" --set islands.ranks=2 --set network.intra_island_latency_ms=1") -
                  sim_time(" --set islands.ranks=2"),
              10 * 2 * 1e-3, 1e-6);
}

// A sharded exchange on the simulator's clock (docs/ranks.md): its shards share the island's
// link, so a round's WAN time is the unsharded one's; with network.rank_links each rank has a
// link of its own, and the round takes about as long as its largest shard alone.
TEST_F(Cli, ShardsShareTheIslandsLinkUnlessEachRankHasItsOwn) {
  const std::string path =
      clock_config("s", "[256, 128]", 32, "{count: 3, ranks: 2}",
                   "{bandwidth_mbps: 10, latency_ms: 0, intra_island_mbps: 1e12, intra_island_latency_ms: 0}");
  auto sim_time = [&](const std::string& sets) { return Cli::sim_time(path, "s", sets); };
  const double compute = sim_time(" --set network.bandwidth_mbps=1e12");
  const double whole = sim_time("") - compute;
  const double shared = sim_time(" --set islands.shard_exchange=true") - compute;
  const double own = sim_time(" --set islands.shard_exchange=true --set network.rank_links=true") - compute;
  std::printf("WAN seconds: whole %.4f, sharded %.4f, sharded on the ranks' own links %.4f\n", whole, shared, own);
  ASSERT_GT(whole, 0.1);  // 2 rounds of a 43k-parameter ring at 10 Mbit/s
  // Each shard is timed as one of two transfers sharing the island's link: as long as the whole
  // exchange, or longer by the larger shard's excess (shards are cut at multiples of 4,096).
  EXPECT_GT(shared, 0.95 * whole);
  EXPECT_LT(shared, 1.3 * whole);
  // On links of their own the two shards move at once: half of that.
  EXPECT_NEAR(own, shared / 2, 0.05 * shared);
  // Without a sharded exchange there is nothing for the ranks' links to carry.
  EXPECT_EQ(run("simulate " + path + " --force --quiet --set network.rank_links=true").code, 2);
}
