// Tests for sweep files (src/config/sweep_spec), their expansion into runs (src/sweep/plan),
// the CSV helpers and reading results back (src/sweep/results), and how a run's child starts
// (src/sweep/process). The runner is tested through the atoll binary in sweep_cli_test.cpp.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "src/base/status.h"
#include "src/config/sweep_spec.h"
#include "src/core/run_dir.h"
#include "src/sweep/csv.h"
#include "src/sweep/plan.h"
#include "src/sweep/process.h"
#include "src/sweep/results.h"

namespace atl::sweep {
namespace {

namespace fs = std::filesystem;

// A complete base config that needs no files (synthetic data, a small MLP).
const std::string kBase =
    "run: {name: base, threads: 1}\n"
    "model: {name: mlp, hidden: [8]}\n"
    "data: {kind: synthetic, synthetic_examples: 256, synthetic_dim: 4, synthetic_classes: 3}\n"
    "train: {steps: 20, eval_every: 10}\n"
    "islands: {count: 2}\n"
    "algorithm: {name: diloco, inner_steps: 5}\n";
// The same for sweeps over algorithm.name: a key in the base must be one every swept
// algorithm reads, so H = 5 is diloco's, under per_algorithm (same lines as kBase).
const std::string kNamesBase = kBase.substr(0, kBase.find("algorithm:")) + "algorithm: {name: diloco}\n";
const std::string kDilocoH5 = "  per_algorithm:\n    diloco: {set: {algorithm.inner_steps: 5}}\n";

class SweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("atoll_sweep_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ExpandedSweep expand_text(const std::string& text) {
    return expand(config::parse_sweep_spec(text, "s.yaml"), dir_.string(), [](const config::Config&) {});
  }
  // The message of the UserError that expanding `text` throws ("" when none).
  std::string error_of(const std::string& text) {
    try {
      expand_text(text);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  // The same for the smoke plan (`atoll sweep --smoke`).
  std::string error_of_smoke(const std::string& text) {
    try {
      expand(config::parse_sweep_spec(text, "s.yaml"), dir_.string(), [](const config::Config&) {}, true);
    } catch (const UserError& e) {
      return e.what();
    }
    return "";
  }
  static std::vector<std::string> ids(const SweepPlan& plan) {
    std::vector<std::string> out;
    for (const auto& r : plan.runs) out.push_back(r.id);
    return out;
  }
  fs::path dir_;
};

TEST_F(SweepTest, GridIsACartesianProductTimesSeeds) {
  const auto s = expand_text(kNamesBase +
                             "sweep:\n"
                             "  name: demo\n"
                             "  seeds: [1, 2]\n"
                             "  grid:\n"
                             "    algorithm.name: [ddp, diloco]\n"
                             "    train.lr: [0.001, 0.01]\n" + kDilocoH5);
  EXPECT_EQ(s.plan.name, "demo");
  EXPECT_EQ(s.plan.dir, (dir_ / "demo").string());
  EXPECT_EQ(s.plan.keys, (std::vector<std::string>{"algorithm.name", "train.lr"}));
  ASSERT_EQ(s.plan.runs.size(), 8u);
  EXPECT_EQ(s.plan.runs[0].id, "algorithm=ddp,lr=0.001,seed=1");
  EXPECT_EQ(s.plan.runs[0].group, "algorithm=ddp,lr=0.001");
  EXPECT_EQ(s.plan.runs[7].id, "algorithm=diloco,lr=0.01,seed=2");
  const config::Config& last = s.configs[7];
  EXPECT_EQ(last.algorithm.name, "diloco");
  EXPECT_DOUBLE_EQ(last.train.lr, 0.01);
  EXPECT_EQ(last.run.seed, 2u);
  EXPECT_EQ(last.run.name, s.plan.runs[7].id);
  EXPECT_EQ(last.run.out_dir, (dir_ / "demo" / "runs").string());
  EXPECT_EQ(last.model.hidden, std::vector<int>{8});  // from the base
  EXPECT_EQ(last.algorithm.get<algorithms::DilocoOptions>().inner_steps, 5);          // per_algorithm
  // Every run resolves to its own config, and its hash is that config's.
  std::set<std::string> hashes;
  for (size_t i = 0; i < s.plan.runs.size(); ++i) {
    EXPECT_EQ(s.plan.runs[i].hash, core::config_hash(s.configs[i]));
    hashes.insert(s.plan.runs[i].hash);
  }
  EXPECT_EQ(hashes.size(), 8u);
}

TEST_F(SweepTest, ZipVariesKeysTogetherAndLabelsCompression) {
  const auto s = expand_text(kBase +
                             "sweep:\n"
                             "  zip:\n"
                             "    compression: [[], [{quantize: int8}], [{topk: 0.01}, {quantize: int4, block: 64}]]\n"
                             "    algorithm.error_feedback: [false, false, true]\n");
  ASSERT_EQ(s.plan.runs.size(), 3u);
  EXPECT_EQ(ids(s.plan), (std::vector<std::string>{
                             "compression=fp32,error_feedback=false,seed=0",
                             "compression=int8,error_feedback=false,seed=0",
                             "compression=topk0.01+int4-block64,error_feedback=true,seed=0"}));
  EXPECT_TRUE(s.configs[0].compression.empty());
  ASSERT_EQ(s.configs[2].compression.size(), 2u);
  EXPECT_EQ(s.configs[2].compression[1].format, "int4");
  EXPECT_EQ(s.configs[2].compression[1].block, 64);
  EXPECT_TRUE(s.configs[2].algorithm.get<algorithms::DilocoOptions>().error_feedback);
}

TEST_F(SweepTest, PerAlgorithmKeysApplyOnlyToThatAlgorithm) {
  const auto s = expand_text(kNamesBase +
                             "sweep:\n"
                             "  grid:\n"
                             "    algorithm.name: [ddp, diloco]\n"
                             "  per_algorithm:\n"
                             "    diloco:\n"
                             "      set: {algorithm.outer_lr: 0.5}\n"
                             "      grid: {algorithm.inner_steps: [5, 10]}\n");
  // ddp once (H means nothing to it), diloco once per H.
  EXPECT_EQ(ids(s.plan), (std::vector<std::string>{"algorithm=ddp,seed=0", "algorithm=diloco,inner_steps=5,seed=0",
                                                   "algorithm=diloco,inner_steps=10,seed=0"}));
  EXPECT_EQ(s.plan.keys, (std::vector<std::string>{"algorithm.name", "algorithm.inner_steps"}));
  EXPECT_EQ(s.plan.runs[0].values, (std::vector<std::string>{"ddp", ""}));
  // ddp has no outer_lr: the key is not set for it.
  EXPECT_TRUE(std::holds_alternative<algorithms::DdpOptions>(s.configs[0].algorithm.params));
  EXPECT_EQ(s.configs[0].origins.count("algorithm.outer_lr"), 0u);
  EXPECT_DOUBLE_EQ(s.configs[1].algorithm.get<algorithms::DilocoOptions>().outer.lr, 0.5);
  EXPECT_EQ(s.configs[2].algorithm.get<algorithms::DilocoOptions>().inner_steps, 10);
}

// `atoll sweep --smoke`: the first run of each algorithm, first seed only, with the common
// smoke keys and then its algorithm's set over its own values, in <name>-smoke/.
TEST_F(SweepTest, SmokePlanIsTheFirstRunOfEachAlgorithmShrunk) {
  const std::string text = kNamesBase +
                           "sweep:\n"
                           "  name: demo\n"
                           "  seeds: [4, 5]\n"
                           "  grid:\n"
                           "    algorithm.name: [ddp, diloco]\n"
                           "    train.steps: [20, 40]\n"
                           "  per_algorithm:\n"
                           "    diloco:\n"
                           "      grid: {algorithm.inner_steps: [5, 10]}\n"
                           "      smoke: {algorithm.inner_steps: 2}\n"
                           "  smoke: {train.steps: 4, train.eval_every: 2}\n";
  const auto whole = expand_text(text);
  ASSERT_EQ(whole.plan.runs.size(), 12u);
  EXPECT_EQ(whole.configs[0].train.steps, 20);  // smoke keys leave the real plan alone
  EXPECT_EQ(whole.configs[4].algorithm.get<algorithms::DilocoOptions>().inner_steps, 5);
  const auto s = expand(config::parse_sweep_spec(text, "s.yaml"), dir_.string(), [](const config::Config&) {}, true);
  EXPECT_EQ(s.plan.name, "demo-smoke");
  EXPECT_EQ(s.plan.dir, (dir_ / "demo-smoke").string());
  EXPECT_EQ(ids(s.plan), (std::vector<std::string>{"algorithm=ddp,steps=20,seed=4",
                                                   "algorithm=diloco,steps=20,inner_steps=5,seed=4"}));
  for (const auto& c : s.configs) {
    EXPECT_EQ(c.train.steps, 4);
    EXPECT_EQ(c.train.eval_every, 2);
    EXPECT_EQ(c.run.seed, 4u);
  }
  EXPECT_EQ(s.configs[0].algorithm.name, "ddp");
  EXPECT_EQ(s.configs[1].algorithm.get<algorithms::DilocoOptions>().inner_steps, 2);

  // A bad smoke value names its line in the smoke mapping; smoke keys are checked like others.
  std::string msg = error_of_smoke(kBase + "sweep:\n  grid: {train.lr: [0.1]}\n  smoke: {train.steps: -4}\n");
  EXPECT_EQ(msg.rfind("s.yaml:9: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("train.steps"), std::string::npos) << msg;
  msg = error_of(kBase + "sweep:\n  smoke: {train.stepz: 4}\n");
  EXPECT_NE(msg.find("did you mean 'train.steps'"), std::string::npos) << msg;
  msg = error_of(kBase + "sweep:\n  smoke:\n    train.steps: 4\n    train.steps: 5\n");
  EXPECT_NE(msg.find("'sweep.smoke.train.steps': is listed twice"), std::string::npos) << msg;
  msg = error_of(kBase + "sweep:\n  smoke: {algorithm.name: ddp}\n");
  EXPECT_NE(msg.find("keeps its run's algorithm"), std::string::npos) << msg;
  msg = error_of(kBase + "sweep:\n  per_algorithm:\n    diloco: {smok: {train.steps: 4}}\n");
  EXPECT_NE(msg.find("did you mean 'sweep.per_algorithm.diloco.smoke'"), std::string::npos) << msg;
}

TEST_F(SweepTest, TypoInASweptKeyNamesTheKeyTheLineAndTheFix) {
  const std::string msg = error_of(kBase + "sweep:\n  grid:\n    algorithm.inner_step: [5, 10]\n");
  EXPECT_NE(msg.find("s.yaml:9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("algorithm.inner_step'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'algorithm.inner_steps'"), std::string::npos) << msg;
  EXPECT_NE(error_of(kBase + "sweep:\n  per_algorithm:\n    diloco: {set: {train.lrr: 0.1}}\n").find("train.lr'"),
            std::string::npos);
  EXPECT_NE(error_of(kBase + "sweep:\n  gird: {train.lr: [0.1]}\n").find("did you mean 'sweep.grid'"),
            std::string::npos);
}

TEST_F(SweepTest, InvalidCombinationsAreRejectedBeforeRunning) {
  // A bad value: the run, the key and the line of the sweep file where it is listed.
  std::string msg = error_of(kBase + "sweep:\n  grid:\n    train.lr: [0.1, -1]\n");
  EXPECT_NE(msg.find("s.yaml:9"), std::string::npos) << msg;
  EXPECT_NE(msg.find("lr=-1,seed=0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
  // zip lists of different lengths.
  msg = error_of(kBase + "sweep:\n  zip: {train.lr: [0.1, 0.2], train.steps: [5]}\n");
  EXPECT_NE(msg.find("train.steps"), std::string::npos) << msg;
  // A per_algorithm entry for an algorithm no run uses.
  msg = error_of(kNamesBase + "sweep:\n  grid: {algorithm.name: [ddp, fedavg]}\n"
                         "  per_algorithm:\n    diloco: {set: {train.lr: 0.1}}\n");
  EXPECT_NE(msg.find("sweep.per_algorithm.diloco"), std::string::npos) << msg;
  // The same key varied in the grid and set per algorithm.
  msg = error_of(kBase + "sweep:\n  grid: {train.lr: [0.1]}\n  per_algorithm:\n    diloco: {set: {train.lr: 0.2}}\n");
  EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
  // Two runs that would be the same experiment.
  msg = error_of(kBase + "sweep:\n  grid: {train.lr: [0.1, 0.10]}\n");
  EXPECT_NE(msg.find("resolve to the same config"), std::string::npos) << msg;
  // Keys the sweep owns.
  EXPECT_NE(error_of(kBase + "sweep:\n  grid: {run.seed: [1, 2]}\n").find("seeds:"), std::string::npos);
  EXPECT_NE(error_of(kBase + "sweep:\n  grid: {run.name: [a, b]}\n").find("run.name"), std::string::npos);
  EXPECT_NE(error_of(kBase + "sweep:\n  seeds: [1, 1]\n").find("twice"), std::string::npos);
  EXPECT_NE(error_of(kBase).find("no 'sweep:' section"), std::string::npos);
}

// A key of the base that an algorithm of the grid does not read is refused like in a config
// file, naming the run, the base's line and the keys of that algorithm.
TEST_F(SweepTest, ABaseKeyThatASweptAlgorithmDoesNotReadIsRefused) {
  const std::string msg = error_of(kBase + "sweep:\n  grid: {algorithm.name: [diloco, ddp]}\n");
  EXPECT_NE(msg.find("sweep run 'algorithm=ddp,seed=0': s.yaml:6: key 'algorithm.inner_steps': is not a key of "
                     "algorithm 'ddp' (its keys: name); set it under sweep.per_algorithm for the algorithms "
                     "that read it"),
            std::string::npos)
      << msg;
  const std::string per = error_of(kNamesBase + "sweep:\n  grid: {algorithm.name: [diloco, demo]}\n"
                                                "  per_algorithm:\n    demo: {set: {algorithm.outer_lr: 0.5}}\n");
  EXPECT_NE(per.find("key 'algorithm.outer_lr': is not a key of algorithm 'demo'"), std::string::npos) << per;
}

TEST_F(SweepTest, TheCheckRunsOnEveryResolvedConfig) {
  const auto spec = config::parse_sweep_spec(kNamesBase + "sweep:\n  grid: {algorithm.name: [ddp, nope]}\n", "s.yaml");
  int checked = 0;
  auto check = [&](const config::Config& c) {
    ++checked;
    if (c.algorithm.name == "nope") throw UserError(c.origins.at("algorithm.name") + ": key 'algorithm.name': unknown");
  };
  try {
    expand(spec, dir_.string(), check);
    FAIL() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_EQ(checked, 2);
    EXPECT_NE(std::string(e.what()).find("s.yaml:8: sweep run 'algorithm=nope,seed=0'"), std::string::npos) << e.what();
  }
}

TEST_F(SweepTest, BaseConfigErrorsKeepTheirLines) {
  // The sweep section comes first; the typo in the base is on line 4 of the file.
  const std::string text = "sweep:\n  grid: {train.lr: [0.1]}\nrun: {name: x}\ntrain: {stepz: 5}\n";
  try {
    expand_text(text);
    FAIL() << "expected an error";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("s.yaml:4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("train.steps"), std::string::npos) << e.what();
  }
}

TEST_F(SweepTest, CsvQuotesWhatNeedsIt) {
  const std::vector<std::string> row = {"a=1,b=2", "plain", "say \"hi\"", "", "two\nlines"};
  const std::string line = csv_line(row);
  EXPECT_EQ(line.substr(0, 18), "\"a=1,b=2\",plain,\"s");
  const auto rows = parse_csv(line + csv_line({"x", "y"}));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], row);
  EXPECT_EQ(rows[1], (std::vector<std::string>{"x", "y"}));
}

TEST_F(SweepTest, PlanRoundTripsThroughPlanCsv) {
  const auto s = expand_text(kNamesBase + "sweep:\n  name: rt\n  seeds: [3, 4]\n  grid: {algorithm.name: [ddp, diloco]}\n"
                                     "  per_algorithm:\n    diloco: {grid: {algorithm.inner_steps: [5, 10]}}\n");
  write_plan(s.plan);
  const SweepPlan back = read_plan(s.plan.dir);
  EXPECT_EQ(back.name, "rt");
  EXPECT_EQ(back.keys, s.plan.keys);
  ASSERT_EQ(back.runs.size(), s.plan.runs.size());
  for (size_t i = 0; i < back.runs.size(); ++i) {
    EXPECT_EQ(back.runs[i].id, s.plan.runs[i].id);
    EXPECT_EQ(back.runs[i].group, s.plan.runs[i].group);
    EXPECT_EQ(back.runs[i].seed, s.plan.runs[i].seed);
    EXPECT_EQ(back.runs[i].hash, s.plan.runs[i].hash);
    EXPECT_EQ(back.runs[i].values, s.plan.runs[i].values);
  }
  EXPECT_THROW(read_plan(dir_.string()), UserError);  // no plan.csv there
}

// summary.json's final_val_loss is null when no eval was at the run's last step (every
// island died first): the run is incomplete, not diverged.
TEST(SummaryStatus, NoEvalAtTheFinalStepIsIncomplete) {
  RunMetrics m;
  m.has_summary = true;
  m.steps = 100;
  m.last_eval_step = 40;
  std::string reason;
  EXPECT_EQ(summary_status(m, &reason), "incomplete");
  EXPECT_NE(reason.find("step 40"), std::string::npos) << reason;
  m.last_eval_step = 100;  // an eval at the last step that is not finite
  EXPECT_EQ(summary_status(m, &reason), "diverged");
  m.final_val_loss = 1.5;
  EXPECT_EQ(summary_status(m, &reason), "ok");
}

// A summary.json that says the run failed (a real run's coordinator writes one) is no result:
// the sweep runs it again, its tables say failed with the error; a metrics.jsonl that ends in
// a torn line is read up to it, and the reason names the line.
TEST_F(SweepTest, AFailedSummaryIsNoResultAndATornLineIsNamed) {
  const auto s = expand_text(kBase + "sweep:\n  name: failed\n  grid: {train.lr: [0.001, 0.002]}\n");
  const SweepPlan& plan = s.plan;
  write_plan(plan);
  const auto& r = plan.runs;
  for (const auto& run : r) fs::create_directories(plan.run_dir(run));
  std::ofstream(fs::path(plan.run_dir(r[0])) / "summary.json")
      << "{\"config_hash\":\"" << r[0].hash << "\",\"status\":\"failed\",\"error\":\"no island finished the run\"}";
  std::ofstream(fs::path(plan.run_dir(r[1])) / "summary.json")
      << "{\"config_hash\":\"" << r[1].hash << "\",\"status\":\"finished\",\"steps\":20,\"final_val_loss\":1.5}";
  std::ofstream(fs::path(plan.run_dir(r[1])) / "metrics.jsonl")
      << "{\"event\":\"eval\",\"step\":20,\"val_loss\":1.5}\n{\"event\":\"train\",\"wall_time_s\":0.";
  EXPECT_FALSE(run_finished(plan, r[0]));
  EXPECT_TRUE(run_finished(plan, r[1]));
  const auto results = collect_results(plan);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].status, "failed");
  EXPECT_EQ(results[0].reason, "no island finished the run");
  EXPECT_EQ(results[1].status, "ok");
  ASSERT_EQ(results[1].metrics.evals.size(), 1u);
  EXPECT_EQ(results[1].reason, "metrics.jsonl: line 2 is torn (33 bytes without a newline, the run's writes were cut "
                               "off); ignored");
}

TEST_F(SweepTest, ResultsFollowSummaryHashAndOutcome) {
  const auto s = expand_text(kBase + "sweep:\n  name: res\n  grid: {train.lr: [0.001, 0.002, 0.003, 0.004]}\n");
  const SweepPlan& plan = s.plan;
  write_plan(plan);
  auto put = [](const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
  };
  const auto& r = plan.runs;
  // 0: finished; 1: finished but its loss is NaN; 2: a stale summary of another config plus a
  // failure recorded for this one; 3: never started.
  put(fs::path(plan.run_dir(r[0])) / "summary.json",
      "{\"config_hash\":\"" + r[0].hash + "\",\"steps\":20,\"final_val_loss\":1.5,\"bytes_sent_total\":1000}");
  put(fs::path(plan.run_dir(r[0])) / "metrics.jsonl",
      "{\"event\":\"eval\",\"step\":0,\"val_loss\":2.0,\"bytes_sent_total\":0}\n"
      "{\"event\":\"train\",\"island\":0,\"step\":10,\"loss\":1.7}\n"
      "{\"event\":\"eval\",\"step\":20,\"val_loss\":1.5,\"bytes_sent_total\":1000,\"sim_time_s\":3.5}\n");
  put(fs::path(plan.run_dir(r[1])) / "summary.json", "{\"config_hash\":\"" + r[1].hash + "\",\"final_val_loss\":null}");
  put(fs::path(plan.run_dir(r[2])) / "summary.json", "{\"config_hash\":\"0000000000000000\",\"final_val_loss\":1.0}");
  put(fs::path(plan.dir) / "logs" / (r[2].id + ".json"),
      "{\"run\":\"x\",\"status\":\"failed\",\"reason\":\"exit code 1: boom\",\"config_hash\":\"" + r[2].hash + "\"}");
  EXPECT_TRUE(run_finished(plan, r[0]));
  EXPECT_FALSE(run_finished(plan, r[2]));
  EXPECT_FALSE(run_finished(plan, r[3]));

  const auto results = collect_results(plan);
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].status, "ok");
  EXPECT_DOUBLE_EQ(results[0].metrics.final_val_loss, 1.5);
  EXPECT_DOUBLE_EQ(results[0].metrics.best_val_loss, 1.5);
  ASSERT_EQ(results[0].metrics.evals.size(), 2u);
  EXPECT_DOUBLE_EQ(results[0].metrics.evals[1].sim_time_s, 3.5);
  EXPECT_EQ(results[1].status, "diverged");
  EXPECT_EQ(results[2].status, "not run");  // the stale summary is not this run's
  EXPECT_EQ(results[3].status, "not run");

  // With the failure recorded and the stale summary gone, the outcome file speaks.
  fs::remove(fs::path(plan.run_dir(r[2])) / "summary.json");
  const auto again = collect_results(plan);
  EXPECT_EQ(again[2].status, "failed");
  EXPECT_EQ(again[2].reason, "exit code 1: boom");

  write_tables(plan, again);
  std::ifstream in(plan.dir + "/summary.csv");
  std::stringstream text;
  text << in.rdbuf();
  const auto rows = parse_csv(text.str());
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[0][4], "train.lr");
  EXPECT_EQ(rows[1][3], "ok");
  EXPECT_EQ(rows[1][4], "0.001");
  const size_t loss = static_cast<size_t>(std::find(rows[0].begin(), rows[0].end(), "final_val_loss") - rows[0].begin());
  EXPECT_EQ(rows[1][loss], "1.5");
  EXPECT_EQ(rows[2][loss], "");  // NaN: an empty cell
  EXPECT_EQ(rows[3][3], "failed");
}

// A run's child: a fork that calls the warm main while the process has one thread, the
// executed program once it has two (process.h). Checked in a forked copy of this test,
// which has one thread whatever the test binary has started.
TEST_F(SweepTest, ARunIsAWarmForkOnlyWhileTheSweepHasOneThread) {
  const std::string log = (dir_ / "child.log").string();
  const WarmMain warm = [](const std::vector<std::string>& argv) {
    std::printf("warm %s\n", argv.back().c_str());  // buffered: the child must flush it
    return 7;
  };
  // What the child of spawn_logged wrote and its exit code.
  auto spawn_and_wait = [&](int* code) {
    fs::remove(log);
    const pid_t pid = spawn_logged("/bin/sh", {"sh", "-c", "echo exec"}, log, warm);
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return std::string("no exit");
    *code = WEXITSTATUS(status);
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  std::fflush(nullptr);
  const pid_t tester = ::fork();
  ASSERT_GE(tester, 0);
  if (tester == 0) {
    int code = -1;
    if (!single_threaded()) ::_exit(10);
    if (spawn_and_wait(&code) != "warm echo exec\n" || code != 7) ::_exit(11);
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread other([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    });
    const bool two = !single_threaded();
    const std::string out = spawn_and_wait(&code);
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_all();
    other.join();
    if (!two) ::_exit(12);
    if (out != "exec\n" || code != 0) ::_exit(13);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(tester, &status, 0), tester);
  ASSERT_TRUE(WIFEXITED(status));
  // 10, 12: the thread count is misread; 11: the warm child; 13: the executed child.
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace atl::sweep
