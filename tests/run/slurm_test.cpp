// A Slurm task's place in the run (src/run/slurm.h): the hostlist syntax, SLURM_TASKS_PER_NODE,
// the island and rank of a task of one step or of a job array, the host of an island's rank
// 0, the task's device, and the refusals. Then `atoll island` without --id as srun starts it:
// real processes given the variables Slurm sets for each task, then started by a real Slurm
// (munged, slurmctld and slurmd on this machine: scripts/slurm_local.sh) with srun and as a
// job array, ending bitwise as `atoll launch` of the same run.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/run/slurm.h"
#include "tests/cli_test_util.h"
#include "tests/run/process_test_util.h"

namespace atl::testing {
// The output of a shell command (what it prints on stdout).
inline std::string run_shell(const std::string& cmd) {
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    ::pclose(p);
  }
  return out;
}
}  // namespace atl::testing

namespace atl::run::slurm {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> hosts(const std::string& list) {
  auto h = expand_hostlist(list);
  EXPECT_TRUE(h.is_ok()) << list << ": " << h.status().message();
  return h.is_ok() ? h.value() : std::vector<std::string>{};
}

std::string hostlist_error(const std::string& list) {
  auto h = expand_hostlist(list);
  return h.is_ok() ? "" : h.status().message();
}

TEST(SlurmHostlist, ExpandsRangesListsAndPaddingInSlurmsOrder) {
  using V = std::vector<std::string>;
  EXPECT_EQ(hosts("n01"), V{"n01"});
  EXPECT_EQ(hosts("n[01-04,07]"), (V{"n01", "n02", "n03", "n04", "n07"}));
  EXPECT_EQ(hosts("n[08-10]"), (V{"n08", "n09", "n10"}));  // the first bound's width
  EXPECT_EQ(hosts("n[1-3]"), (V{"n1", "n2", "n3"}));
  EXPECT_EQ(hosts("gpu7,n[1-2],login"), (V{"gpu7", "n1", "n2", "login"}));
  EXPECT_EQ(hosts("r[1-2]-n[1-2]"), (V{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}));
  EXPECT_EQ(hosts("a[3]b"), (V{"a3b"}));
  EXPECT_EQ(hosts("node-[009-011].cluster"), (V{"node-009.cluster", "node-010.cluster", "node-011.cluster"}));
}

TEST(SlurmHostlist, RefusesWhatIsNotAHostlist) {
  for (const auto& [list, part] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty"},
           {"n[1-3", "'[' without ']'"},
           {"n1-3]", "']' without '['"},
           {"n[[1]]", "nested"},
           {"n[]", "is not a number"},
           {"n[3-1]", "runs backwards"},
           {"n[a-b]", "is not a number"},
           {"n[1-2,]", "is not a number"},
           {"n1,,n2", "an empty name"},
           {"n[0-99999999]", "too long"},
       }) {
    SCOPED_TRACE(list);
    EXPECT_NE(hostlist_error(list).find(part), std::string::npos) << hostlist_error(list);
  }
}

TEST(SlurmTasksPerNode, ExpandsRepeats) {
  auto t = expand_tasks_per_node("2(x3),1");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t.value(), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_tasks_per_node("4").value(), std::vector<int>{4});
  for (const char* bad : {"", "2(3)", "x", "2(x)", "2(x3", "-1"}) {
    SCOPED_TRACE(bad);
    EXPECT_FALSE(expand_tasks_per_node(bad).is_ok());
  }
}

// An environment for placement(): the variables of `vars`, nothing else.
Getenv env(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(SlurmPlacement, NotASlurmTaskWithoutProcid) {
  auto p = placement(4, 1, env({{"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(p.is_ok());
  EXPECT_FALSE(p.value().has_value());
}

// One step of islands x ranks tasks, block distribution over n[1-3] with 2, 2 and 4 tasks:
// an island's ranks are consecutive tasks, its rank 0 on the node of its first task.
TEST(SlurmPlacement, OneStepPlacesIslandsOnConsecutiveTasks) {
  const std::map<std::string, std::string> step = {{"SLURM_NTASKS", "8"},
                                                   {"SLURM_JOB_NODELIST", "n[1-3]"},
                                                   {"SLURM_TASKS_PER_NODE", "2(x2),4"}};
  const std::vector<std::tuple<int, int, int, std::string>> want = {
      // procid, island, rank, rank 0's host (islands of 2 ranks)
      {0, 0, 0, "n1"}, {1, 0, 1, "n1"}, {2, 1, 0, "n2"}, {3, 1, 1, "n2"},
      {4, 2, 0, "n3"}, {5, 2, 1, "n3"}, {6, 3, 0, "n3"}, {7, 3, 1, "n3"}};
  for (const auto& [procid, island, rank, host] : want) {
    SCOPED_TRACE(procid);
    auto vars = step;
    vars["SLURM_PROCID"] = std::to_string(procid);
    vars["SLURM_LOCALID"] = std::to_string(procid < 4 ? procid % 2 : procid - 4);
    auto p = placement(4, 2, env(vars));
    ASSERT_TRUE(p.is_ok()) << p.status().message();
    ASSERT_TRUE(p.value().has_value());
    EXPECT_EQ(p.value()->island, island);
    EXPECT_EQ(p.value()->rank, rank);
    EXPECT_EQ(p.value()->rank0_host, host);
    EXPECT_EQ(p.value()->local_id, procid < 4 ? procid % 2 : procid - 4);
    EXPECT_FALSE(p.value()->array);
  }
  // One rank per island: the island is the task.
  auto vars = step;
  vars["SLURM_PROCID"] = "5";
  auto p = placement(8, 1, env(vars));
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p.value()->island, 5);
  EXPECT_EQ(p.value()->rank, 0);
  EXPECT_EQ(p.value()->rank0_host, "n3");
}

// A job array: element K is island K, its tasks its ranks; a requeued element says so.
TEST(SlurmPlacement, ArrayElementIsAnIsland) {
  auto p = placement(4, 2, env({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_ARRAY_TASK_ID", "3"},
                                {"SLURM_JOB_NODELIST", "gpu[07-08]"}, {"SLURM_TASKS_PER_NODE", "1(x2)"},
                                {"SLURM_RESTART_COUNT", "2"}}));
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(p.value()->island, 3);
  EXPECT_EQ(p.value()->rank, 1);
  EXPECT_EQ(p.value()->rank0_host, "gpu07");
  EXPECT_EQ(p.value()->restarts, 2);
  EXPECT_TRUE(p.value()->array);
}

TEST(SlurmPlacement, AnEnvironmentThatDoesNotFitIsRefusedNamingTheVariables) {
  struct Case {
    std::map<std::string, std::string> vars;
    StatusCode code;
    std::string part;
  };
  const std::vector<Case> cases = {
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "3"}}, StatusCode::kInvalidArgument,
       "SLURM_NTASKS=3 but the run has 4 islands of 1 rank: one task per rank, 4 tasks"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}, {"SLURM_ARRAY_TASK_ID", "4"}}, StatusCode::kInvalidArgument,
       "SLURM_ARRAY_TASK_ID=4 but the run has 4 islands of 1 rank: array indices are island ids, 0 to 3"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_ARRAY_TASK_ID", "1"}}, StatusCode::kInvalidArgument,
       "SLURM_NTASKS=2 in array element 1 but the run has 4 islands of 1 rank"},
      {{{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "4"}}, StatusCode::kCorrupt,
       "SLURM_PROCID='x' is not a non-negative integer"},
      {{{"SLURM_PROCID", "0"}}, StatusCode::kCorrupt, "SLURM_NPROCS is not set"},
      {{{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}}, StatusCode::kCorrupt, "SLURM_PROCID=4 is not below SLURM_NTASKS=4"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-2"}}, StatusCode::kCorrupt,
       "SLURM_JOB_NODELIST: hostlist 'n[1-2': '[' without ']'"},
      {{{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_TASKS_PER_NODE", "2"}},
       StatusCode::kCorrupt, "SLURM_TASKS_PER_NODE='2' counts 1 nodes but SLURM_JOB_NODELIST='n[1-2]' names 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.part);
    auto p = placement(4, 1, env(c.vars));
    ASSERT_FALSE(p.is_ok());
    EXPECT_EQ(p.status().code(), c.code);
    EXPECT_NE(p.status().message().find(c.part), std::string::npos) << p.status().message();
  }
}

// Islands of several ranks need consecutive tasks on nodes in blocks; a one-rank island is its
// task wherever it runs (srun in a batch job says "cyclic"), on the node SLURMD_NODENAME names.
TEST(SlurmPlacement, OnlyIslandsOfSeveralRanksNeedTheBlockDistribution) {
  auto several = placement(2, 2, env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_DISTRIBUTION", "cyclic"}}));
  ASSERT_FALSE(several.is_ok());
  EXPECT_EQ(several.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(several.status().message().find("SLURM_DISTRIBUTION='cyclic': atoll places an island's ranks on "
                                            "consecutive tasks, which needs the block distribution"),
            std::string::npos) << several.status().message();
  auto one = placement(4, 1, env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}, {"SLURM_DISTRIBUTION", "cyclic"},
                                  {"SLURMD_NODENAME", "n7"}, {"SLURM_JOB_NODELIST", "n[6-7]"},
                                  {"SLURM_TASKS_PER_NODE", "2(x2)"}}));
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  EXPECT_EQ(one.value()->island, 2);
  EXPECT_EQ(one.value()->rank0_host, "n7");
}

TEST(SlurmDevice, CudaIsTheTasksOwnGpu) {
  Placement p;
  p.local_id = 3;
  EXPECT_EQ(task_device("cuda", p, env({})), "cuda:3");
  EXPECT_EQ(task_device("cuda", p, env({{"CUDA_VISIBLE_DEVICES", "5"}})), "cuda:0");  // bound by Slurm
  EXPECT_EQ(task_device("cuda:1", p, env({})), "cuda:1");                             // as given
  EXPECT_EQ(task_device("cpu", p, env({})), "cpu");
}

// ---- `atoll island` without --id, as srun starts it ------------------------------------------

// dir/c.yaml: two islands of a small GPT with DiLoCo (H = 5) on dir/corpus.txt, the
// coordinator on `port` and the data planes after it; `train` is the train: section.
std::string write_config(const fs::path& dir, int port, const std::string& train) {
  std::ostringstream y;
  y << "run: {name: r, seed: 3, out_dir: " << (dir / "runs").string() << ", threads: 1}\n"
    << "model: {name: gpt, layers: 1, heads: 2, dim: 16, seq_len: 16}\n"
    << "data: {kind: text, path: " << (dir / "corpus.txt").string() << "}\n"
    << "train: " << train << "\n"
    << "islands: {count: 2}\n"
    << "algorithm: {name: diloco, inner_steps: 5}\n"
    << "transport: {coordinator: \"tcp://127.0.0.1:" << port << "\", base_port: " << port + 1 << "}\n";
  const std::string path = (dir / "c.yaml").string();
  std::ofstream(path) << y.str();
  return path;
}

class SlurmIsland : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = atl::testing::make_test_dir("atoll_slurm_test");
    port_ = atl::testing::test_port(14000);
    config_ = write_config(dir_, port_, "{steps: 20, batch_size: 4, warmup_steps: 0, eval_every: 0}");
  }
  void TearDown() override {
    for (const char* v : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"})
      ::unsetenv(v);
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::string config_;
  int port_ = 0;
};

TEST_F(SlurmIsland, TasksOfOneStepRunTheIslandsTheirIdsSay) {
  const pid_t coordinator = atl::testing::spawn_atoll({"coordinator", config_, "--quiet"}, dir_ / "coordinator.log");
  std::vector<pid_t> islands;
  ::setenv("SLURM_NTASKS", "2", 1);
  ::setenv("SLURM_JOB_NODELIST", "localhost", 1);
  ::setenv("SLURM_TASKS_PER_NODE", "2", 1);
  for (int task = 0; task < 2; ++task) {  // the environment srun gives task `task`, no --id
    ::setenv("SLURM_PROCID", std::to_string(task).c_str(), 1);
    ::setenv("SLURM_LOCALID", std::to_string(task).c_str(), 1);
    islands.push_back(atl::testing::spawn_atoll({"island", config_, "--quiet"}, dir_ / ("task-" + std::to_string(task) + ".log")));
  }
  for (int task = 0; task < 2; ++task) {
    const std::string log = atl::testing::read(dir_ / ("task-" + std::to_string(task) + ".log"));
    EXPECT_EQ(atl::testing::wait_exit(islands[static_cast<size_t>(task)], 90), 0) << log;
  }
  EXPECT_EQ(atl::testing::wait_exit(coordinator, 30), 0) << atl::testing::read(dir_ / "coordinator.log");
  for (int task = 0; task < 2; ++task) {
    const std::string log = atl::testing::read(dir_ / ("task-" + std::to_string(task) + ".log"));
    EXPECT_NE(log.find("island " + std::to_string(task) + " from the Slurm task's environment, device cpu"),
              std::string::npos) << log;
  }
  EXPECT_NE(atl::testing::read(dir_ / "runs/r/summary.json").find("\"islands_finished\":2"), std::string::npos);
}

// Refused before anything starts, one line, exit 2: a task count that does not fit the run
// (naming the config's key), a malformed variable, and no --id outside Slurm.
TEST_F(SlurmIsland, AnEnvironmentThatDoesNotFitIsOneLine) {
  using atl::testing::run;
  ::setenv("SLURM_PROCID", "0", 1);
  ::setenv("SLURM_NTASKS", "3", 1);
  auto r = run("island " + config_);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "atoll: error: " + config_ + ":5: key 'islands.count': does not fit this Slurm task: "
                      "SLURM_NTASKS=3 but the run has 2 islands of 1 rank: one task per rank, 2 tasks\n");
  // Islands of two ranks: four tasks, not two.
  ::setenv("SLURM_NTASKS", "2", 1);
  r = run("island " + config_ + " --set islands.ranks=2");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "atoll: error: " + config_ + ":5: key 'islands.count': does not fit this Slurm task: "
                      "SLURM_NTASKS=2 but the run has 2 islands of 2 ranks: one task per rank, 4 tasks\n");
  ::setenv("SLURM_JOB_NODELIST", "n[1-", 1);
  r = run("island " + config_);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "atoll: error: island: the Slurm task's environment: SLURM_JOB_NODELIST: hostlist 'n[1-': "
                      "'[' without ']'\n");
  ::unsetenv("SLURM_PROCID");
  r = run("island " + config_);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "atoll: error: island: --id is required outside a Slurm task (SLURM_PROCID is not set)\n");
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "a refused island started a run";
}

// ---- a real Slurm: scripts/slurm_local.sh ------------------------------------------------------

class RealSlurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;  // SetUp skips
    cluster_ = new fs::path(fs::temp_directory_path() / ("atoll_slurm_cluster_" + std::to_string(::getpid())));
    const int port = atl::testing::test_port(14000);
    const std::string cmd = "scripts/slurm_local.sh start " + cluster_->string() + " " + std::to_string(port + 10) +
                            " > " + (fs::temp_directory_path() / "atoll_slurm_start.log").string() + " 2>&1";
    started_ = std::system(cmd.c_str()) == 0;
    ::setenv("SLURM_CONF", (*cluster_ / "slurm.conf").c_str(), 1);
  }
  static void TearDownTestSuite() {
    if (cluster_ == nullptr) return;
    std::system(("scripts/slurm_local.sh stop " + cluster_->string()).c_str());
    fs::remove_all(*cluster_);
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "slurmd and munged need root (CI runs as root)";
    ASSERT_TRUE(started_) << "the local Slurm did not start:\n"
                          << atl::testing::read(fs::temp_directory_path() / "atoll_slurm_start.log");
    dir_ = atl::testing::make_test_dir("atoll_real_slurm_" + std::string(
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    port_ = atl::testing::test_port(14000);
    config_ = write_config(dir_, port_, "{steps: 30, batch_size: 4, warmup_steps: 0, eval_every: 10}");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `atoll launch` of the config as run `name`: its final parameters.
  std::string launched(const std::string& name) {
    EXPECT_EQ(atl::testing::run_atoll("launch " + config_ + " --quiet --set run.name=" + name), 0);
    return atl::testing::read(dir_ / "runs" / name / "final_params.bin");
  }
  // Runs `shell` (srun or sbatch starting the islands of run `name`) while a coordinator of
  // that run serves them: the islands' exit status; the coordinator must end well too.
  int with_coordinator(const std::string& name, const std::string& shell) {
    const pid_t coordinator = atl::testing::spawn_atoll({"coordinator", config_, "--quiet", "--set", "run.name=" + name},
                                                        dir_ / (name + "-coordinator.log"));
    const int rc = std::system(("timeout 120 " + shell + " > " + (dir_ / (name + "-islands.log")).string() + " 2>&1").c_str());
    EXPECT_EQ(atl::testing::wait_exit(coordinator, 30), 0) << atl::testing::read(dir_ / (name + "-coordinator.log"));
    return rc;
  }
  std::string islands_log(const std::string& name) {
    std::string all = atl::testing::read(dir_ / (name + "-islands.log"));
    for (const auto& f : fs::directory_iterator(dir_))
      if (f.path().filename().string().rfind("slurm-", 0) == 0) all += atl::testing::read(f.path());
    return all;
  }

  static fs::path* cluster_;
  static bool started_;
  fs::path dir_;
  std::string config_;
  int port_ = 0;
};
fs::path* RealSlurm::cluster_ = nullptr;
bool RealSlurm::started_ = false;

// One step of two tasks, `srun -n 2 atoll island CONFIG`: task K runs island K.
TEST_F(RealSlurm, SrunStepOfTwoTasksEndsAsLaunch) {
  const std::string expected = launched("whole");
  ASSERT_GT(expected.size(), 100u);
  const int rc = with_coordinator("srun", "srun -n 2 " + std::string(ATOLL_BINARY) + " island " + config_ +
                                              " --quiet --set run.name=srun");
  const std::string log = islands_log("srun");
  ASSERT_EQ(rc, 0) << log;
  for (int island = 0; island < 2; ++island)
    EXPECT_NE(log.find("island " + std::to_string(island) + " from the Slurm task's environment"), std::string::npos) << log;
  EXPECT_TRUE(atl::testing::read(dir_ / "runs/srun/final_params.bin") == expected) << "final parameters differ from launch's";
}

// A job array, one element per island: `sbatch --array=0-1 -n 1 --wait`.
TEST_F(RealSlurm, JobArrayOfOneElementPerIslandEndsAsLaunch) {
  const std::string expected = launched("whole");
  ASSERT_GT(expected.size(), 100u);
  const int rc = with_coordinator("array", "sbatch --wait --array=0-1 -n 1 -D " + dir_.string() + " --wrap \"" +
                                               std::string(ATOLL_BINARY) + " island " + config_ +
                                               " --quiet --set run.name=array\"");
  const std::string log = islands_log("array");
  ASSERT_EQ(rc, 0) << log;
  for (int island = 0; island < 2; ++island)
    EXPECT_NE(log.find("island " + std::to_string(island) + " from the Slurm task's environment (job array)"),
              std::string::npos) << log;
  EXPECT_TRUE(atl::testing::read(dir_ / "runs/array/final_params.bin") == expected) << "final parameters differ from launch's";
}

// `atoll slurm --submit` of two islands of two ranks: the coordinator job and the island
// array it writes and submits (each element a step of two tasks, rank 0 and rank 1 of its
// island) run the run to its end, bitwise as `atoll launch`; also with islands.shard_exchange.
TEST_F(RealSlurm, SubmittedBatchScriptsEndAsLaunch) {
  // Then with the outer exchange sharded over the ranks (docs/ranks.md): each rank's shard plane
  // binds its own node's port and is found through rank 0.
  for (const std::string sharded : {std::string(), std::string(" --set islands.shard_exchange=true --set model.layers=2")}) {
    SCOPED_TRACE(sharded);
    fs::remove_all(dir_ / "runs");
    const std::string two_ranks = " --set islands.ranks=2 --set transport.rank_port=" + std::to_string(port_ + 10) + sharded;
    EXPECT_EQ(atl::testing::run_atoll("launch " + config_ + " --quiet --set run.name=whole" + two_ranks), 0);
    const std::string expected = atl::testing::read(dir_ / "runs/whole/final_params.bin");
    ASSERT_GT(expected.size(), 100u);
    atl::testing::Result r = atl::testing::run("slurm " + config_ + " --submit --set run.name=sub --set slurm.binary=" +
                                               std::string(ATOLL_BINARY) + two_ranks);
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t at = r.output.find("submitted: coordinator job ");
    ASSERT_NE(at, std::string::npos) << r.output;
    int coordinator = 0, islands = 0;
    ASSERT_EQ(std::sscanf(r.output.c_str() + at, "submitted: coordinator job %d, islands job array %d", &coordinator,
                          &islands), 2) << r.output;
    const std::string jobs = std::to_string(coordinator) + "," + std::to_string(islands);
    std::string queued = "?";
    for (int i = 0; i < 600 && queued.find_first_not_of(" \n") != std::string::npos; ++i) {  // up to 120 s
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      queued = atl::testing::run_shell("squeue -h -j " + jobs + " -o %i");
    }
    const fs::path scripts = dir_ / "runs/sub-slurm";
    std::string outputs;
    for (const auto& f : fs::directory_iterator(scripts)) outputs += f.path().filename().string() + ":\n" + atl::testing::read(f.path());
    ASSERT_EQ(queued.find_first_not_of(" \n"), std::string::npos) << "jobs still queued after 120 s: " << queued << outputs;
    EXPECT_TRUE(fs::exists(scripts / "coordinator.sbatch"));
    EXPECT_TRUE(fs::exists(scripts / "islands.sbatch"));
    EXPECT_NE(atl::testing::read(dir_ / "runs/sub/summary.json").find("\"islands_finished\":2"), std::string::npos) << outputs;
    EXPECT_NE(outputs.find("island 1: rank 1 of 2 joined its island"), std::string::npos) << outputs;
    if (!sharded.empty()) EXPECT_NE(outputs.find("island 1 rank 1: its shard plane sent"), std::string::npos) << outputs;
    EXPECT_TRUE(atl::testing::read(dir_ / "runs/sub/final_params.bin") == expected) << "final parameters differ from launch's\n"
                                                                                    << outputs;
  }
}

// Submits the run as `name` with `sets` (atoll slurm --submit) and waits until its metrics show
// round 3: the coordinator's and the island array's job ids.
std::pair<std::string, std::string> submit_and_wait_for_round_3(const std::string& config, const fs::path& dir,
                                                                 const std::string& name,
                                                                 const std::vector<std::string>& sets) {
  std::string args = "slurm " + config + " --submit --set run.name=" + name + " --set slurm.binary=" + ATOLL_BINARY;
  for (const auto& s : sets) args += " --set " + s;
  atl::testing::Result r = atl::testing::run(args);
  int coordinator = 0, islands = 0;
  const size_t at = r.output.find("submitted: coordinator job ");
  if (r.code != 0 || at == std::string::npos ||
      std::sscanf(r.output.c_str() + at, "submitted: coordinator job %d, islands job array %d", &coordinator, &islands) != 2) {
    ADD_FAILURE() << r.output;
    return {};
  }
  const fs::path metrics = dir / "runs" / name / "metrics.jsonl";
  for (int i = 0; i < 600 && atl::testing::read(metrics).find("\"round\":3,") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(atl::testing::read(metrics).find("\"round\":3,"), std::string::npos) << "no round 3 within 60 s";
  return {std::to_string(coordinator), std::to_string(islands)};
}

// Waits up to `seconds` until none of `jobs` is queued or running; whether none is.
bool wait_until_done(const std::string& jobs, int seconds) {
  for (int i = 0; i < seconds * 5; ++i) {
    if (atl::testing::run_shell("squeue -h -j " + jobs + " -o %i").find_first_not_of(" \n") == std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

std::string job_outputs(const fs::path& scripts) {
  std::string all;
  for (const auto& f : fs::directory_iterator(scripts))
    if (f.path().extension() == ".out") all += f.path().filename().string() + ":\n" + atl::testing::read(f.path());
  return all;
}

// scancel of island 1's array element: SIGTERM, on which the island leaves the run (LEAVE:
// the coordinator records it as left, not lost after the heartbeat timeout, here 10 min), and
// island 0 finishes the run without it.
TEST_F(RealSlurm, CancelledIslandLeavesAndTheOtherFinishes) {
  const auto [coordinator, islands] =
      submit_and_wait_for_round_3(config_, dir_, "cancel", {"train.steps=600", "transport.heartbeat_timeout_ms=600000"});
  ASSERT_FALSE(islands.empty());
  ASSERT_EQ(std::system(("scancel " + islands + "_1").c_str()), 0);
  const bool done = wait_until_done(coordinator + "," + islands, 120);
  const std::string outputs = job_outputs(dir_ / "runs/cancel-slurm");
  ASSERT_TRUE(done) << "jobs still queued after 120 s\n" << outputs;
  EXPECT_NE(outputs.find("island 1: left the run on signal 15"), std::string::npos) << outputs;
  const std::string metrics = atl::testing::read(dir_ / "runs/cancel/metrics.jsonl");
  EXPECT_NE(metrics.find("\"change\":\"left\""), std::string::npos) << "island 1 did not LEAVE\n" << outputs;
  EXPECT_NE(atl::testing::read(dir_ / "runs/cancel/summary.json").find("\"islands_finished\":1"), std::string::npos)
      << outputs;
}

// scontrol requeue of island 1's element mid-run: it leaves on SIGTERM, Slurm starts it again
// (SLURM_RESTART_COUNT 1), it rejoins the running run with the state hand-over, and both
// islands finish (the island's first output is overwritten by the second start's).
// Island 0's process is stopped (SIGSTOP) from island 1's LEAVE until the
// coordinator records island 1's return, so that island 0 cannot finish the run alone however
// long Slurm takes to start the element again (a CI run once saw it finish first). It is
// stopped only after island 1 has left: an island 1 sending to a stopped island 0 could not
// leave cleanly. The heartbeat timeout is long enough that the coordinator does not count the
// stopped island lost.
// The pid of the `atoll island CONFIG` process (the engine, after the front end's exec) of
// array element `element`'s task, found through /proc (the test and Slurm share the machine);
// -1 when there is none.
pid_t island_process(const fs::path& config, int element) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = atl::testing::read(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const std::string argv0 = cmdline.substr(0, cmdline.find(' '));
    const bool atoll = argv0 == "atoll" || (argv0.size() > 6 && argv0.compare(argv0.size() - 6, 6, "/atoll") == 0);
    if (!atoll || cmdline.find(" island " + config.string()) == std::string::npos) continue;  // (not srun's)
    std::string environ = atl::testing::read(entry.path() / "environ");
    std::replace(environ.begin(), environ.end(), '\0', '\n');
    if (("\n" + environ).find("\nSLURM_ARRAY_TASK_ID=" + std::to_string(element) + "\n") != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

TEST_F(RealSlurm, RequeuedIslandRejoinsTheRun) {
  const auto [coordinator, islands] =
      submit_and_wait_for_round_3(config_, dir_, "requeue", {"train.steps=3000", "transport.heartbeat_timeout_ms=600000"});
  ASSERT_FALSE(islands.empty());
  const fs::path metrics_file = dir_ / "runs/requeue/metrics.jsonl";
  ASSERT_EQ(std::system(("scontrol requeue " + islands + "_1").c_str()), 0);
  bool left = false;
  // (Bounds generous for a loaded 2-core CI machine; each wait ends as soon as it holds.)
  for (int i = 0; i < 1200 && !left; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    left = atl::testing::read(metrics_file).find("\"island\":1,\"change\":\"left\"") != std::string::npos;
  }
  ASSERT_TRUE(left) << "island 1 did not leave within 30 s of the requeue\n" << job_outputs(dir_ / "runs/requeue-slurm");
  // Island 0's own process is stopped, not its job (`scontrol suspend` once kept Slurm from
  // starting the requeued element at all): Slurm schedules as before.
  const pid_t survivor = island_process(dir_ / "c.yaml", 0);
  ASSERT_GT(survivor, 0) << "no process of island 0 found";
  ASSERT_EQ(::kill(survivor, SIGSTOP), 0);
  bool stopped = false;  // the stopped process is the island's own (state T), not a bystander
  for (int i = 0; i < 100 && !stopped; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::string stat = atl::testing::read("/proc/" + std::to_string(survivor) + "/stat");
    const size_t paren = stat.rfind(')');
    stopped = paren != std::string::npos && stat.size() > paren + 2 && stat[paren + 2] == 'T';
  }
  ASSERT_TRUE(stopped) << "island 0's process " << survivor << " did not stop";
  ASSERT_EQ(atl::testing::read(metrics_file).find("\"island\":0,\"change\":\"left\""), std::string::npos)
      << "island 0 finished the run before it could be suspended";
  // Slurm holds a requeued job for 120 s (BeginTime); the administrator's override makes it
  // eligible now, once it is pending again and its first instance has no process left on the
  // node (no `slurmstepd: [JOB.batch]` or `[JOB.0]`): started while the first instance was
  // still ending (srun waits up to 7 s for its step), the new instance was charged with the
  // old batch script's exit code and ended FAILED at once, never running (slurmctld.log:
  // "Allocate JobId=2_1(2)", then "_job_complete: JobId=2_1(2) WEXITSTATUS 1" 4 ms later).
  // And not in the second the first instance's credential was revoked: slurmd compares a
  // credential's creation time with the revocation in whole seconds, so a new instance started
  // then is killed ("Killing non-startable batch JobId=2: Job credential revoked", 0.4 s after
  // "Requeuing JobId=2_1(2)", then WEXITSTATUS 1): it is made eligible 2 s from now.
  // (Slurm refuses the update while the requeue is still completing: retried.)
  const std::string element = islands + "_1";
  std::string job_id = atl::testing::run_shell("squeue -h -j " + element + " -o %A");
  job_id.erase(std::remove_if(job_id.begin(), job_id.end(), [](char c) { return !std::isdigit(static_cast<unsigned char>(c)); }),
               job_id.end());
  ASSERT_FALSE(job_id.empty()) << atl::testing::run_shell("squeue -a -l 2>&1");
  auto first_instance_gone = [&] {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/proc", ec)) {
      if (atl::testing::read(entry.path() / "cmdline").rfind("slurmstepd: [" + job_id + ".", 0) == 0) return false;
    }
    return true;
  };
  bool released = false;
  int polls = 0;
  for (; polls < 300 && !released; ++polls) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = atl::testing::run_shell("squeue -h -j " + element + " -o %T").find("PENDING") != std::string::npos &&
               first_instance_gone() &&
               std::system(("scontrol update JobId=" + element + " StartTime=now+2 2>/dev/null").c_str()) == 0;
  }
  std::printf("requeued element %s (job %s) released after %d polls of 100 ms\n", element.c_str(), job_id.c_str(), polls);
  ASSERT_TRUE(released) << "the requeued element could not be made eligible within 30 s\n"
                        << atl::testing::run_shell("squeue -a -l 2>&1") << job_outputs(dir_ / "runs/requeue-slurm");
  bool back = false;
  for (int i = 0; i < 1200 && !back; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    back = atl::testing::read(metrics_file).find("\"island\":1,\"change\":\"rejoined\"") != std::string::npos;
  }
  ASSERT_EQ(::kill(survivor, SIGCONT), 0);
  ASSERT_TRUE(back) << "island 1 did not come back within 120 s of its release\n"
                    << atl::testing::run_shell("squeue -a -l 2>&1") << atl::testing::run_shell("scontrol show job " + element + " 2>&1")
                    << "slurmctld.log (the element's lines):\n"
                    << atl::testing::run_shell("grep -a -E 'JobId=" + islands + "|" + element + "|requeue|Requeue' '" +
                                               (*cluster_ / "log/slurmctld.log").string() + "' 2>&1 | tail -40")
                    << job_outputs(dir_ / "runs/requeue-slurm");
  const bool done = wait_until_done(coordinator + "," + islands, 150);
  const std::string outputs = job_outputs(dir_ / "runs/requeue-slurm");
  ASSERT_TRUE(done) << "jobs still queued after 150 s\n" << outputs;
  EXPECT_NE(outputs.find("island 1 from the Slurm task's environment (job array), device cpu, requeued"),
            std::string::npos) << outputs;
  const std::string metrics = atl::testing::read(metrics_file);
  EXPECT_NE(metrics.find("\"event\":\"rejoin\""), std::string::npos) << "no rejoin record\n" << outputs;
  EXPECT_NE(atl::testing::read(dir_ / "runs/requeue/summary.json").find("\"islands_finished\":2"), std::string::npos)
      << outputs;
}

// The time limit's signal: `atoll slurm` asks Slurm for SIGUSR1 before the limit (#SBATCH
// --signal=USR1@N, written when slurm.time is set); here it is sent at once with scancel
// --signal, as Slurm sends it then. Island 1's job asks for a checkpoint and every process
// writes it; the jobs are then ended (scancel, as the limit ends them), and `atoll launch
// --resume` of the run ends bitwise as the uninterrupted run.
TEST_F(RealSlurm, SignalledIslandCheckpointsAndTheRunResumesBitwise) {
  const std::vector<std::string> sets = {"train.steps=3000", "checkpoint.every=100000"};
  std::string set_args;
  for (const auto& s : sets) set_args += " --set " + s;
  ASSERT_EQ(atl::testing::run_atoll("launch " + config_ + " --quiet --set run.name=whole" + set_args), 0);
  const std::string expected = atl::testing::read(dir_ / "runs/whole/final_params.bin");
  ASSERT_GT(expected.size(), 100u);
  const auto [coordinator, islands] = submit_and_wait_for_round_3(config_, dir_, "limit", sets);
  ASSERT_FALSE(islands.empty());
  ASSERT_EQ(std::system(("scancel --signal=USR1 " + islands + "_1").c_str()), 0);
  const fs::path ckpts = dir_ / "runs/limit/checkpoints/coordinator";
  std::string written;
  for (int i = 0; i < 300 && written.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::error_code ec;
    for (const auto& f : fs::directory_iterator(ckpts, ec))
      if (f.path().filename().string().rfind("step-", 0) == 0) written = f.path().filename().string();
  }
  ASSERT_FALSE(written.empty()) << "no checkpoint within 30 s of the signal\n" << job_outputs(dir_ / "runs/limit-slurm");
  ASSERT_EQ(std::system(("scancel " + coordinator + " " + islands).c_str()), 0);
  ASSERT_TRUE(wait_until_done(coordinator + "," + islands, 60));
  const std::string outputs = job_outputs(dir_ / "runs/limit-slurm");
  EXPECT_NE(outputs.find("island 1: a signal asks for a checkpoint"), std::string::npos) << outputs;
  const fs::path log = dir_ / "resume.log";
  const int status = std::system((std::string(ATOLL_BINARY) + " launch " + config_ + " --resume --set run.name=limit" +
                                  set_args + " > " + log.string() + " 2>&1").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << atl::testing::read(log);
  EXPECT_NE(atl::testing::read(log).find("coordinator: resuming after step " + std::to_string(std::stoll(written.substr(5, 12)))),
            std::string::npos) << atl::testing::read(log);
  EXPECT_TRUE(atl::testing::read(dir_ / "runs/limit/final_params.bin") == expected) << "final parameters differ after the resume";
}

// summary.csv's rows without the columns that differ between two sweeps of one file
// (wall_time_s; config_hash, which covers run.out_dir): cells split on commas outside quotes.
std::vector<std::string> comparable_summary(const fs::path& csv) {
  std::vector<std::string> rows;
  std::vector<size_t> dropped;
  std::istringstream in(atl::testing::read(csv));
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells(1);
    bool quoted = false;
    for (char ch : line) {
      if (ch == '"') quoted = !quoted;
      if (ch == ',' && !quoted) cells.emplace_back();
      else cells.back() += ch;
    }
    if (rows.empty())
      for (size_t i = 0; i < cells.size(); ++i)
        if (cells[i] == "wall_time_s" || cells[i] == "config_hash") dropped.push_back(i);
    std::string row;
    for (size_t i = 0; i < cells.size(); ++i)
      if (std::find(dropped.begin(), dropped.end(), i) == dropped.end()) row += cells[i] + "|";
    rows.push_back(row);
  }
  return rows;
}

// `atoll sweep FILE --slurm -j 1`: the four runs of a sweep as one job array, one at a time.
// The last element is cancelled while it waits: the sweep's second submission runs only that
// run, and the report then equals a local sweep's of the same file (every run ok, the same
// losses and bytes; wall times aside).
TEST_F(RealSlurm, SweepSubmittedAsAJobArrayEndsAsALocalSweep) {
  const fs::path sweep = dir_ / "s.yaml";
  std::ofstream(sweep) << "run: {threads: 1}\n"
                          "model: {name: mlp, hidden: [8]}\n"
                          "data: {kind: synthetic, synthetic_examples: 256, synthetic_dim: 4, synthetic_classes: 2}\n"
                          "train: {steps: 20, batch_size: 8, warmup_steps: 0, eval_every: 10}\n"
                          "islands: {count: 2}\n"
                          "algorithm: {name: diloco, inner_steps: 5}\n"
                          "slurm: {binary: " << ATOLL_BINARY << "}\n"
                          "sweep:\n  name: s\n  seeds: [1, 2]\n  grid: {train.lr: [0.05, 0.1]}\n";
  const std::string on_slurm = "sweep " + sweep.string() + " --slurm -j 1 --out " + (dir_ / "slurm").string();
  auto submit = [&]() -> std::string {
    atl::testing::Result r = atl::testing::run(on_slurm);
    int job = 0;
    const size_t at = r.output.find("submitted: sweep job array ");
    EXPECT_EQ(r.code, 0) << r.output;
    if (at == std::string::npos || std::sscanf(r.output.c_str() + at, "submitted: sweep job array %d", &job) != 1) {
      ADD_FAILURE() << r.output;
      return "";
    }
    EXPECT_NE(r.output.find("#SBATCH --array=0-"), std::string::npos) << r.output;
    return std::to_string(job);
  };
  const std::string first = submit();
  ASSERT_FALSE(first.empty());
  ASSERT_EQ(std::system(("scancel " + first + "_3").c_str()), 0);
  ASSERT_TRUE(wait_until_done(first, 120)) << "the sweep's jobs still queued after 120 s";
  const std::string runs = atl::testing::read(dir_ / "slurm/s/slurm/runs.txt");
  const std::string last = runs.substr(runs.rfind('\n', runs.size() - 2) + 1);
  ASSERT_FALSE(fs::exists(dir_ / "slurm/s/runs" / last.substr(0, last.size() - 1) / "summary.json"))
      << "the cancelled element ran";

  const std::string second = submit();
  ASSERT_FALSE(second.empty());
  EXPECT_EQ(atl::testing::read(dir_ / "slurm/s/slurm/runs.txt"), last) << "the second submission is not the one run left";
  ASSERT_TRUE(wait_until_done(second, 120)) << "the second submission still queued after 120 s";

  ASSERT_EQ(atl::testing::run_atoll("report " + (dir_ / "slurm/s").string()), 0);
  ASSERT_EQ(atl::testing::run_atoll("sweep " + sweep.string() + " --no-report --out " + (dir_ / "local").string()), 0);
  const auto on_slurm_rows = comparable_summary(dir_ / "slurm/s/summary.csv");
  ASSERT_EQ(on_slurm_rows.size(), 5u);
  for (size_t i = 1; i < on_slurm_rows.size(); ++i) EXPECT_NE(on_slurm_rows[i].find("|ok|"), std::string::npos) << on_slurm_rows[i];
  EXPECT_EQ(on_slurm_rows, comparable_summary(dir_ / "local/s/summary.csv"));
}

// The scripts `atoll slurm` writes: the slurm: section's options on #SBATCH lines, one array
// element per island after the coordinator; --dry-run writes nothing; no sbatch on PATH is one
// line, exit 2, nothing written.
TEST_F(SlurmIsland, BatchScriptsCarryTheSlurmSection) {
  using atl::testing::run;
  std::ofstream(config_, std::ios::app) << "slurm: {partition: gpu, account: lab, time: \"02:00:00\", "
                                           "sbatch: [\"--qos=high\", \"--gpus-per-task=1\"]}\n";
  auto r = run("slurm " + config_ + " --dry-run --set train.steps=40");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* line : {"#SBATCH --job-name=atoll-r-coordinator\n", "#SBATCH --job-name=atoll-r-islands\n",
                           "#SBATCH --partition=gpu\n", "#SBATCH --account=lab\n", "#SBATCH --time=02:00:00\n",
                           "#SBATCH --qos=high\n", "#SBATCH --gpus-per-task=1\n", "#SBATCH --array=0-1\n",
                           "#SBATCH --requeue\n", "transport.coordinator is a loopback address"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << r.output;
  }
  EXPECT_NE(r.output.find("exec srun --ntasks=1 'build/atoll' island '" + config_ + "' --set 'train.steps=40' --quiet\n"),
            std::string::npos) << r.output;
  EXPECT_NE(r.output.find("exec srun --ntasks=1 'build/atoll' coordinator '" + config_ + "'"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "runs")) << "--dry-run wrote something";
  // The time limit's signal, with checkpoints on: SIGUSR1 two minutes before (slurm.signal_before_s).
  EXPECT_EQ(r.output.find("--signal"), std::string::npos) << "a signal without checkpoints";
  r = run("slurm " + config_ + " --dry-run --set checkpoint.every=50");
  EXPECT_NE(r.output.find("#SBATCH --signal=USR1@120\n"), std::string::npos) << r.output;

  const std::string no_sbatch = "PATH=/nonexistent " + std::string(ATOLL_BINARY) + " slurm " + config_ + " --submit 2>&1";
  const std::string out = atl::testing::run_shell(no_sbatch);
  EXPECT_EQ(out, "atoll: error: slurm --submit: sbatch is not on PATH (run it on a submit host of the cluster, or "
                 "install slurm-client)\n");
  EXPECT_FALSE(fs::exists(dir_ / "runs/r-slurm")) << "a refused submission wrote its scripts";

  // A sweep: --slurm --dry-run prints the plan and the array script (a run per element, -j
  // the concurrency limit); without sbatch, one line and nothing written.
  const fs::path sweep = dir_ / "s.yaml";
  std::ofstream(sweep) << atl::testing::read(config_) << "sweep:\n  name: s\n  grid: {train.lr: [0.1, 0.2, 0.3]}\n";
  r = run("sweep " + sweep.string() + " --slurm --dry-run -j 2 --out " + (dir_ / "sweeps").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("#SBATCH --array=0-2%2\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("#SBATCH --partition=gpu\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("simulate '" + fs::absolute(dir_ / "sweeps/s/configs/").lexically_normal().string() +
                          "'\"$id.yaml\" --force --quiet"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "sweeps")) << "--dry-run wrote something";
  const std::string sweep_out = atl::testing::run_shell("PATH=/nonexistent " + std::string(ATOLL_BINARY) + " sweep " +
                                                        sweep.string() + " --slurm --out " + (dir_ / "sweeps").string() + " 2>&1");
  EXPECT_EQ(sweep_out, "atoll: error: sweep --slurm: sbatch is not on PATH (run it on a submit host of the cluster, "
                       "or install slurm-client)\n");
  EXPECT_FALSE(fs::exists(dir_ / "sweeps")) << "a refused submission wrote something";

  // A second site of a run across two clusters: its islands alone (slurm.islands), no
  // coordinator job, no dependency; the coordinator's address must be the other site's.
  const std::string site_b = " --dry-run --set 'slurm.islands=[1]' --set slurm.coordinator=false";
  r = run("slurm " + config_ + site_b + " --set transport.coordinator=tcp://site-a.example.org:29500");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("#SBATCH --array=1\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("coordinator.sbatch"), std::string::npos) << r.output;
  r = run("slurm " + config_ + site_b);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'transport.coordinator': is a loopback address, but slurm.coordinator is false"),
            std::string::npos) << r.output;
  r = run("slurm " + config_ + " --dry-run --set 'slurm.islands=[0, 2]'");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("key 'slurm.islands': island 2 does not exist (islands.count is 2)"), std::string::npos)
      << r.output;

  // Islands of two ranks: on one node while they bind transport.host's one address; with "*"
  // each rank binds its own node's name, and the island may span nodes.
  r = run("slurm " + config_ + " --dry-run --set islands.ranks=2 --set train.batch_size=4");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("#SBATCH --ntasks=2\n#SBATCH --nodes=1\n"), std::string::npos) << r.output;
  r = run("slurm " + config_ + " --dry-run --set islands.ranks=2 --set train.batch_size=4 --set 'transport.host=\"*\"'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("#SBATCH --ntasks=2\n"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("--nodes=1"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace atl::run::slurm
