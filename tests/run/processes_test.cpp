// Real processes on loopback: `atoll launch` against `atoll simulate` (bitwise), Ctrl-C
// leaving nothing behind, an island killed with SIGKILL mid-run, and one restarted after that.
// Islands of several ranks: ranks_processes_test.cpp; the fixture: processes_fixture.h.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <cstring>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/run/processes_fixture.h"

namespace {

TEST_F(Processes, LaunchMatchesSimulateBitwise) {
  const std::string cfg = config(3, 20);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  const std::string real = read(dir_ / "runs/real/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == real) << "final parameters differ between simulate and launch";
  const std::string summary = read(dir_ / "runs/real/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"rounds\":4"), std::string::npos) << summary;
}

// The part of a record from `from` (a key) to `to` (a later key, excluded): values that must
// agree between simulate and launch (the clocks and byte totals differ).
std::string record_span(const std::string& line, const std::string& from, const std::string& to) {
  const size_t a = line.find("\"" + from + "\":");
  const size_t b = line.find(",\"" + to + "\":", a == std::string::npos ? 0 : a);
  return a == std::string::npos || b == std::string::npos ? "" : line.substr(a, b - a);
}

// DiPaCo 2x2 (two one-block levels of two modules), sequences routed to paths by k-means on
// the initial model's features: every process routes alike, every module's all-reduce runs
// on the sub-group of the islands through it, over zmq or gloo, and each island's path model
// ends bitwise as in the simulator; so do the routed evaluations (each path's record and the
// routed loss the coordinator combines) and every path's final parameters. With `reshard`,
// the discriminative re-sharding at step 10 (scores exchanged by allgather, a linear router
// fitted in every process) is the same in both modes too, also with islands of two ranks
// (each rank scores the paths; they deal their data from rank 0's gathered scores).
void dipaco_launch_matches_simulate(Processes& t, const std::string& kind, bool reshard = false, int ranks = 1) {
  const std::string cfg = t.config(4, 20, std::string("dipaco: {levels: [{blocks: [0], modules: 2}, {blocks: [1], modules: 2}], prefix: 8") +
                                              (reshard ? ", reshard_at: 10, router_fraction: 0.1" : "") + "}\n");
  const std::string set = " --quiet --set algorithm.name=dipaco --set model.layers=2 --set train.eval_every=10"
                          " --set train.eval_batches=4 --set transport.kind=" + kind +
                          " --set islands.ranks=" + std::to_string(ranks);
  ASSERT_EQ(run("simulate " + cfg + set + " --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + set + " --set run.name=real"), 0);
  EXPECT_TRUE(read(t.dir_ / "runs/sim/final_params.bin") == read(t.dir_ / "runs/real/final_params.bin"))
      << "final parameters differ between simulate and launch";
  auto path_hashes = [&](const std::string& run_name) {
    std::map<int, std::string> out;
    for (const auto& l : lines(t.dir_ / "runs" / run_name / "metrics.jsonl")) {
      if (json_find_string(l, "event") != "island_end") continue;
      out[static_cast<int>(json_find_number(l, "island").value_or(-1))] = json_find_string(l, "global_xxh64").value_or("");
    }
    return out;
  };
  const auto sim = path_hashes("sim"), real = path_hashes("real");
  ASSERT_EQ(sim.size(), 4u);
  EXPECT_EQ(sim, real) << "a path's final model differs between simulate and launch";
  EXPECT_NE(sim.at(0), sim.at(3)) << "paths 0 and 3 share no level module, yet ended the same";
  // Routed evals: event/step/path -> the values.
  auto evals = [&](const std::string& run_name) {
    std::map<std::string, std::string> out;
    for (const auto& l : lines(t.dir_ / "runs" / run_name / "metrics.jsonl")) {
      const std::string event = json_find_string(l, "event").value_or("");
      const std::string step = std::to_string(static_cast<int64_t>(json_find_number(l, "step").value_or(-1)));
      if (event == "eval") {
        out["eval " + step] = record_span(l, "val_loss", "island") + record_span(l, "paths", "wall_time_s");
      } else if (event == "path_eval") {
        out["path_eval " + step + " " + std::to_string(static_cast<int>(json_find_number(l, "path").value_or(-1)))] =
            record_span(l, "val_loss", "island");
      } else if (event == "reshard") {
        out["reshard " + step] = record_span(l, "island", "contributors");
      }
    }
    return out;
  };
  // The DiPaCo records have the same keys, in the same order, in both modes.
  auto keys_of = [&](const std::string& run_name) {
    static const std::regex key(R"re([{,]"([a-z_0-9]+)":)re");
    std::map<std::string, std::set<std::string>> out;
    for (const auto& l : lines(t.dir_ / "runs" / run_name / "metrics.jsonl")) {
      const std::string event = json_find_string(l, "event").value_or("");
      if (event != "eval" && event != "path_eval" && event != "reshard") continue;
      std::string keys;
      for (std::sregex_iterator it(l.begin(), l.end(), key), end; it != end; ++it) keys += (*it)[1].str() + " ";
      out[event].insert(keys);
    }
    return out;
  };
  const auto sim_keys = keys_of("sim");
  EXPECT_EQ(sim_keys.size(), reshard ? 3u : 2u);
  for (const auto& [event, keys] : sim_keys) EXPECT_EQ(keys.size(), 1u) << event;
  EXPECT_EQ(sim_keys, keys_of("real"));
  const auto sim_evals = evals("sim"), real_evals = evals("real");
  EXPECT_EQ(sim_evals.size(), 3u * 5u + (reshard ? 1u : 0u)) << "steps 0, 10, 20: one eval and four path_evals each";
  EXPECT_EQ(sim_evals, real_evals) << "the routed evaluation differs between simulate and launch";
  ASSERT_TRUE(sim_evals.count("eval 20"));
  EXPECT_NE(sim_evals.at("eval 20").find("\"path_val_losses\":["), std::string::npos) << sim_evals.at("eval 20");
  for (int p = 0; p < 4; ++p) {
    const std::string file = "final_params.path" + std::to_string(p) + ".bin";
    EXPECT_GT(read(t.dir_ / "runs/sim" / file).size(), 100u) << file;
    EXPECT_TRUE(read(t.dir_ / "runs/sim" / file) == read(t.dir_ / "runs/real" / file)) << file << " differs";
  }
  if (reshard) {
    ASSERT_TRUE(sim_evals.count("reshard 10")) << "no re-sharding at step 10";
    // The training shard sizes the evals report change at the re-sharding to the router's.
    const std::string& r = sim_evals.at("reshard 10");
    const std::string after = record_span(r + ",\"x\":", "path_train_sequences", "path_val_sequences");
    EXPECT_NE(sim_evals.at("eval 10").find(after.substr(after.find('['))), std::string::npos) << r;
    EXPECT_NE(sim_evals.at("eval 20").find(after.substr(after.find('['))), std::string::npos) << r;
  }
}

TEST_F(Processes, DiPaCoLaunchMatchesSimulateBitwise) { dipaco_launch_matches_simulate(*this, "zmq"); }
TEST_F(Processes, DiPaCoLaunchWithGlooMatchesSimulateBitwise) { dipaco_launch_matches_simulate(*this, "gloo"); }
TEST_F(Processes, DiPaCoLaunchReshardMatchesSimulateBitwise) { dipaco_launch_matches_simulate(*this, "zmq", true); }
TEST_F(Processes, DiPaCoLaunchReshardWithTwoRanksMatchesSimulateBitwise) {
  dipaco_launch_matches_simulate(*this, "zmq", true, 2);
}

// DiPaCo with fewer islands than paths in real runs: dipaco_processes_test.cpp.

// DiPaCo with two paths (one level of two modules on block 1) over five islands: paths 0, 1,
// 0, 1, 0. Island 4 (path 0) is killed with SIGKILL mid-run: the run finishes with the four
// survivors (exit 3), the shared module's rounds go on with four contributors, and the
// modules of path 0 keep being averaged between islands 0 and 2 — each pair of islands on
// one path ends with bitwise the same path model, and the two paths differ.
void dipaco_killed_island_modules_averaged_among_the_rest(Processes& t, const std::string& kind) {
  const std::string cfg = t.config(5, 400, "dipaco: {levels: [{blocks: [1], modules: 2}], routing: none}\n");
  const pid_t pid = spawn({"launch", cfg, "--quiet", "--set", "algorithm.name=dipaco", "--set", "model.layers=2",
                           "--set", "transport.kind=" + kind},
                          t.dir_ / "launch.log");
  ASSERT_GT(pid, 0);
  const fs::path metrics = t.dir_ / "runs/r/metrics.jsonl";
  ASSERT_TRUE(wait_for_record(metrics, {"\"round\":3,"}, 60)) << "no rounds within 60 s";
  const auto kids = children_of(pid);
  ASSERT_EQ(kids.size(), 6u);
  const pid_t victim = atl::testing::island_child(pid, 4);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const int code = wait_bounded(pid, 120);
  EXPECT_EQ(code, 3) << read(t.dir_ / "launch.log");
  std::map<int, std::string> hash;
  bool after_kill = false, four_after_kill = false;
  for (const auto& l : lines(metrics)) {
    const std::string event = json_find_string(l, "event").value_or("");
    if (event == "membership" && l.find("\"island\":4,\"change\":\"failed\"") != std::string::npos) after_kill = true;
    if (event == "round" && after_kill && l.find("\"contributors\":4,") != std::string::npos) four_after_kill = true;
    if (event == "island_end")
      hash[static_cast<int>(json_find_number(l, "island").value_or(-1))] = json_find_string(l, "global_xxh64").value_or("");
  }
  EXPECT_TRUE(after_kill) << "no `failed` membership record for island 4";
  EXPECT_TRUE(four_after_kill) << "no round with the four survivors after the kill";
  ASSERT_EQ(hash.size(), 4u) << "island_end records: " << hash.size();
  EXPECT_EQ(hash.count(4), 0u);
  EXPECT_EQ(hash.at(0), hash.at(2)) << "path 0's modules stopped being averaged between islands 0 and 2";
  EXPECT_EQ(hash.at(1), hash.at(3)) << "path 1's modules stopped being averaged between islands 1 and 3";
  EXPECT_NE(hash.at(0), hash.at(1)) << "the two paths ended the same";
  EXPECT_NE(read(t.dir_ / "runs/r/summary.json").find("\"islands_finished\":4"), std::string::npos);
}

TEST_F(Processes, DiPaCoKilledIslandsModulesAreAveragedAmongTheRest) {
  dipaco_killed_island_modules_averaged_among_the_rest(*this, "zmq");
}
TEST_F(Processes, DiPaCoKilledIslandsModulesAreAveragedAmongTheRestOverGloo) {
  dipaco_killed_island_modules_averaged_among_the_rest(*this, "gloo");
}

// The island runtime writes the same record types in both modes with the same keys, in the
// same order (docs/metrics.md); what a mode does not measure is null.
TEST_F(Processes, IslandRecordsHaveTheSameKeysInLaunchAndSimulate) {
  const std::string cfg = config(3, 20, "");
  const std::string evals = " --quiet --set train.eval_every=10";
  ASSERT_EQ(run("simulate " + cfg + evals + " --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + evals + " --set run.name=real"), 0);
  // event -> its keys in order, from every record of that event (all must agree).
  auto keys_by_event = [](const fs::path& metrics) {
    static const std::regex key(R"re([{,]"([a-z_0-9]+)":)re");
    std::map<std::string, std::set<std::string>> out;
    for (const auto& l : lines(metrics)) {
      std::string keys;
      for (std::sregex_iterator it(l.begin(), l.end(), key), end; it != end; ++it) keys += (*it)[1].str() + " ";
      out[json_find_string(l, "event").value_or("?")].insert(keys);
    }
    return out;
  };
  auto sim = keys_by_event(dir_ / "runs/sim/metrics.jsonl");
  auto real = keys_by_event(dir_ / "runs/real/metrics.jsonl");
  for (const char* event : {"train", "round", "eval", "island_end"}) {
    ASSERT_EQ(sim[event].size(), 1u) << event;
    EXPECT_EQ(sim[event], real[event]) << event;
  }
  for (const auto& l : lines(dir_ / "runs/real/metrics.jsonl")) {
    if (json_find_string(l, "event") == "round") {
      EXPECT_NE(l.find("\"sim_time_s\":null"), std::string::npos) << l;
    }
  }
}

// model.init_from in a real run: islands (and the coordinator's copy) start from the file,
// so launch and simulate from the same warm start still agree bitwise, and differ from the
// cold run they started from.
TEST_F(Processes, LaunchFromAWarmStartMatchesSimulateBitwise) {
  const std::string cfg = config(3, 10);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=cold"), 0);
  const std::string warm = " --set model.init_from=" + (dir_ / "runs/cold/final_params.bin").string();
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim" + warm), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real" + warm), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin")) << "final parameters differ between simulate and launch";
  EXPECT_FALSE(sim == read(dir_ / "runs/cold/final_params.bin"));
}

TEST_F(Processes, LaunchMatchesSimulateBitwiseWithLossyCompression) {
  const std::string cfg = config(3, 10, "compression: [{quantize: int8, block: 64}]\n");
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real"), 0);
  EXPECT_TRUE(read(dir_ / "runs/sim/final_params.bin") == read(dir_ / "runs/real/final_params.bin"));
}

// The same over the Gloo transport (gloo's TCP pairs, rendezvous through the coordinator's
// store): the same ring, so the same bits; and the lossy reduce-scatter/all-gather too.
TEST_F(Processes, LaunchWithGlooMatchesSimulateBitwise) {
  const std::string cfg = config(3, 20);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real --set transport.kind=gloo"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin")) << "final parameters differ between simulate and launch";
  const std::string summary = read(dir_ / "runs/real/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"rounds\":4"), std::string::npos) << summary;
}

TEST_F(Processes, LaunchWithGlooMatchesSimulateBitwiseWithLossyCompression) {
  const std::string cfg = config(3, 10, "compression: [{quantize: int8, block: 64}]\n");
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real --set transport.kind=gloo"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin"));
}

// transport.collective star: the coordinator reduces in member order and sends the mean
// back, and simulate does the same through its server endpoint: the same bits. The star's
// sums run in another order than the ring's, so a simulator that ignored the setting would
// differ (checked against a ring simulation).
TEST_F(Processes, LaunchWithStarMatchesSimulateBitwise) {
  const std::string cfg = config(3, 20);
  const std::string star = " --quiet --set transport.collective=star";
  ASSERT_EQ(run("simulate " + cfg + star + " --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + star + " --set run.name=real"), 0);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=ring"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin")) << "final parameters differ between simulate and launch";
  EXPECT_FALSE(sim == read(dir_ / "runs/ring/final_params.bin")) << "star and ring sums should differ in the last bits";
  const std::string summary = read(dir_ / "runs/real/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"rounds\":4"), std::string::npos) << summary;
}

TEST_F(Processes, LaunchWithStarMatchesSimulateBitwiseWithLossyCompression) {
  const std::string cfg = config(3, 10, "compression: [{quantize: int8, block: 64}]\n");
  const std::string star = " --quiet --set transport.collective=star";
  ASSERT_EQ(run("simulate " + cfg + star + " --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg + star + " --set run.name=real"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin"));
}

// FedAvg's server role runs in the coordinator process; deltas are summed in client order,
// so arrival order does not matter and the result equals the simulator's bitwise.
TEST_F(Processes, FedAvgServerInCoordinatorMatchesSimulateBitwise) {
  std::ostringstream y;
  y << "run: {name: f, seed: 1, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
    << "model: {name: mlp, hidden: [16]}\n"
    << "data: {kind: synthetic, synthetic_examples: 600, synthetic_dim: 8, synthetic_classes: 3, partition: shards}\n"
    << "train: {optimizer: sgd, lr: 0.1, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, "
       "batch_size: 10, steps: 50, eval_every: 10, eval_batches: 0}\n"
    << "islands: {count: 5}\n"
    << "algorithm: {name: fedavg, client_fraction: 0.6, local_steps: 3, rounds: 6, outer_optimizer: sgd, outer_lr: 1.0, outer_momentum: 0}\n"
    << "transport: {coordinator: \"tcp://127.0.0.1:" << port_ << "\", base_port: " << port_ + 1
    << ", heartbeat_ms: 100, heartbeat_timeout_ms: 1500}\n";
  const fs::path cfg = dir_ / "f.yaml";
  std::ofstream(cfg) << y.str();
  ASSERT_EQ(run("simulate " + cfg.string() + " --quiet --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg.string() + " --quiet --set run.name=real"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin"));
  EXPECT_NE(read(dir_ / "runs/real/summary.json").find("\"rounds\":6"), std::string::npos);
  // The server role is evaluated at the same steps, from step 0 on, in both modes.
  auto eval_steps = [](const fs::path& metrics) {
    std::vector<double> steps;
    for (const auto& l : lines(metrics))
      if (json_find_string(l, "event") == "eval") steps.push_back(json_find_number(l, "step").value_or(-1));
    return steps;
  };
  const auto sim_evals = eval_steps(dir_ / "runs/sim/metrics.jsonl");
  ASSERT_FALSE(sim_evals.empty());
  EXPECT_EQ(sim_evals.front(), 0);
  EXPECT_EQ(sim_evals, eval_steps(dir_ / "runs/real/metrics.jsonl"));
}

// data.normalize in both modes: every process standardises with the same training-split
// statistics (the same bits), so launch still equals simulate, and both write them to
// runs/<name>/normalization.json; without it the model ends elsewhere.
TEST_F(Processes, NormalizedDataLaunchMatchesSimulateAndWritesItsStatistics) {
  std::ostringstream y;
  y << "run: {name: n, seed: 3, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
    << "model: {name: mlp, hidden: [16]}\n"
    << "data: {kind: synthetic, synthetic_examples: 600, synthetic_dim: 8, synthetic_classes: 3, val_fraction: 0.1, "
       "normalize: per_feature}\n"
    << "train: {optimizer: sgd, lr: 0.05, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, "
       "batch_size: 10, steps: 30, eval_every: 10, eval_batches: 0}\n"
    << "islands: {count: 3}\n"
    << "algorithm: {name: diloco, inner_steps: 5}\n"
    << "transport: {coordinator: \"tcp://127.0.0.1:" << port_ << "\", base_port: " << port_ + 1
    << ", heartbeat_ms: 100, heartbeat_timeout_ms: 1500}\n";
  const fs::path cfg = dir_ / "n.yaml";
  std::ofstream(cfg) << y.str();
  ASSERT_EQ(run("simulate " + cfg.string() + " --quiet --set run.name=sim"), 0);
  ASSERT_EQ(run("launch " + cfg.string() + " --quiet --set run.name=real"), 0);
  ASSERT_EQ(run("simulate " + cfg.string() + " --quiet --set run.name=plain --set data.normalize=none"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin")) << "final parameters differ between simulate and launch";
  EXPECT_FALSE(sim == read(dir_ / "runs/plain/final_params.bin")) << "data.normalize changed nothing";
  const std::string stats = read(dir_ / "runs/sim/normalization.json");
  EXPECT_EQ(stats.rfind("{\"mode\":\"per_feature\",\"train_examples\":540,\"features\":8,\"mean\":[", 0), 0u) << stats;
  EXPECT_EQ(stats, read(dir_ / "runs/real/normalization.json"));
  EXPECT_FALSE(fs::exists(dir_ / "runs/plain/normalization.json"));
  EXPECT_NE(read(dir_ / "runs/sim/config.yaml").find("normalize: \"per_feature\""), std::string::npos);
}

TEST_F(Processes, CtrlCLeavesNoProcessBehind) {
  const std::string cfg = config(2, 100000);  // would run for a long time
  atl::testing::expect_ctrl_c_leaves_no_process_behind({"launch", cfg, "--quiet"}, 3, "coordinator + 2 islands",
                                                       std::chrono::seconds(1));
}

// Island 2 is killed with SIGKILL mid-run: the coordinator declares it dead, the survivors'
// rounds complete with 2 contributors, and the run finishes without hanging; launch says so
// in one line and exits 3 (finished with survivors), not 1 (failed). `kind`: the
// transport.kind of the islands' data plane.
// `setting` (and `setting2`, when given): --set overrides that pick the transport
// ("transport.kind=gloo", ...) or the algorithm.
// `ranks` > 1: islands of that many ranks (island 2's other ranks end with its rank 0).
void killed_island_run_completes_with_survivors(Processes& t, const std::string& setting,
                                                const std::string& setting2 = "", int ranks = 1) {
  const std::string cfg = t.config(3, 400);
  std::vector<std::string> args = {"launch", cfg, "--quiet", "--set", setting};
  if (!setting2.empty()) {
    args.push_back("--set");
    args.push_back(setting2);
  }
  if (ranks > 1) {
    for (const std::string& s : {"islands.ranks=" + std::to_string(ranks), "transport.rank_port=" + std::to_string(t.port_ + 10),
                                 std::string("model.layers=2")}) {
      args.push_back("--set");
      args.push_back(s);
    }
  }
  const pid_t pid = spawn(args, t.dir_ / "launch.log");
  ASSERT_GT(pid, 0);
  const fs::path metrics = t.dir_ / "runs/r/metrics.jsonl";
  // wait for a few completed rounds, then kill the last island (the newest child)
  bool started = false;
  for (int i = 0; i < 300 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    started = read(metrics).find("\"round\":3,") != std::string::npos;
  }
  ASSERT_TRUE(started) << "no rounds within 30 s";
  const auto kids = children_of(pid);
  ASSERT_EQ(kids.size(), 1u + 3u * static_cast<size_t>(ranks));
  const pid_t victim = atl::testing::island_child(pid, 2);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int status = 0;
  for (int i = 0; i < 1200; ++i) {  // at most 120 s
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (i == 1199) {
      kill(pid, SIGKILL);
      FAIL() << "launch did not finish after an island was killed";
    }
  }
  const std::string m = read(metrics);
  EXPECT_NE(m.find("\"contributors\":2"), std::string::npos) << "no round completed with the survivors";
  EXPECT_NE(m.find("\"event\":\"membership\""), std::string::npos);
  // The coordinator's membership records, written through the one membership_record builder
  // (src/core/records.h) that the simulator uses too: the documented fields in the documented
  // order (docs/metrics.md), one record per island whose membership changed.
  const std::regex membership(
      R"re(\{"event":"membership","island":[0-9]+,"change":"(joined|rejoined|added|ready|left|failed)","reason":"[^"]*","step":null,"epoch":[0-9]+,"members":\[[0-9,]*\],"size":[0-9]+,"wall_time_s":[0-9.e+]+,"sim_time_s":null\})re");
  int membership_records = 0;
  std::istringstream lines(m);
  for (std::string l; std::getline(lines, l);) {
    if (l.find("\"event\":\"membership\"") == std::string::npos) continue;
    ++membership_records;
    EXPECT_TRUE(std::regex_match(l, membership)) << l;
  }
  EXPECT_GT(membership_records, 0);
  // The killed island (the newest child: island 2) is declared dead, and the view after it
  // holds the survivors.
  EXPECT_TRUE(std::regex_search(m, std::regex(R"("island":2,"change":"failed","reason":"[^"]+","step":null,"epoch":[0-9]+,"members":\[0,1\],"size":2)")))
      << "no `failed` membership record for island 2";
  const std::string summary = read(t.dir_ / "runs/r/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":2"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"steps\":400"), std::string::npos) << summary;
  // Finished with the survivors: its own exit code and one line that names the lost island.
  ASSERT_TRUE(WIFEXITED(status)) << "launch ended by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 3) << read(t.dir_ / "launch.log");
  const std::string log = read(t.dir_ / "launch.log");
  std::string lost = "island 2 (signal 9)";
  for (int r = 1; r < ranks; ++r) lost += ", island 2 rank " + std::to_string(r) + " (exit code 1)";
  EXPECT_NE(log.find("launch: the run finished with 2 of 3 islands; lost: " + lost + " (exit code 3)"), std::string::npos)
      << log;
}

TEST_F(Processes, KilledIslandRunCompletesWithSurvivors) {
  killed_island_run_completes_with_survivors(*this, "transport.kind=zmq");
}

// islands.shard_exchange: the survivors' shard planes learn of the death from their rank 0's
// view, and every shard of the round ends with the survivors (transport::agree_shards).
TEST_F(Processes, KilledIslandRunCompletesWithSurvivorsWithAShardedExchange) {
  killed_island_run_completes_with_survivors(*this, "islands.shard_exchange=true", "", 2);
}

TEST_F(Processes, KilledIslandRunCompletesWithSurvivorsWithAShardedExchangeOverGloo) {
  killed_island_run_completes_with_survivors(*this, "islands.shard_exchange=true", "transport.kind=gloo", 2);
}

// The star all-reduce: the coordinator itself finds the island dead and completes the
// collective it was waiting for with the survivors' mean.
TEST_F(Processes, KilledIslandRunCompletesWithSurvivorsOverTheStar) {
  killed_island_run_completes_with_survivors(*this, "transport.collective=star");
}

// Over Gloo the killed island's connections close with it: the survivors' mesh breaks at
// once, and the round restarts among them when the coordinator drops the island.
TEST_F(Processes, KilledIslandRunCompletesWithSurvivorsOverGloo) {
  killed_island_run_completes_with_survivors(*this, "transport.kind=gloo");
}

// Island 0, the lead that evaluates the global model, is killed with SIGKILL mid-run: the
// lowest survivor takes over. Every eval step is recorded exactly once up to the last step
// (an eval step every 20 steps, which is not a round boundary with H = 8), the last one by
// a survivor, and summary.json's final_val_loss is that of the final step.
TEST_F(Processes, EvaluationSurvivesTheLeadsDeath) {
  const int steps = 2000, every = 20;
  const std::string cfg = config(3, steps);
  const fs::path metrics = dir_ / "runs/r/metrics.jsonl";
  const pid_t launch = spawn({"launch", cfg, "--quiet", "--set", "train.eval_every=" + std::to_string(every), "--set",
                              "algorithm.inner_steps=8"},
                             dir_ / "launch.log");
  ASSERT_GT(launch, 0);
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"eval\"", "\"step\":200,"}, 60)) << "no eval at step 200 within 60 s";
  const pid_t lead = atl::testing::island_child(launch, 0);
  ASSERT_GT(lead, 0);
  ASSERT_EQ(kill(lead, SIGKILL), 0);
  const int rc = wait_bounded(launch, 120);
  ASSERT_NE(rc, -1) << "launch did not finish (a hang)\n" << read(dir_ / "launch.log");

  std::map<int64_t, int> evals;  // step -> eval records of it
  std::map<int64_t, double> val_loss;
  int64_t killed_at = -1;  // the first eval step recorded by another island
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "eval") continue;
    const auto step = static_cast<int64_t>(json_find_number(l, "step").value_or(-1));
    ++evals[step];
    val_loss[step] = json_find_number(l, "val_loss").value_or(NAN);
    if (json_find_number(l, "island").value_or(0) != 0 && killed_at < 0) killed_at = step;
  }
  for (int64_t s = 0; s <= steps; s += every) EXPECT_EQ(evals[s], 1) << "eval records of step " << s;
  EXPECT_EQ(evals.size(), static_cast<size_t>(steps / every + 1)) << "eval records at steps that are not eval steps";
  EXPECT_GT(killed_at, 200) << "no eval by a survivor";
  const std::string summary = read(dir_ / "runs/r/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":2"), std::string::npos) << summary;
  EXPECT_EQ(json_find_number(summary, "steps"), steps) << summary;
  EXPECT_EQ(json_find_number(summary, "last_eval_step"), steps) << summary;
  ASSERT_TRUE(json_find_number(summary, "final_val_loss")) << summary;
  EXPECT_EQ(*json_find_number(summary, "final_val_loss"), val_loss[steps]) << summary;
  EXPECT_GT(read(dir_ / "runs/r/final_params.bin").size(), 100u) << "no final parameters from a survivor";
}

// Island 2 is killed with SIGKILL mid-run, the survivors go on with 2 contributors, and then
// `atoll island CONFIG --id 2` is started again: it rejoins with a live island's state
// hand-over (global model, outer-optimizer state, round count), takes part in every round
// after that, and ends with the same global model as the others.
// `settings`: --set overrides for launch and the restarted island alike.
void restarted_island_rejoins(Processes& t, const std::vector<std::string>& settings) {
  const fs::path& dir = t.dir_;
  const int steps = 3000;  // about 10 s: the survivors are still training when island 2 is back
  const std::string cfg = t.config(3, steps);
  const fs::path metrics = dir / "runs/r/metrics.jsonl";
  auto args = [&](std::vector<std::string> a) {
    for (const auto& s : settings) a.insert(a.end(), {"--set", s});
    return a;
  };
  const pid_t launch = spawn(args({"launch", cfg, "--quiet"}), dir / "launch.log");
  ASSERT_GT(launch, 0);
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"round\"", "\"round\":3,"}, 30)) << "no rounds within 30 s";
  const auto kids = children_of(launch);
  ASSERT_EQ(kids.size(), 4u);
  const pid_t victim = atl::testing::island_child(launch, 2);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"round\"", "\"contributors\":2,"}, 30))
      << "the survivors did not go on without island 2";

  const pid_t restarted = spawn(args({"island", cfg, "--id", "2", "--quiet"}), dir / "island2.log");
  ASSERT_GT(restarted, 0);
  const int launch_rc = wait_bounded(launch, 90);
  const int island_rc = wait_bounded(restarted, 30);
  ASSERT_NE(launch_rc, -1) << "launch did not finish (a hang)\n" << read(dir / "launch.log");
  ASSERT_EQ(island_rc, 0) << read(dir / "island2.log");

  // The hand-over, as the joiner recorded it.
  std::optional<double> rejoin_round;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") == "rejoin" && json_find_number(l, "island") == 2) {
      rejoin_round = json_find_number(l, "round");
      EXPECT_GE(json_find_number(l, "step").value_or(-1), 15.0) << l;
    }
  }
  ASSERT_TRUE(rejoin_round) << "no rejoin record\n" << read(dir / "island2.log");
  // Island 2's rounds: its first life, then, after the hand-over, the count goes on from the
  // donor's round; every round after the hand-over has all three islands.
  std::vector<double> rounds_of_2;
  int after = 0;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "round") continue;
    const double round = json_find_number(l, "round").value_or(-1);
    if (json_find_number(l, "island") == 2) rounds_of_2.push_back(round);
    if (round > *rejoin_round) {
      ++after;
      EXPECT_EQ(json_find_number(l, "contributors"), 3) << l;
    }
  }
  EXPECT_GE(after, 3 * 10) << "fewer than 10 rounds after the rejoin";
  ASSERT_FALSE(rounds_of_2.empty());
  for (size_t i = 1; i < rounds_of_2.size(); ++i) EXPECT_GT(rounds_of_2[i], rounds_of_2[i - 1]);
  auto first_after = std::find_if(rounds_of_2.begin(), rounds_of_2.end(), [&](double r) { return r > *rejoin_round; });
  ASSERT_NE(first_after, rounds_of_2.end());
  EXPECT_EQ(*first_after, *rejoin_round + 1) << "the restarted island's round count does not go on";
  EXPECT_GT(first_after - rounds_of_2.begin(), 0) << "no round of island 2 before it was killed";

  // The coordinator's membership records tell the story: island 2 failed, then rejoined (a
  // process of an island seen before), then became ready after its hand-over.
  std::vector<std::string> changes_of_2;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") == "membership" && json_find_number(l, "island") == 2)
      changes_of_2.push_back(json_find_string(l, "change").value_or(""));
  }
  const auto failed = std::find(changes_of_2.begin(), changes_of_2.end(), "failed");
  ASSERT_NE(failed, changes_of_2.end()) << "no `failed` membership record for island 2";
  const auto rejoined = std::find(failed, changes_of_2.end(), "rejoined");
  ASSERT_NE(rejoined, changes_of_2.end()) << "no `rejoined` membership record after island 2 failed";
  EXPECT_NE(std::find(rejoined, changes_of_2.end(), "ready"), changes_of_2.end())
      << "island 2 never became ready after it rejoined";
  // Every island ends with the same global model.
  std::map<int, std::string> global;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "island_end") continue;
    global[static_cast<int>(json_find_number(l, "island").value_or(-1))] = json_find_string(l, "global_xxh64").value_or("");
    EXPECT_EQ(json_find_number(l, "steps"), steps) << l;
  }
  ASSERT_EQ(global.size(), 3u);
  EXPECT_FALSE(global[0].empty());
  EXPECT_EQ(global[0], global[1]);
  EXPECT_EQ(global[0], global[2]) << "the restarted island's final global model differs";
  EXPECT_NE(read(dir / "runs/r/summary.json").find("\"islands_finished\":3"), std::string::npos);
}

TEST_F(Processes, RestartedIslandRejoinsTheRunningRun) { restarted_island_rejoins(*this, {}); }

// With the star all-reduce the joiner tells the coordinator where it starts
// (ZmqGroupOptions::first_seq), so collectives before it do not wait for it.
TEST_F(Processes, RestartedIslandRejoinsTheRunningRunOverTheStar) {
  restarted_island_rejoins(*this, {"transport.collective=star"});
}

// Streaming DiLoCo: the donor hands over at a step boundary with no fragment in flight, with
// every fragment's outer state; the joiner is in every fragment sync after it.
TEST_F(Processes, RestartedIslandRejoinsAStreamingDiLoCoRun) {
  restarted_island_rejoins(*this, {"algorithm.name=streaming_diloco", "model.layers=2", "algorithm.inner_steps=8",
                                   "algorithm.fragments=2", "algorithm.overlap_steps=2"});
}

// DiPaCo with one level of two modules: two paths, islands 0 and 2 on path 0, 1 and 3 on
// path 1. Island 3 is killed and restarted: it rejoins with the state of island 1 (the live
// island on its path; island 0, the lowest id, holds another path), takes part in the
// sub-groups of its modules from the donor's next collective in each (ZmqGroupOptions::
// first_seqs), and its modules are averaged with the islands sharing them again: every
// round after the hand-over has all four islands in the shared module, and island 3 ends
// with island 1's path model.
TEST_F(Processes, RestartedIslandRejoinsADiPaCoRun) {
  const int steps = 3000;
  const std::string cfg = config(4, steps, "dipaco: {levels: [{blocks: [0], modules: 2}], prefix: 8}\n");
  const std::vector<std::string> set = {"--set", "algorithm.name=dipaco"};
  const fs::path metrics = dir_ / "runs/r/metrics.jsonl";
  std::vector<std::string> launch_args = {"launch", cfg, "--quiet"};
  launch_args.insert(launch_args.end(), set.begin(), set.end());
  const pid_t launch = spawn(launch_args, dir_ / "launch.log");
  ASSERT_GT(launch, 0);
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"round\"", "\"round\":3,"}, 60)) << "no rounds within 60 s";
  const auto kids = children_of(launch);
  ASSERT_EQ(kids.size(), 5u);
  const pid_t victim = atl::testing::island_child(launch, 3);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"round\"", "\"contributors\":3,"}, 30))
      << "the survivors did not go on without island 3";

  std::vector<std::string> island_args = {"island", cfg, "--id", "3", "--quiet"};
  island_args.insert(island_args.end(), set.begin(), set.end());
  const pid_t restarted = spawn(island_args, dir_ / "island3.log");
  ASSERT_GT(restarted, 0);
  const int launch_rc = wait_bounded(launch, 120);
  const int island_rc = wait_bounded(restarted, 30);
  ASSERT_NE(launch_rc, -1) << "launch did not finish (a hang)\n" << read(dir_ / "launch.log");
  ASSERT_EQ(island_rc, 0) << read(dir_ / "island3.log");

  std::optional<double> rejoin_round;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") == "rejoin" && json_find_number(l, "island") == 3) {
      rejoin_round = json_find_number(l, "round");
      EXPECT_EQ(json_find_number(l, "donor"), 1) << "the donor is not the live island on island 3's path: " << l;
    }
  }
  ASSERT_TRUE(rejoin_round) << "no rejoin record\n" << read(dir_ / "island3.log");
  int after = 0;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "round" || json_find_number(l, "round").value_or(-1) <= *rejoin_round) continue;
    ++after;
    EXPECT_EQ(json_find_number(l, "contributors"), 4) << l;
  }
  EXPECT_GE(after, 4 * 10) << "fewer than 10 rounds after the rejoin";
  std::map<int, std::string> global;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "island_end") continue;
    global[static_cast<int>(json_find_number(l, "island").value_or(-1))] = json_find_string(l, "global_xxh64").value_or("");
    EXPECT_EQ(json_find_number(l, "steps"), steps) << l;
  }
  ASSERT_EQ(global.size(), 4u);
  EXPECT_FALSE(global[1].empty());
  EXPECT_EQ(global[1], global[3]) << "the restarted island's path model differs from its path's other island's";
  EXPECT_EQ(global[0], global[2]);
  EXPECT_NE(global[0], global[1]) << "the two paths ended the same";
  EXPECT_NE(read(dir_ / "runs/r/summary.json").find("\"islands_finished\":4"), std::string::npos);
}


// DeMo (docs/algorithms.md §4): one allgather of (index, value) pairs every step. Over zmq
// and gloo, a real run ends on the same parameters as the simulator, bit for bit (every
// island decodes the same gathered bytes; the tensor work is on the CPU in both); with
// fp16 values too.

TEST_F(Processes, DemoLaunchMatchesSimulateBitwise) {
  const std::string cfg = config(3, 12);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim" + kDemo), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real" + kDemo), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=gloo --set transport.kind=gloo" + kDemo), 0);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=ddp --set 'algorithm={name: ddp}'"), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin")) << "zmq: final parameters differ from simulate";
  EXPECT_TRUE(sim == read(dir_ / "runs/gloo/final_params.bin")) << "gloo: final parameters differ from simulate";
  EXPECT_FALSE(sim == read(dir_ / "runs/ddp/final_params.bin"));
  for (const char* name : {"real", "gloo"}) {
    const std::string summary = read(dir_ / "runs" / name / "summary.json");
    EXPECT_NE(summary.find("\"islands_finished\":3"), std::string::npos) << name << " " << summary;
    EXPECT_NE(summary.find("\"rounds\":12"), std::string::npos) << name << " " << summary;  // one per step
  }
}

TEST_F(Processes, DemoLaunchMatchesSimulateBitwiseWithFp16Values) {
  const std::string cfg = config(3, 8, "compression: [{quantize: fp16}]\n");
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim" + kDemo), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real --set transport.kind=gloo" + kDemo), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin"));
}

TEST_F(Processes, DemoKilledIslandRunCompletesWithSurvivors) {
  killed_island_run_completes_with_survivors(*this, "algorithm={name: demo}");
}

TEST_F(Processes, DemoKilledIslandRunCompletesWithSurvivorsOverGloo) {
  killed_island_run_completes_with_survivors(*this, "algorithm={name: demo}", "transport.kind=gloo");
}

// SparseLoCo (docs/algorithms.md §13): one allgather of top-k indices and 2-bit lut2 values
// per round. Over zmq a real run ends on the simulator's parameters bit for bit (every island
// applies the mean of the same gathered bytes); the 2-bit values make it differ from fp32.
TEST_F(Processes, SparseLoCoLaunchMatchesSimulateBitwise) {
  const std::string cfg = config(3, 12, "compression: [{quantize: lut2}]\n");
  const std::string algo = " --set 'algorithm={name: sparseloco, inner_steps: 4, chunk: 16, topk: 8}'";
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=sim" + algo), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=real" + algo), 0);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=fp32 --set compression=[]" + algo), 0);
  const std::string sim = read(dir_ / "runs/sim/final_params.bin");
  ASSERT_GT(sim.size(), 100u);
  EXPECT_TRUE(sim == read(dir_ / "runs/real/final_params.bin")) << "zmq: final parameters differ from simulate";
  EXPECT_FALSE(sim == read(dir_ / "runs/fp32/final_params.bin"));
  const std::string summary = read(dir_ / "runs/real/summary.json");
  EXPECT_NE(summary.find("\"islands_finished\":3"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"rounds\":3"), std::string::npos) << summary;
}

// A restarted DeMo island rejoins with the global model and the step count; its residual
// starts at zero ([impl choice], algorithms/demo.h), and it ends on the same model.
TEST_F(Processes, RestartedIslandRejoinsADemoRun) {
  restarted_island_rejoins(*this, {"algorithm={name: demo, chunk: 16, topk: 8}"});
}

}  // namespace

// transport.coordinator tcp://*:PORT: the coordinator binds every interface and writes where it
// is into the run directory; the islands read it there (docs/slurm.md "The coordinator's
// address"), and the run ends as with the address in the config. The file goes with the run.
TEST_F(Processes, IslandsFindTheCoordinatorThroughTheRunDirectory) {
  const std::string cfg = config(2, 20);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=given"), 0);
  const fs::path log = dir_ / "found.log";
  const std::string found = "launch " + cfg + " --set run.name=found --set 'transport.coordinator=tcp://*:" +
                            std::to_string(port_) + "'";
  const int status = std::system((std::string(ATOLL_BINARY) + " " + found + " > " + log.string() + " 2>&1").c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read(log);
  const std::string address_file = (dir_ / "runs/found/coordinator.address").string();
  EXPECT_NE(read(log).find("island 1: the coordinator is at tcp://"), std::string::npos) << read(log);
  EXPECT_NE(read(log).find(":" + std::to_string(port_) + " (" + address_file + ")"), std::string::npos) << read(log);
  EXPECT_FALSE(fs::exists(address_file)) << "the address outlived the run";
  EXPECT_TRUE(read(dir_ / "runs/found/final_params.bin") == read(dir_ / "runs/given/final_params.bin"));
}

// transport.host "*" (docs/slurm.md "Islands on several nodes"): each island binds every
// interface and publishes its node's name, a gloo island's pairs and an island's ranks use
// that name too (and the ranks' shard planes, islands.shard_exchange); the runs end as with the
// address in the config, over zmq, over gloo and with islands of two ranks.
TEST_F(Processes, IslandsOnAnyNodePublishTheirNodesAddress) {
  char name[256] = {};
  ASSERT_EQ(::gethostname(name, sizeof name - 1), 0);
  const std::string cfg = config(2, 20);
  for (const std::string& extra : {std::string(" --set transport.kind=zmq"), std::string(" --set transport.kind=gloo"),
                                   std::string(" --set islands.ranks=2"),
                                   std::string(" --set islands.ranks=2 --set islands.shard_exchange=true --set model.layers=2")}) {
    SCOPED_TRACE(extra);
    ASSERT_EQ(run("launch " + cfg + " --quiet --force --set run.name=given" + extra), 0);
    const fs::path log = dir_ / "any.log";
    const std::string any = "launch " + cfg + " --force --set run.name=any --set 'transport.host=\"*\"'" + extra;
    const int status = std::system((std::string(ATOLL_BINARY) + " " + any + " > " + log.string() + " 2>&1").c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read(log);
    for (int island : {0, 1}) {
      const std::string line = "island " + std::to_string(island) + ": data plane on every interface, reached at tcp://" +
                               name + ":" + std::to_string(port_ + 1 + island);
      EXPECT_NE(read(log).find(line), std::string::npos) << line << "\n" << read(log);
    }
    EXPECT_TRUE(read(dir_ / "runs/any/final_params.bin") == read(dir_ / "runs/given/final_params.bin"));
  }
}
