// End-to-end simulations on small real data: determinism of metrics.jsonl, the run
// directory contract, and sanity of what the algorithms report.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "compression/frame.h"
#include "src/base/status.h"
#include "src/config/config.h"
#include "src/sim/simulator.h"

namespace fs = std::filesystem;

namespace atl::sim {
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
  c.algorithm.name = "ddp";
  RunSummary ddp = simulate(c, {false, true});
  // DDP all-reduces every step (24), DiLoCo every 8 steps (3 rounds): exactly 8x the bytes.
  EXPECT_EQ(ddp.bytes_sent_total, 8 * diloco.bytes_sent_total);
  const double uniform = std::log(256.0);
  EXPECT_LT(diloco.final_val_loss, uniform);
  EXPECT_LT(ddp.final_val_loss, uniform);
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

}  // namespace
}  // namespace atl::sim
