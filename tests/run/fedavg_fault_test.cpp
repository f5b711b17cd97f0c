// FedAvg survives a lost client in a real run (docs/algorithms.md §7): `atoll launch` of three
// clients, every one selected in every round; client 2 is killed with SIGKILL mid-run. The
// coordinator declares it dead, the server role (in the coordinator process) drops it from
// the round it was in and from every later one, those rounds complete with clients 0 and 1,
// and the run finishes with the survivors (launch exit code 3).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/core/json.h"
#include "tests/run/process_test_util.h"

namespace fs = std::filesystem;
using atl::core::json_find_number;
using atl::core::json_find_string;
using atl::testing::island_child;
using atl::testing::lines;
using atl::testing::read;

namespace {

class FedAvgFault : public ::testing::Test {
 public:
  void SetUp() override {
    dir_ = atl::testing::make_test_dir("atoll_fedavg_fault_test");
    port_ = atl::testing::test_port(30000, 2760);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  int port_ = 0;
};

// The server role's round records (island -1), in file order.
std::vector<std::string> server_rounds(const fs::path& metrics) {
  std::vector<std::string> out;
  for (const auto& l : lines(metrics))
    if (json_find_string(l, "event") == "round" && json_find_number(l, "island") == -1) out.push_back(l);
  return out;
}

TEST_F(FedAvgFault, KilledClientIsDroppedAndTheRoundsAfterItCompleteWithTheRest) {
  const int rounds = 60;
  std::ostringstream y;
  y << "run: {name: f, seed: 4, out_dir: " << (dir_ / "runs").string() << ", threads: 1}\n"
    << "model: {name: gpt, layers: 1, heads: 2, dim: 32, seq_len: 16}\n"
    << "data: {kind: text, path: " << (dir_ / "corpus.txt").string() << ", partition: iid}\n"
    << "train: {optimizer: sgd, lr: 0.05, schedule: constant, warmup_steps: 0, batch_size: 4, steps: 300, "
       "eval_every: 0, eval_batches: 1, log_every: 50}\n"
    << "islands: {count: 3}\n"
    << "algorithm: {name: fedavg, client_fraction: 1, local_steps: 5, rounds: " << rounds
    << ", outer_optimizer: sgd, outer_lr: 1.0, outer_momentum: 0}\n"
    << "transport: {coordinator: \"tcp://127.0.0.1:" << port_ << "\", base_port: " << port_ + 1
    << ", heartbeat_ms: 100, heartbeat_timeout_ms: 1500}\n";
  const fs::path cfg = dir_ / "f.yaml";
  std::ofstream(cfg) << y.str();
  const fs::path metrics = dir_ / "runs/f/metrics.jsonl";
  const pid_t launch = atl::testing::spawn_atoll({"launch", cfg.string(), "--quiet"}, dir_ / "launch.log");
  ASSERT_GT(launch, 0);
  // A few rounds with all three, then SIGKILL to client 2 mid-run.
  bool started = false;
  for (int i = 0; i < 600 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    started = server_rounds(metrics).size() >= 3;
  }
  ASSERT_TRUE(started) << "no server rounds within 30 s\n" << read(dir_ / "launch.log");
  const pid_t victim = island_child(launch, 2);
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const size_t before_kill = server_rounds(metrics).size();
  const int rc = atl::testing::wait_exit(launch, 120);
  ASSERT_NE(rc, -1) << "launch did not finish after a client was killed (the server waited for it)\n"
                    << read(dir_ / "launch.log");
  EXPECT_EQ(rc, 3) << "finished with survivors\n" << read(dir_ / "launch.log");

  // Every round closed, in order; up to the kill with the three; one round (the one client 2
  // was in) lost it, and every round after that completed with clients 0 and 1.
  const auto records = server_rounds(metrics);
  ASSERT_EQ(static_cast<int>(records.size()), rounds) << read(metrics);
  std::optional<int> lost_at;
  for (int r = 0; r < rounds; ++r) {
    const std::string& l = records[static_cast<size_t>(r)];
    EXPECT_EQ(json_find_number(l, "round"), r + 1) << l;
    EXPECT_NE(l.find("\"selected\":3,"), std::string::npos) << l;
    EXPECT_NE(l.find("\"skipped\":false"), std::string::npos) << l;
    EXPECT_NE(l.find("\"late\":[]"), std::string::npos) << l;  // no deadline set
    if (!lost_at) {
      if (l.find("\"lost\":[2]") != std::string::npos) {
        lost_at = r;
        EXPECT_NE(l.find("\"delivered\":[0,1],"), std::string::npos) << l;
        EXPECT_GE(static_cast<size_t>(r) + 1, before_kill) << "lost before it was killed: " << l;
      } else {
        EXPECT_NE(l.find("\"contributors\":3,\"selected\":3,\"delivered\":[0,1,2],\"lost\":[]"), std::string::npos) << l;
      }
    } else {
      EXPECT_NE(l.find("\"contributors\":2,\"selected\":3,\"delivered\":[0,1],\"lost\":[2]"), std::string::npos) << l;
    }
  }
  ASSERT_TRUE(lost_at.has_value()) << "no round lost client 2";
  EXPECT_LT(*lost_at, rounds - 1) << "the kill came too late to test the rounds after it";
  // The run's result: the server's final model and summary.
  EXPECT_GT(read(dir_ / "runs/f/final_params.bin").size(), 100u);
  const std::string summary = read(dir_ / "runs/f/summary.json");
  EXPECT_EQ(json_find_number(summary, "rounds"), rounds) << summary;
  EXPECT_EQ(json_find_number(summary, "islands_finished"), 2) << summary;
}

}  // namespace
