// DiPaCo with fewer islands than paths in real processes on loopback (docs/dipaco.md "Fewer
// islands than paths"): `atoll launch` against `atoll simulate` bitwise (each island's path
// model, every path's final parameters, the routed evaluations), and the lead, which composes
// and evaluates every path, killed with SIGKILL mid-run: a survivor goes on evaluating.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/json.h"
#include "tests/run/process_test_util.h"

namespace fs = std::filesystem;
using atl::core::json_find_number;
using atl::core::json_find_string;
using atl::testing::lines;
using atl::testing::read;

namespace {

class DiPaCoProcesses : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = atl::testing::make_test_dir("atoll_dipaco_proc_test");
    port_ = atl::testing::test_port(14000);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A 2x2 (two one-block levels of two modules) on `islands` islands, k-means routing.
  std::string config(int islands, int steps, const std::string& extra = "") {
    return atl::testing::write_gpt_config(
        dir_, {islands, steps, 2, 0, 5,
               "algorithm: {name: dipaco, inner_steps: 5}\n"
               "dipaco: {levels: [{blocks: [0], modules: 2}, {blocks: [1], modules: 2}], prefix: 8}\n" +
                   atl::testing::test_transport(port_) + extra});
  }
  fs::path dir_;
  int port_ = 0;
};

int run(const std::string& args) { return atl::testing::run_atoll(args); }

// The part of a record from `from` (a key) to `to` (a later key, excluded): values that must
// agree between simulate and launch (the clocks and byte totals differ).
std::string record_span(const std::string& line, const std::string& from, const std::string& to) {
  const size_t a = line.find("\"" + from + "\":");
  const size_t b = line.find(",\"" + to + "\":", a == std::string::npos ? 0 : a);
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a, b - a);
}

// DiPaCo 2x2 on 2 islands: the islands take the four paths in turn (paths 0, 1 in even
// rounds, 2, 3 in odd ones), each module's update is all-reduced over both islands, each
// island reloads its next path from its copy of every module and continues that path's data
// stream; over zmq the run ends bitwise as in the simulator, with the same rounds on every
// island. The lead evaluates every path's composed model on its routed sequences at every
// eval step: the same path_eval and routed eval records in both modes, and the same
// final_params.path<p>.bin for every path. With `reshard`, the discriminative re-sharding at
// step 10 (every island scores the router split with every path's model; scores exchanged by
// allgather; a linear router fitted in every process; the new shard sizes weigh the
// modules' means) is the same in both modes too, also with islands of two ranks (each rank
// scores every path; they deal their data from rank 0's gathered scores).
void launch_matches_simulate(DiPaCoProcesses& t, bool reshard, int ranks = 1) {
  const fs::path& dir_ = t.dir_;
  const std::string cfg = t.config(2, 20);
  std::string set = " --quiet --set transport.kind=zmq --set train.eval_every=10 --set train.eval_batches=4"
                    " --set islands.ranks=" + std::to_string(ranks);
  if (reshard) set += " --set dipaco.reshard_at=10 --set dipaco.router_fraction=0.1 --set algorithm.weighting=shard_size";
  ASSERT_EQ(run("simulate " + cfg + set + " --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + set + " --set run.name=real"), 0);
  const std::string sim_params = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim_params.size(), 100u);
  EXPECT_TRUE(sim_params == read(dir_ / "runs/real/final_params.bin"))
      << "final parameters differ between simulate and launch";
  struct Records {
    std::map<int, std::string> ends;       // island -> global_xxh64
    std::vector<std::string> rounds;       // island:round of every round record
    std::map<std::string, std::string> evals;  // "eval S" / "path_eval S P" -> values
  };
  auto records = [&](const std::string& run_name) {
    Records r;
    for (const auto& l : lines(dir_ / "runs" / run_name / "metrics.jsonl")) {
      const std::string event = json_find_string(l, "event").value_or("");
      const int island = static_cast<int>(json_find_number(l, "island").value_or(-1));
      const std::string step = std::to_string(static_cast<int64_t>(json_find_number(l, "step").value_or(-1)));
      if (event == "island_end") r.ends[island] = json_find_string(l, "global_xxh64").value_or("");
      if (event == "round") {
        r.rounds.push_back(std::to_string(island) + ":" + std::to_string(json_find_number(l, "round").value_or(-1)));
      }
      if (event == "eval") r.evals["eval " + step] = record_span(l, "val_loss", "island") + record_span(l, "paths", "wall_time_s");
      if (event == "path_eval") {
        r.evals["path_eval " + step + " " + std::to_string(static_cast<int>(json_find_number(l, "path").value_or(-1)))] =
            record_span(l, "val_loss", "island") + " by " + std::to_string(island);
      }
      if (event == "reshard") r.evals["reshard " + step] = record_span(l, "island", "wall_time_s");
    }
    std::sort(r.rounds.begin(), r.rounds.end());
    return r;
  };
  const Records sim = records("sim"), real = records("real");
  ASSERT_EQ(sim.ends.size(), 2u);
  EXPECT_EQ(sim.ends, real.ends) << "a path's final model differs between simulate and launch";
  EXPECT_NE(sim.ends.at(0), sim.ends.at(1)) << "paths 0 and 1 differ in level 1, yet ended the same";
  EXPECT_EQ(sim.rounds.size(), 8u);  // 4 rounds on each island
  EXPECT_EQ(sim.rounds, real.rounds);
  EXPECT_EQ(sim.evals.size(), 3u * 5u + (reshard ? 1u : 0u)) << "steps 0, 10, 20: one eval and four path_evals each";
  if (reshard) {
    ASSERT_TRUE(sim.evals.count("reshard 10")) << "no re-sharding at step 10";
    EXPECT_NE(sim.evals.at("reshard 10").find("\"contributors\":2"), std::string::npos) << sim.evals.at("reshard 10");
  }
  EXPECT_EQ(sim.evals, real.evals) << "the routed evaluation differs between simulate and launch";
  ASSERT_TRUE(sim.evals.count("eval 20"));
  EXPECT_NE(sim.evals.at("eval 20").find("\"path_val_losses\":["), std::string::npos) << sim.evals.at("eval 20");
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(sim.evals.count("path_eval 20 " + std::to_string(p)), 1u) << p;
    const std::string file = "final_params.path" + std::to_string(p) + ".bin";
    EXPECT_GT(read(dir_ / "runs/sim" / file).size(), 100u) << file;
    EXPECT_TRUE(read(dir_ / "runs/sim" / file) == read(dir_ / "runs/real" / file)) << file << " differs";
  }
  // Island 0's last task (round 3) is path (0 + 3 * 2) mod 4 = 2.
  EXPECT_TRUE(read(dir_ / "runs/real/final_params.bin") == read(dir_ / "runs/real/final_params.path2.bin"))
      << "island 0 ends on path 2";
}

TEST_F(DiPaCoProcesses, LaunchWithFewerIslandsThanPathsMatchesSimulateBitwise) { launch_matches_simulate(*this, false); }
TEST_F(DiPaCoProcesses, LaunchWithFewerIslandsThanPathsReshardMatchesSimulateBitwise) {
  launch_matches_simulate(*this, true);
}
TEST_F(DiPaCoProcesses, LaunchWithFewerIslandsThanPathsReshardWithTwoRanksMatchesSimulateBitwise) {
  launch_matches_simulate(*this, true, 2);
}

// A 2x2 on 3 islands; island 0, the lead that evaluates every path, is killed with SIGKILL
// mid-run: the lowest survivor takes over. Every eval step up to the last has exactly one
// path_eval record per path and one routed eval (the later ones by island 1), summary.json's
// final_val_loss is the routed loss of the last step, and every path's final parameters are
// written by a survivor.
TEST_F(DiPaCoProcesses, FewerIslandsThanPathsEvaluationSurvivesTheLeadsDeath) {
  const int steps = 1500, every = 20;
  const std::string cfg = config(3, steps);
  const fs::path metrics = dir_ / "runs/r/metrics.jsonl";
  const pid_t launch = atl::testing::spawn_atoll(
      {"launch", cfg, "--quiet", "--set", "train.eval_every=" + std::to_string(every)}, dir_ / "launch.log");
  ASSERT_GT(launch, 0);
  bool at_200 = false;
  for (int i = 0; i < 600 && !at_200; ++i) {
    for (const auto& l : lines(metrics))
      at_200 = at_200 || (l.find("\"event\":\"eval\"") != std::string::npos && l.find("\"step\":200,") != std::string::npos);
    if (!at_200) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(at_200) << "no eval at step 200 within 60 s\n" << read(dir_ / "launch.log");
  const pid_t lead = atl::testing::island_child(launch, 0);
  ASSERT_GT(lead, 0);
  ASSERT_EQ(kill(lead, SIGKILL), 0);
  const int rc = atl::testing::wait_exit(launch, 180);
  ASSERT_NE(rc, -1) << "launch did not finish (a hang)\n" << read(dir_ / "launch.log");

  std::map<int64_t, int> evals;                                 // step -> eval records
  std::map<std::pair<int64_t, int>, int> path_evals;            // (step, path) -> path_eval records
  std::map<int64_t, double> val_loss;
  int64_t taken_over = -1;  // the first eval step a survivor evaluated
  for (const auto& l : lines(metrics)) {
    const std::string event = json_find_string(l, "event").value_or("");
    const auto step = static_cast<int64_t>(json_find_number(l, "step").value_or(-1));
    if (event == "eval") {
      ++evals[step];
      val_loss[step] = json_find_number(l, "val_loss").value_or(NAN);
      EXPECT_EQ(json_find_number(l, "paths").value_or(-1), 4) << l;
    }
    if (event == "path_eval") {
      ++path_evals[{step, static_cast<int>(json_find_number(l, "path").value_or(-1))}];
      if (json_find_number(l, "island").value_or(0) != 0 && taken_over < 0) taken_over = step;
    }
  }
  for (int64_t s = 0; s <= steps; s += every) {
    EXPECT_EQ(evals[s], 1) << "eval records of step " << s;
    for (int p = 0; p < 4; ++p) EXPECT_EQ((path_evals[{s, p}]), 1) << "path_eval records of step " << s << " path " << p;
  }
  EXPECT_EQ(evals.size(), static_cast<size_t>(steps / every + 1)) << "eval records at steps that are not eval steps";
  EXPECT_GT(taken_over, 200) << "no eval by a survivor";
  const std::string summary = read(dir_ / "runs/r/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":2"), std::string::npos) << summary;
  EXPECT_EQ(json_find_number(summary, "last_eval_step"), steps) << summary;
  ASSERT_TRUE(json_find_number(summary, "final_val_loss")) << summary;
  EXPECT_EQ(*json_find_number(summary, "final_val_loss"), val_loss[steps]) << summary;
  EXPECT_NE(summary.find("\"path_val_losses\":["), std::string::npos) << summary;
  for (int p = 0; p < 4; ++p) {
    const std::string file = "final_params.path" + std::to_string(p) + ".bin";
    EXPECT_GT(read(dir_ / "runs/r" / file).size(), 100u) << "no " << file << " from a survivor";
  }
}

}  // namespace
