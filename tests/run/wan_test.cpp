// `atoll launch --emulate-wan` (docs/wan-emulation.md): real processes on loopback whose
// traffic passes through relays that impose the config's network: profile.
//   - 3 islands at 100 ms RTT, 20 Mbit/s and loss stalls: the run completes, and the time an
//     island spends in each exchange matches the network model's prediction for the bytes it
//     sent (within 10%);
//   - a 30 s partition of island 2: the coordinator declares it dead, the others go on, and
//     island 2 fails with a clear error (or would rejoin cleanly) instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "src/config/config.h"
#include "src/core/json.h"
#include "src/core/network_profile.h"
#include "tests/run/process_test_util.h"

namespace fs = std::filesystem;

namespace {

using atl::core::json_find_number;
using atl::core::json_find_string;
using atl::testing::lines;
using atl::testing::read;

// Runs `atoll launch` with a wall-clock bound; its exit code, or -1 when it had to be killed.
int launch_bounded(const std::vector<std::string>& args, const fs::path& log, int seconds) {
  const pid_t pid = fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    std::vector<char*> argv = {const_cast<char*>("atoll"), const_cast<char*>("launch")};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(ATOLL_BINARY, argv.data());
    _exit(127);
  }
  int status = 0;
  for (int i = 0; i < seconds * 10; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGINT);  // launch forwards it and its children die with it
  waitpid(pid, &status, 0);
  return -1;
}

class Wan : public ::testing::Test {
 protected:
  // The kernel's netem is preferred where it exists; this machine's kernel has none, so the
  // tests say which mode the probe found and use the relay (which they use either way).
  static void SetUpTestSuite() {
    std::FILE* p = popen("scripts/netem_check.sh 2>&1", "r");
    if (p == nullptr) return;
    char line[512];
    while (std::fgets(line, sizeof line, p) != nullptr) {
      if (std::string(line).rfind("mode:", 0) == 0) std::printf("netem_check %s", line);
    }
    pclose(p);
  }

  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("atoll_wan_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    // Below the ephemeral range (32768+) that the relays' own listeners draw from.
    port_ = 20000 + static_cast<int>(getpid() % 500) * 20;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write_config(const std::string& name, const std::string& body) {
    const fs::path p = dir_ / (name + ".yaml");
    std::ofstream(p) << "run: {name: " << name << ", seed: 3, out_dir: " << (dir_ / "runs").string()
                     << ", threads: 1}\n"
                     << "transport: {coordinator: \"tcp://127.0.0.1:" << port_ << "\", base_port: " << port_ + 1
                     << ", heartbeat_ms: 100, heartbeat_timeout_ms: 4000, bandwidth_mbps: 20, chunk_bytes: 65536, "
                        "max_in_flight: 16}\n"
                     << body;
    return p.string();
  }

  fs::path dir_;
  int port_ = 0;
};

// An MLP of 750k parameters: each island sends 4 MB per ring all-reduce (1.6 s at 20 Mbit/s),
// so the exchange dominates the round and latency and stalls are a visible part of it.
TEST_F(Wan, SyncTimesMatchTheModelAt100msRtt20MbitWithStalls) {
  const std::string cfg = write_config(
      "wan",
      "model: {name: mlp, hidden: [1024, 700]}\n"
      "data: {kind: synthetic, synthetic_examples: 600, synthetic_dim: 32, synthetic_classes: 3, partition: iid}\n"
      "train: {optimizer: sgd, lr: 0.05, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, "
      "batch_size: 10, steps: 20, eval_every: 0, eval_batches: 1, log_every: 5}\n"
      "islands: {count: 3}\n"
      "algorithm: {name: diloco, inner_steps: 5}\n"
      "network: {bandwidth_mbps: 20, latency_ms: 50, loss: 0.0005}\n");
  ASSERT_EQ(launch_bounded({cfg, "--emulate-wan", "--quiet"}, dir_ / "wan.log", 55), 0) << read(dir_ / "wan.log");

  const atl::config::Config config = atl::config::load_config(cfg, {});
  const atl::transport::NetworkModel model = atl::core::make_network_model(config);
  // round -> island -> (sync_s, bytes_sent)
  std::map<int, std::map<int, std::pair<double, double>>> rounds;
  for (const auto& l : lines(dir_ / "runs/wan/metrics.jsonl")) {
    if (json_find_string(l, "event") != "round") continue;
    const auto sync = json_find_number(l, "sync_s");
    ASSERT_TRUE(sync.has_value()) << "round record without sync_s: " << l;
    rounds[static_cast<int>(*json_find_number(l, "round"))][static_cast<int>(*json_find_number(l, "island"))] = {
        *sync, *json_find_number(l, "bytes_sent")};
  }
  ASSERT_EQ(rounds.size(), 4u);
  // The last island to reach the exchange waits only for the exchange itself: its sync time
  // against the model's time for the bytes it sent on its ring link i -> i+1:
  //   latency + 8 bytes / min(up, down, cap) + (expected losses) * rtt.
  // Round 1 also opens the connections (handshakes over the 100 ms RTT): from round 2 on.
  for (const auto& [r, islands] : rounds) {
    ASSERT_EQ(islands.size(), 3u);
    if (r == 1) continue;
    const auto last = std::min_element(islands.begin(), islands.end(),
                                       [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
    const int i = last->first, next = (i + 1) % 3;
    const double sync = last->second.first, bytes = last->second.second;
    const auto& path = model.path(i, next);
    const double bps = std::min({model.up_bps(i), model.down_bps(next), path.cap_bps});
    const double losses = std::ceil(bytes / atl::transport::kPacketBytes) * path.loss;
    const double predicted = path.latency_s + 8 * bytes / bps + losses * model.rtt_s(i, next);
    std::printf("round %d: island %d sync %.3f s, model %.3f s for %.0f bytes (%+.1f%%)\n", r, i, sync, predicted,
                bytes, 100 * (sync / predicted - 1));
    EXPECT_NEAR(sync, predicted, 0.1 * predicted) << "round " << r;
  }

  // The relays carried the ring and injected the stalls the profile's loss implies.
  uint64_t stalls = 0;
  for (const auto& l : lines(dir_ / "runs/wan/relays.jsonl")) {
    const std::string link = *json_find_string(l, "link");
    stalls += static_cast<uint64_t>(*json_find_number(l, "forward_loss_stalls"));
    if (link == "0->1") {
      EXPECT_GT(*json_find_number(l, "forward_bytes"), 4 * 4e6);
      EXPECT_NEAR(*json_find_number(l, "backward_mean_delay_s"), 0.050, 0.005) << l;
    }
  }
  EXPECT_GE(stalls, 3u * 4);  // 4 rounds x 3 ring links x ~1.4 each
}

// Islands of two ranks with a sharded exchange (docs/ranks.md): rank 1 of each island reaches
// the other islands' ranks 1 through relay links of their own, which share the island's link
// with rank 0's (its token buckets); the run ends bitwise as `atoll simulate` of the config.
TEST_F(Wan, ShardedRanksReachEachOtherThroughTheirOwnRelayLinks) {
  const std::string cfg = write_config(
      "sharded",
      "model: {name: mlp, hidden: [256, 128]}\n"
      "data: {kind: synthetic, synthetic_examples: 600, synthetic_dim: 32, synthetic_classes: 3, partition: iid}\n"
      "train: {optimizer: sgd, lr: 0.05, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, "
      "batch_size: 10, steps: 20, eval_every: 0, eval_batches: 1, log_every: 5}\n"
      "islands: {count: 3, ranks: 2, shard_exchange: true}\n"
      "algorithm: {name: diloco, inner_steps: 5}\n"
      "network: {bandwidth_mbps: 100, latency_ms: 10}\n");
  // Rank stores on the ports the shard planes bind (base_port + 3 .. + 5): one line, nothing started.
  const std::string clash = "transport.rank_port=" + std::to_string(port_ + 1 + 4);
  ASSERT_EQ(launch_bounded({cfg, "--emulate-wan", "--quiet", "--set", clash}, dir_ / "clash.log", 30), 2);
  EXPECT_NE(read(dir_ / "clash.log").find("key 'transport.rank_port': launch --emulate-wan puts the ranks' shard planes"),
            std::string::npos) << read(dir_ / "clash.log");
  const std::string ranks = "transport.rank_port=" + std::to_string(port_ + 10);
  ASSERT_EQ(launch_bounded({cfg, "--emulate-wan", "--quiet", "--set", ranks}, dir_ / "wan.log", 90), 0)
      << read(dir_ / "wan.log");
  const std::string real = read(dir_ / "runs/sharded/final_params.bin");
  ASSERT_GT(real.size(), 100u);
  const std::string sim = "\"" + std::string(ATOLL_BINARY) + "\" simulate " + cfg + " --quiet --set run.name=sim > " +
                          (dir_ / "sim.log").string() + " 2>&1";
  ASSERT_EQ(std::system(sim.c_str()), 0) << read(dir_ / "sim.log");
  EXPECT_TRUE(read(dir_ / "runs/sim/final_params.bin") == real) << "final parameters differ between simulate and launch";
  // Every directed link of rank 1 carried its shards, about as much as rank 0's link did.
  std::map<std::string, double> bytes;
  for (const auto& l : lines(dir_ / "runs/sharded/relays.jsonl"))
    bytes[*json_find_string(l, "link")] = *json_find_number(l, "forward_bytes") + *json_find_number(l, "backward_bytes");
  int ring = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      if (i == j) continue;
      const std::string link = std::to_string(i) + "->" + std::to_string(j);
      ASSERT_TRUE(bytes.count(link + " rank 1")) << link;
      std::printf("%s: rank 0 %.0f bytes, rank 1 %.0f bytes\n", link.c_str(), bytes[link], bytes[link + " rank 1"]);
      if (bytes[link] + bytes[link + " rank 1"] < 1e5) continue;  // not on the ring
      ++ring;
      EXPECT_GT(bytes[link + " rank 1"], 0.3 * bytes[link]) << link;
      EXPECT_GT(bytes[link], 0.3 * bytes[link + " rank 1"]) << link;
    }
  EXPECT_GE(ring, 3);

  // The ranks share the island's link unless each has its own (network.rank_links): at 10
  // Mbit/s the shards then move at once and a round's sync time halves, as the simulator
  // times it (Cli.ShardsShareTheIslandsLinkUnlessEachRankHasItsOwn). Mean over rounds 2-4.
  auto mean_sync = [&](const std::string& name, const std::string& links) {
    EXPECT_EQ(launch_bounded({cfg, "--emulate-wan", "--quiet", "--set", ranks, "--set", "network.bandwidth_mbps=10",
                              "--set", "transport.bandwidth_mbps=10", "--set", "network.rank_links=" + links, "--set",
                              "run.name=" + name},
                             dir_ / (name + ".log"), 90),
              0)
        << read(dir_ / (name + ".log"));
    double sum = 0;
    int n = 0;
    for (const auto& l : lines(dir_ / "runs" / name / "metrics.jsonl")) {
      if (json_find_string(l, "event") != "round" || json_find_number(l, "round").value_or(0) < 2) continue;
      sum += json_find_number(l, "sync_s").value_or(0);
      ++n;
    }
    return n > 0 ? sum / n : 0.0;
  };
  const double shared = mean_sync("shared", "false"), own = mean_sync("own", "true");
  std::printf("mean sync_s at 10 Mbit/s: ranks sharing the island's link %.3f s, each on its own %.3f s\n", shared, own);
  EXPECT_GT(shared, 0.1);  // about 180 KB an island a round
  EXPECT_LT(own, 0.8 * shared);
}

// The relays are threads of launch: Ctrl-C leaves no process behind with --emulate-wan too.
TEST_F(Wan, CtrlCLeavesNoProcessBehind) {
  const std::string cfg = write_config(
      "ctrlc",
      "model: {name: mlp, hidden: [16]}\n"
      "data: {kind: synthetic, synthetic_examples: 600, synthetic_dim: 8, synthetic_classes: 3, partition: iid}\n"
      "train: {steps: 1000000, eval_every: 0, log_every: 1000}\n"
      "islands: {count: 2}\n"
      "network: {latency_ms: 20, bandwidth_mbps: 20}\n");
  atl::testing::expect_ctrl_c_leaves_no_process_behind({"launch", cfg, "--emulate-wan", "--quiet"}, 3,
                                                       "coordinator + 2 islands, no relay processes",
                                                       std::chrono::seconds(2));
}

// Island 2 sits alone in region b; a partition [a, b] cuts all its links (to the peers and to
// the coordinator) from t = 15 s to t = 45 s of the launch (the islands have joined and
// trained for a while by then, even on a loaded machine). The coordinator declares it dead
// (heartbeat timeout 4 s) and the survivors go on with 2 contributors. Rounds are
// latency-bound (50 ms one way: about 0.25 s with 3 islands, 0.15 s with 2), so with 3200
// steps the survivors still train for about 20 s after the link comes back: island
// 2's control client joins again, the island abandons its waits and joins the run again with
// a live island's state hand-over (transport.max_rejoins), and all three finish on the same
// global model.
TEST_F(Wan, IslandCutOffForThirtySecondsRejoinsWhenTheLinkReturns) {
  const std::string cfg = write_config(
      "cut",
      "model: {name: mlp, hidden: [16]}\n"
      "data: {kind: synthetic, synthetic_examples: 600, synthetic_dim: 8, synthetic_classes: 3, partition: iid}\n"
      "train: {optimizer: sgd, lr: 0.05, schedule: constant, warmup_steps: 0, weight_decay: 0, grad_clip: 0, "
      "batch_size: 10, steps: 3200, eval_every: 0, eval_batches: 1, log_every: 500}\n"
      "islands: {count: 3, events: [{partition: [a, b], at_time_s: 15, duration_s: 30}]}\n"
      "algorithm: {name: diloco, inner_steps: 10}\n"
      "network: {latency_ms: 50, regions: [a, a, b], server_region: a}\n");
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = launch_bounded({cfg, "--emulate-wan", "--quiet"}, dir_ / "cut.log", 150);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log = read(dir_ / "cut.log");
  ASSERT_NE(rc, -1) << "launch still running after 150 s: a hang\n" << log;
  std::printf("cut run: exit code %d after %.1f s\n", rc, wall);
  EXPECT_EQ(rc, 0) << log;

  const fs::path metrics = dir_ / "runs/cut/metrics.jsonl";
  const std::string all = read(metrics);
  EXPECT_NE(all.find("\"contributors\":2"), std::string::npos) << "the others did not go on without island 2";
  EXPECT_NE(log.find("island 2: declared dead while cut off"), std::string::npos) << log;
  std::optional<double> rejoin_round;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") == "rejoin" && json_find_number(l, "island") == 2)
      rejoin_round = json_find_number(l, "round");
  }
  ASSERT_TRUE(rejoin_round) << "island 2 did not rejoin\n" << log;
  int full_rounds_after = 0;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") != "round" || json_find_number(l, "round").value_or(0) <= *rejoin_round) continue;
    full_rounds_after += json_find_number(l, "contributors") == 3;
  }
  std::printf("island 2 rejoined at round %.0f; %d rounds with all three islands after it\n", *rejoin_round,
              full_rounds_after / 3);
  EXPECT_GE(full_rounds_after, 3 * 5) << "fewer than 5 rounds with island 2 after its rejoin";
  std::map<int, std::string> global;
  for (const auto& l : lines(metrics)) {
    if (json_find_string(l, "event") == "island_end")
      global[static_cast<int>(json_find_number(l, "island").value_or(-1))] = json_find_string(l, "global_xxh64").value_or("");
  }
  ASSERT_EQ(global.size(), 3u) << all.substr(all.size() > 2000 ? all.size() - 2000 : 0);
  EXPECT_EQ(global[0], global[1]);
  EXPECT_EQ(global[0], global[2]) << "the rejoined island's final global model differs";
  EXPECT_EQ(json_find_number(read(dir_ / "runs/cut/summary.json"), "islands_finished").value_or(-1), 3);

  bool cut_seen = false;
  for (const auto& l : lines(dir_ / "runs/cut/relays.jsonl")) {
    if (json_find_string(l, "link") != "2->coordinator") continue;
    cut_seen = true;
    EXPECT_EQ(json_find_number(l, "cuts").value_or(-1), 1);
    EXPECT_GE(json_find_number(l, "reset").value_or(0), 1);
  }
  EXPECT_TRUE(cut_seen);
}

}  // namespace
