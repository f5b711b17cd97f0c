// End-to-end simulations on small real data: determinism of metrics.jsonl, the run
// directory contract, and sanity of what the algorithms report.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "compression/frame.h"
#include "src/base/status.h"
#include "src/config/config.h"
#include "src/core/island_parts.h"
#include "src/core/json.h"
#include "src/core/params_file.h"
#include "src/core/simulator.h"

namespace fs = std::filesystem;

namespace atl::core {
namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string strip_wall(const std::string& jsonl) {
  static const std::regex wall(R"(,?"wall_[a-z_]*":[^,}]*)");
  return std::regex_replace(jsonl, wall, "");
}

struct TempDir {
  TempDir() {
    path = fs::temp_directory_path() / ("atoll_sim_test_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
  static inline int counter = 0;
};

// Simulates `c` twice (runs t and t2 under dir/runs), expects identical metrics.jsonl apart
// from wall_* fields, and returns the first run's.
std::string metrics_of_two_identical_runs(config::Config c, const fs::path& dir) {
  const SimulateOptions quiet{false, true};
  simulate(c, quiet);
  const std::string first = read(dir / "runs/t/metrics.jsonl");
  c.run.name = "t2";
  simulate(c, quiet);
  EXPECT_EQ(strip_wall(first), strip_wall(read(dir / "runs/t2/metrics.jsonl")));
  return first;
}

// island -> global_xxh64 of the island_end records in a metrics.jsonl.
std::map<int, std::string> final_hashes(const std::string& jsonl) {
  std::map<int, std::string> out;
  std::istringstream lines(jsonl);
  for (std::string line; std::getline(lines, line);) {
    if (json_find_string(line, "event") != "island_end") continue;
    out[static_cast<int>(json_find_number(line, "island").value_or(-1))] =
        json_find_string(line, "global_xxh64").value_or("");
  }
  return out;
}

size_t distinct(const std::map<int, std::string>& hashes) {
  std::set<std::string> values;
  for (const auto& [island, hash] : hashes) values.insert(hash);
  return values.size();
}

config::Config tiny_text_config(const fs::path& dir, const std::string& algorithm) {
  // A small corpus with structure, written to disk (the real text reader reads it).
  std::ofstream(dir / "corpus.txt") << [] {
    std::string s;
    for (int i = 0; i < 400; ++i) s += "the quick brown fox " + std::to_string(i % 17) + " jumps over the lazy dog.\n";
    return s;
  }();
  std::ostringstream y;
  y << "run: {name: t, seed: 3, out_dir: " << (dir / "runs").string() << ", threads: 1}\n"
    << "model: {name: gpt, layers: 1, heads: 2, dim: 32, seq_len: 16, dropout: 0.1}\n"
    << "data: {kind: text, path: " << (dir / "corpus.txt").string() << ", partition: contiguous}\n"
    << "train: {lr: 0.003, warmup_steps: 5, batch_size: 4, steps: 24, eval_every: 8, eval_batches: 2, log_every: 4}\n"
    << "islands: {count: 3}\n"
    << "algorithm: {name: " << algorithm << ", inner_steps: 8}\n";
  return config::parse_config(y.str(), (dir / "tiny.yaml").string());
}

TEST(Simulate, SameConfigAndSeedGiveIdenticalMetrics) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  SimulateOptions quiet{false, true};
  simulate(c, quiet);
  const std::string first = read(tmp.path / "runs/t/metrics.jsonl");
  c.run.name = "t2";
  simulate(c, quiet);
  const std::string second = read(tmp.path / "runs/t2/metrics.jsonl");
  ASSERT_FALSE(first.empty());
  EXPECT_NE(first.find("\"wall_time_s\""), std::string::npos);
  EXPECT_EQ(strip_wall(first), strip_wall(second));
  // a different seed really changes the run (the comparison above can fail)
  c.run.name = "t3";
  c.run.seed = 4;
  simulate(c, quiet);
  EXPECT_NE(strip_wall(first), strip_wall(read(tmp.path / "runs/t3/metrics.jsonl")));
}

// Heterogeneous speeds, jitter, stragglers, a slow WAN, a kill, a rejoin and an added
// island: the virtual clock makes the run deterministic, and the records show the churn.
TEST(Simulate, VirtualClockWithChurnIsDeterministic) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  c.islands.events = config::parse_config(
      "islands:\n  count: 3\n  events:\n"
      "    - {kill: 2, at_step: 12}\n"
      "    - {rejoin: 2, at_time_s: 6.0}\n"
      "    - {add: 1, at_time_s: 0.3}\n",
      "events.yaml").islands.events;
  c.compute.step_time_s = 0.1;
  c.compute.speeds = {1, 1.5, 0.7, 1};
  c.compute.jitter = 0.2;
  c.compute.straggler_prob = 0.05;
  c.network.bandwidth_mbps = 50;
  c.network.latency_ms = 30;
  c.network.jitter_ms = 5;
  const std::string first = metrics_of_two_identical_runs(c, tmp.path);

  // The churn is visible: island 3 added, island 2 killed and back, rounds with fewer
  // contributors in between, and every record on the virtual clock.
  for (const char* change : {R"("island":3,"change":"added")", R"("island":2,"change":"killed")",
                             R"("island":2,"change":"rejoined")"}) {
    EXPECT_NE(first.find(change), std::string::npos) << change;
  }
  // A membership record carries the view after the change: island 2 is out of it after its
  // death and back in it after its rejoin, and each change bumps the epoch.
  {
    std::istringstream lines(first);
    uint64_t last_epoch = 0;
    int seen = 0;
    for (std::string line; std::getline(lines, line);) {
      if (line.find(R"("event":"membership")") == std::string::npos || line.find(R"("island":2,)") == std::string::npos)
        continue;
      const size_t at = line.find(R"("members":[)");
      ASSERT_NE(at, std::string::npos) << line;
      const std::string members = line.substr(at, line.find(']', at) - at);
      const bool killed = line.find(R"("change":"killed")") != std::string::npos;
      EXPECT_EQ(members.find('2') == std::string::npos, killed) << line;
      const uint64_t epoch = static_cast<uint64_t>(*json_find_number(line, "epoch"));
      EXPECT_GT(epoch, last_epoch) << line;
      last_epoch = epoch;
      ++seen;
    }
    EXPECT_EQ(seen, 2) << first;
  }
  // The rejoined island continues the round count it was handed (rounds at 8, 16, 24).
  EXPECT_NE(first.find(R"("island":2,"round":3,"step":24)"), std::string::npos);
  EXPECT_NE(first.find(R"("contributors":4)"), std::string::npos);
  EXPECT_NE(first.find(R"("contributors":3)"), std::string::npos);
  std::istringstream lines(first);
  double last_eval_time = -1;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(R"("event":"eval")") == std::string::npos) continue;
    const auto t = json_find_number(line, "sim_time_s");
    ASSERT_TRUE(t.has_value()) << line;
    EXPECT_GE(*t, last_eval_time);
    last_eval_time = *t;
  }
  const std::string summary = read(tmp.path / "runs/t/summary.json");
  const double util = *json_find_number(summary, "compute_utilization");
  EXPECT_GT(util, 0.0);
  EXPECT_LT(util, 1.0);
  // 24 steps of >= 0.1/1.5 s each, plus a 5 s failure detection.
  EXPECT_GT(*json_find_number(summary, "sim_time_s"), 24 * 0.1 / 1.5 + 5);
  // The hand-overs were exact: all four islands end on bitwise the same global model.
  EXPECT_EQ(final_hashes(first).size(), 4u);
  EXPECT_EQ(distinct(final_hashes(first)), 1u) << first;
}

// Island 0, the lead, is slow; islands 1 and 2 pass eval steps 4 and 6 while it is still
// alive, and it dies before reaching them. They kept those steps: the new lead evaluates
// them, so every eval step has exactly one record (and the run stays deterministic).
TEST(Simulate, EvalStepsPassedWhileTheSlowLeadDiesAreStillRecorded) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  c.train.eval_every = 2;
  c.islands.events = config::parse_config(
      "islands:\n  count: 3\n  events:\n    - {kill: 0, at_time_s: 0.5}\n", "events.yaml").islands.events;
  c.compute.step_time_s = 0.1;
  c.compute.speeds = {0.5, 1, 1};
  const std::string first = metrics_of_two_identical_runs(c, tmp.path);
  std::map<int64_t, int> evals;
  std::istringstream lines(first);
  for (std::string line; std::getline(lines, line);) {
    if (json_find_string(line, "event") == "eval") ++evals[static_cast<int64_t>(*json_find_number(line, "step"))];
  }
  std::map<int64_t, int> expected;
  for (int64_t s = 0; s <= c.train.steps; s += 2) expected[s] = 1;
  EXPECT_EQ(evals, expected) << first;
  const std::string summary = read(tmp.path / "runs/t/summary.json");
  EXPECT_EQ(json_find_number(summary, "last_eval_step"), c.train.steps) << summary;
  EXPECT_TRUE(json_find_number(summary, "final_val_loss").has_value()) << summary;
}

// Streaming DiLoCo hands every fragment's outer state to a joiner, at a step boundary with
// no fragment in flight (H = 8, P = 2, tau = 3: fragments are sent at steps 8, 12, 16, 20
// and received 3 steps later, so only boundaries before 8 or at 11, 15, 19, 23 qualify).
TEST(Simulate, StreamingDiLoCoRejoinAndAddHandOverEveryFragment) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "streaming_diloco");
  c.model.layers = 2;
  c.algorithm.get<algorithms::StreamingDilocoOptions>().fragments = 2;
  c.algorithm.get<algorithms::StreamingDilocoOptions>().overlap_steps = 3;
  c.islands.events = config::parse_config(
      "islands:\n  count: 3\n  events:\n"
      "    - {kill: 2, at_step: 10}\n"
      "    - {rejoin: 2, at_time_s: 6.0}\n"
      "    - {add: 1, at_time_s: 0.85}\n",
      "events.yaml").islands.events;
  c.compute.step_time_s = 0.1;
  c.compute.jitter = 0.1;
  c.network.bandwidth_mbps = 50;
  c.network.latency_ms = 30;
  const std::string first = metrics_of_two_identical_runs(c, tmp.path);

  std::istringstream lines(first);
  int joins = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find(R"("change":"rejoined")") == std::string::npos &&
        line.find(R"("change":"added")") == std::string::npos)
      continue;
    ++joins;
    const int64_t step = static_cast<int64_t>(*json_find_number(line, "step"));
    EXPECT_TRUE(step < 8 || step % 4 == 3) << "hand-over with a fragment in flight: " << line;
  }
  EXPECT_EQ(joins, 2) << first;
  // the added island was asked for at 0.85 s, after step 8's send: its hand-over waited
  EXPECT_NE(first.find(R"("island":3,"change":"added","reason":"event","step":11)"), std::string::npos) << first;
  EXPECT_NE(first.find(R"("contributors":4)"), std::string::npos);
  EXPECT_EQ(final_hashes(first).size(), 4u);
  EXPECT_EQ(distinct(final_hashes(first)), 1u) << first;
}

// Async local-SGD: arrivals at the server are ordered by the virtual clock, so heterogeneous
// speeds, jitter and a jittery WAN still give identical runs.
TEST(Simulate, AsyncLocalSgdOnAJitteryWanIsDeterministic) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "async_local_sgd");
  c.compute.step_time_s = 0.1;
  c.compute.speeds = {1.7, 1.0, 0.4};
  c.compute.jitter = 0.3;
  c.network.bandwidth_mbps = 20;
  c.network.latency_ms = 40;
  c.network.jitter_ms = 30;
  c.algorithm.get<algorithms::AsyncLocalSgdOptions>().grace_s = 0.05;
  const std::string first = metrics_of_two_identical_runs(c, tmp.path);
  EXPECT_NE(first.find(R"("event":"eval")"), std::string::npos);
}

// A loss that is not finite stops the run, marks the summary and says which island and step.
TEST(Simulate, DivergenceStopsTheRunAndIsReported) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  c.train.lr = 1e6;
  c.train.warmup_steps = 0;
  c.train.grad_clip = 0;
  const RunSummary s = simulate(c, {false, true});
  EXPECT_TRUE(s.diverged);
  EXPECT_LT(s.diverged_step, c.train.steps);
  const std::string summary = read(tmp.path / "runs/t/summary.json");
  EXPECT_NE(summary.find(R"("diverged":true)"), std::string::npos);
  EXPECT_NE(read(tmp.path / "runs/t/metrics.jsonl").find(R"("event":"diverged")"), std::string::npos);
}

TEST(Simulate, WritesRunDirectoryAndRefusesToOverwrite) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  RunSummary s = simulate(c, {false, true});
  const fs::path run = tmp.path / "runs/t";
  ASSERT_TRUE(fs::exists(run / "config.yaml"));
  ASSERT_TRUE(fs::exists(run / "summary.json"));
  // the resolved config reads back to the same config
  config::Config back = config::load_config((run / "config.yaml").string());
  EXPECT_EQ(config::to_yaml(back), config::to_yaml(c));
  const std::string summary = read(run / "summary.json");
  for (const char* key : {"\"algorithm\":\"diloco\"", "\"islands\":3", "\"steps\":24", "\"final_val_loss\"",
                          "\"bytes_sent_total\"", "\"bytes_recv_total\"", "\"wall_time_s\""}) {
    EXPECT_NE(summary.find(key), std::string::npos) << key;
  }
  EXPECT_GT(s.bytes_sent_total, 0u);
  EXPECT_EQ(s.bytes_sent_total, s.bytes_recv_total);
  EXPECT_EQ(s.rounds, 3);
  EXPECT_THROW(simulate(c, {false, true}), UserError);
  EXPECT_NO_THROW(simulate(c, {true, true}));
}

TEST(Simulate, DdpSendsHTimesMoreThanDiLoCoAndBothLearn) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  c.model.dropout = 0;
  RunSummary diloco = simulate(c, {false, true});
  c.run.name = "ddp";
  c.algorithm.choose("ddp");
  RunSummary ddp = simulate(c, {false, true});
  // DDP all-reduces every step (24), DiLoCo every 8 steps (3 rounds): exactly 8x the bytes.
  EXPECT_EQ(ddp.bytes_sent_total, 8 * diloco.bytes_sent_total);
  const double uniform = std::log(256.0);
  EXPECT_LT(diloco.final_val_loss, uniform);
  EXPECT_LT(ddp.final_val_loss, uniform);
}

// model.init_from: a run that starts from an earlier run's final_params.bin evaluates, at
// step 0, exactly to the earlier run's final validation loss (same validation batches).
TEST(Simulate, WarmStartFromAnEarlierRunsFinalParams) {
  TempDir tmp;
  config::Config c = tiny_text_config(tmp.path, "diloco");
  c.model.dropout = 0;
  const RunSummary first = simulate(c, {false, true});
  const fs::path params = tmp.path / "runs/t/final_params.bin";
  ASSERT_TRUE(fs::exists(params));
  auto step0_val_loss = [&](const std::string& run) {
    const std::string metrics = read(tmp.path / "runs" / run / "metrics.jsonl");
    std::smatch m;
    EXPECT_TRUE(std::regex_search(metrics, m, std::regex(R"(\{"event":"eval","step":0,[^}]*"val_loss":([-0-9.e+]+))")))
        << metrics.substr(0, 400);
    return m.size() > 1 ? std::stod(m[1]) : -1.0;
  };
  c.run.name = "cold";
  simulate(c, {false, true});
  c.run.name = "warm";
  c.model.init_from = params.string();
  simulate(c, {false, true});
  EXPECT_DOUBLE_EQ(step0_val_loss("warm"), first.final_val_loss);
  EXPECT_NE(step0_val_loss("cold"), first.final_val_loss);
  // DDP evaluates an island's own parameters: they came from the file as well
  c.run.name = "warm-ddp";
  c.algorithm.choose("ddp");
  simulate(c, {false, true});
  EXPECT_DOUBLE_EQ(step0_val_loss("warm-ddp"), first.final_val_loss);

  // a different model shape, and a corrupt file: a clear user error naming the key
  c.run.name = "wide";
  c.model.dim = 64;
  try {
    simulate(c, {false, true});
    ADD_FAILURE() << "a file for another model shape was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("model.init_from"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("parameters"), std::string::npos) << e.what();
  }
  c.model.dim = 32;
  c.run.name = "corrupt";
  {
    std::string bytes = read(params);
    bytes[bytes.size() / 2] ^= 0x5a;
    std::ofstream(tmp.path / "corrupt.bin", std::ios::binary) << bytes;
  }
  c.model.init_from = (tmp.path / "corrupt.bin").string();
  EXPECT_THROW(simulate(c, {false, true}), UserError);
}

TEST(Simulate, FedAvgOnSyntheticClassification) {
  TempDir tmp;
  std::ostringstream y;
  y << "run: {name: f, seed: 1, out_dir: " << (tmp.path / "runs").string() << ", threads: 1}\n"
    << "model: {name: mlp, hidden: [32]}\n"
    << "data: {kind: synthetic, synthetic_examples: 1200, synthetic_dim: 16, synthetic_classes: 4, partition: shards, shards_per_island: 2}\n"
    << "train: {optimizer: sgd, lr: 0.1, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, batch_size: 10, steps: 100, eval_every: 20, eval_batches: 0}\n"
    << "islands: {count: 10}\n"
    << "algorithm: {name: fedavg, client_fraction: 0.3, local_steps: 5, rounds: 20, outer_optimizer: sgd, outer_lr: 1.0, outer_momentum: 0}\n";
  config::Config c = config::parse_config(y.str(), "fedavg.yaml");
  RunSummary s = simulate(c, {false, true});
  EXPECT_EQ(s.rounds, 20);
  EXPECT_GT(s.final_val_accuracy, 0.5);  // 4 classes: chance is 0.25
  // 20 rounds x 3 clients x (pull + push) of N fp32 values
  const std::string start = read(tmp.path / "runs/f/metrics.jsonl");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(start, m, std::regex(R"("params":(\d+))")));
  const uint64_t n = std::stoull(m[1]);
  const uint64_t frame = n * 4u + compression::kMinFrameHeaderBytes;
  EXPECT_EQ(s.bytes_sent_total, 20u * 3u * frame);
  EXPECT_EQ(s.bytes_recv_total, 20u * 3u * frame);
}

// FedAvg on three clients, every client in every round (C = 1), outer SGD lr 1: a round's
// result is the weighted mean of the local models of the clients that delivered.
config::Config fedavg_fault_config(const fs::path& dir, const std::string& name, int64_t rounds,
                                   const std::string& events, const std::string& extra = "") {
  std::ostringstream y;
  y << "run: {name: " << name << ", seed: 2, out_dir: " << (dir / "runs").string() << ", threads: 1}\n"
    << "model: {name: mlp, hidden: [16]}\n"
    << "data: {kind: synthetic, synthetic_examples: 400, synthetic_dim: 8, synthetic_classes: 3, partition: iid}\n"
    << "train: {optimizer: sgd, lr: 0.1, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, "
       "batch_size: 10, steps: " << rounds * 4 << ", eval_every: 4, eval_batches: 0}\n"
    << "compute: {step_time_s: 0.1}\n"
    << "islands: {count: 3" << (events.empty() ? "" : ", events: " + events) << "}\n"
    << "algorithm: {name: fedavg, client_fraction: 1, local_steps: 4, rounds: " << rounds
    << ", outer_optimizer: sgd, outer_lr: 1.0, outer_momentum: 0" << extra << "}\n";
  return config::parse_config(y.str(), (dir / (name + ".yaml")).string());
}

at::Tensor final_params(const fs::path& dir, const std::string& name) {
  auto p = read_params((dir / "runs" / name / "final_params.bin").string());
  EXPECT_TRUE(p.is_ok()) << name;
  return p.is_ok() ? *p : at::Tensor();
}

// The server role's round records (island -1) of a metrics.jsonl.
std::vector<std::string> server_rounds(const std::string& jsonl) {
  std::vector<std::string> out;
  std::istringstream lines(jsonl);
  for (std::string line; std::getline(lines, line);)
    if (json_find_string(line, "event") == "round" && json_find_number(line, "island") == -1) out.push_back(line);
  return out;
}

// docs/algorithms.md §7, faults: a selected client killed mid-round is dropped from the round,
// which completes with the other two, weighted by their shard sizes renormalised over them.
// The oracle, computed here: each survivor's local model alone (a run in which every other
// client dies before delivering: a round of one, outer SGD lr 1, gives that client's model),
// and θ_0 (a run in which all die: the round is skipped).
TEST(Simulate, FedAvgKilledClientIsDroppedAndTheRoundCompletesWithTheRest) {
  TempDir tmp;
  const SimulateOptions quiet{false, true};
  config::Config c = fedavg_fault_config(tmp.path, "t", 1, "[{kill: 1, at_step: 2}]");
  const std::string metrics = metrics_of_two_identical_runs(c, tmp.path);  // deterministic
  simulate(fedavg_fault_config(tmp.path, "only0", 1, "[{kill: 1, at_step: 1}, {kill: 2, at_step: 1}]"), quiet);
  simulate(fedavg_fault_config(tmp.path, "only2", 1, "[{kill: 0, at_step: 1}, {kill: 1, at_step: 1}]"), quiet);
  simulate(fedavg_fault_config(tmp.path, "none", 1,
                               "[{kill: 0, at_step: 1}, {kill: 1, at_step: 1}, {kill: 2, at_step: 1}]"),
           quiet);
  simulate(fedavg_fault_config(tmp.path, "all", 1, ""), quiet);
  const std::vector<int64_t> n = load_run_data(c).shard_sizes;
  ASSERT_EQ(n.size(), 3u);
  const at::Tensor theta0 = final_params(tmp.path, "none");
  const at::Tensor w0 = final_params(tmp.path, "only0"), w2 = final_params(tmp.path, "only2");
  const double n0 = static_cast<double>(n[0]), n2 = static_cast<double>(n[2]);
  const at::Tensor expected = theta0 - (n0 * (theta0 - w0) + n2 * (theta0 - w2)) / (n0 + n2);
  const at::Tensor got = final_params(tmp.path, "t");
  EXPECT_TRUE(at::allclose(got, expected, 1e-5, 1e-6)) << (got - expected).abs().max().item<double>();
  EXPECT_FALSE(at::allclose(got, final_params(tmp.path, "all"), 1e-5, 1e-6)) << "the oracle cannot tell";
  // The server's round record says who made it in.
  const auto rounds = server_rounds(metrics);
  ASSERT_EQ(rounds.size(), 1u) << metrics;
  EXPECT_NE(rounds[0].find(R"("round":1,"step":4,"contributors":2,"selected":3,"delivered":[0,2],"lost":[1],"late":[],"skipped":false)"),
            std::string::npos) << rounds[0];
  EXPECT_NE(server_rounds(read(tmp.path / "runs/none/metrics.jsonl"))[0].find(R"("skipped":true)"), std::string::npos);
}

// algorithm.min_clients: rounds with fewer results are skipped (the model stays θ_0 bitwise,
// the round counter advances, the final eval equals the first); with min_clients 1 the same
// run trains.
TEST(Simulate, FedAvgRoundsWithFewerThanMinClientsResultsAreSkipped) {
  TempDir tmp;
  const std::string kills = "[{kill: 1, at_step: 1}, {kill: 2, at_step: 5}]";
  config::Config c = fedavg_fault_config(tmp.path, "t", 3, kills, ", min_clients: 2");
  const std::string metrics = metrics_of_two_identical_runs(c, tmp.path);
  simulate(fedavg_fault_config(tmp.path, "none", 1,
                               "[{kill: 0, at_step: 1}, {kill: 1, at_step: 1}, {kill: 2, at_step: 1}]"),
           {false, true});
  simulate(fedavg_fault_config(tmp.path, "one", 3, kills), {false, true});
  const auto rounds = server_rounds(metrics);
  ASSERT_EQ(rounds.size(), 3u) << metrics;
  // Round 1: clients 0 and 2 deliver (2 >= 2); rounds 2 and 3: client 0 alone, skipped.
  EXPECT_NE(rounds[0].find(R"("round":1,"step":4,"contributors":2,"selected":3,"delivered":[0,2],"lost":[1],"late":[],"skipped":false)"), std::string::npos) << rounds[0];
  EXPECT_NE(rounds[1].find(R"("round":2,"step":8,"contributors":1,"selected":3,"delivered":[0],"lost":[1,2],"late":[],"skipped":true)"), std::string::npos) << rounds[1];
  EXPECT_NE(rounds[2].find(R"("round":3,"step":12,"contributors":1,"selected":3,"delivered":[0],"lost":[1,2],"late":[],"skipped":true)"), std::string::npos) << rounds[2];
  const std::string summary = read(tmp.path / "runs/t/summary.json");
  EXPECT_EQ(json_find_number(summary, "rounds"), 3) << summary;
  // Skipped rounds leave the model of round 1: the evals at steps 4, 8 and 12 are equal.
  std::map<int64_t, double> evals;
  std::istringstream lines(metrics);
  for (std::string line; std::getline(lines, line);)
    if (json_find_string(line, "event") == "eval") evals[static_cast<int64_t>(*json_find_number(line, "step"))] = *json_find_number(line, "val_loss");
  ASSERT_EQ(evals.size(), 4u) << metrics;
  EXPECT_NE(evals[0], evals[4]);
  EXPECT_EQ(evals[4], evals[8]);
  EXPECT_EQ(evals[4], evals[12]);
  // With min_clients 1 the rounds of client 0 alone are applied: the model moves on.
  EXPECT_FALSE(at::equal(final_params(tmp.path, "t"), final_params(tmp.path, "one")));
  EXPECT_FALSE(at::equal(final_params(tmp.path, "t"), final_params(tmp.path, "none")));
}

// algorithm.round_timeout_s (virtual seconds in simulate): a client too slow for the deadline
// is dropped from the round exactly as a lost one is, so the model equals bitwise the run in
// which that client is killed; its result, when it comes, is ignored.
TEST(Simulate, FedAvgClientLateForTheDeadlineIsDroppedLikeALostOne) {
  TempDir tmp;
  // Four local steps take 0.4 s at speed 1 and 4 s for client 2 at speed 0.1.
  config::Config c = fedavg_fault_config(tmp.path, "t", 2, "", ", round_timeout_s: 1");
  c.compute.speeds = {1, 1, 0.1};
  const std::string metrics = metrics_of_two_identical_runs(c, tmp.path);
  config::Config killed = fedavg_fault_config(tmp.path, "killed", 2, "[{kill: 2, at_step: 1}]");
  killed.compute.speeds = {1, 1, 0.1};
  simulate(killed, {false, true});
  EXPECT_TRUE(at::equal(final_params(tmp.path, "t"), final_params(tmp.path, "killed")));
  const auto rounds = server_rounds(metrics);
  ASSERT_EQ(rounds.size(), 2u) << metrics;
  EXPECT_NE(rounds[0].find(R"("delivered":[0,1],"lost":[],"late":[2],"skipped":false,"wall_time_s")"), std::string::npos) << rounds[0];
  EXPECT_NE(rounds[0].find(R"("sim_time_s":1})"), std::string::npos) << rounds[0];  // at its deadline
}

}  // namespace
}  // namespace atl::core
