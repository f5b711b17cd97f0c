// Real processes with islands of several ranks (islands.ranks, docs/ranks.md): launch
// against simulate, ranks against one rank of the whole batch, a killed rank, and the outer
// exchange sharded over the ranks (islands.shard_exchange).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/run/processes_fixture.h"

// Every algorithm with islands of two ranks (two processes each, c10d between them): launch
// ends bitwise as simulate, which executes each island's two shares one after the other. The
// ranks of an island end with bitwise the same model (each rank > 0 checks it against rank 0
// and fails otherwise, and launch then does not exit 0). async_local_sgd is not bitwise
// between the modes even with one rank (its server applies pushes in wall-clock order), so it
// is only run to its end, replicas checked.
TEST_F(Processes, IslandsOfTwoRanksMatchSimulateBitwiseForEveryAlgorithm) {
  const std::string cfg = config(3, 20);
  struct Case {
    std::string name, sets;
    bool bitwise = true;
  };
  const std::vector<Case> cases = {
      {"ddp", " --set 'algorithm={name: ddp}'"},
      {"diloco_eager", " --set 'algorithm={name: diloco, inner_steps: 5, overlap: eager}'"},
      {"diloco_gloo", " --set transport.kind=gloo"},
      {"streaming_diloco", " --set 'algorithm={name: streaming_diloco, inner_steps: 8, fragments: 2, overlap_steps: 2}'"},
      {"demo", kDemo},
      {"sparseloco", " --set 'algorithm={name: sparseloco, inner_steps: 4, chunk: 16, topk: 8}'"},
      {"dipaco_gloo", " --set algorithm.name=dipaco --set 'dipaco={levels: [{blocks: [0], modules: 2}], prefix: 8}'"
                      " --set transport.kind=gloo"},
      {"fedavg", " --set 'algorithm={name: fedavg, client_fraction: 0.6, local_steps: 3, rounds: 4}'"},
      {"async_local_sgd", " --set 'algorithm={name: async_local_sgd, inner_steps: 5}'", false},
  };
  const std::string ranks = " --quiet --set model.layers=2 --set islands.ranks=2 --set transport.rank_port=" +
                            std::to_string(port_ + 10);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const fs::path log = dir_ / (c.name + ".log");
    if (c.bitwise) {
      ASSERT_EQ(run("simulate " + cfg + ranks + c.sets + " --set run.name=sim_" + c.name), 0);
    }
    const int status = std::system((std::string(ATOLL_BINARY) + " launch " + cfg + ranks + c.sets +
                                    " --set run.name=real_" + c.name + " > " + log.string() + " 2>&1").c_str());
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    ASSERT_EQ(rc, 0) << read(log);
    const std::string real = read(dir_ / "runs" / ("real_" + c.name) / "final_params.bin");
    ASSERT_GT(real.size(), 100u);
    if (c.bitwise) {
      EXPECT_TRUE(read(dir_ / "runs" / ("sim_" + c.name) / "final_params.bin") == real)
          << "final parameters differ between simulate and launch";
    }
    EXPECT_NE(read(log).find("island 2: rank 1 of 2 joined its island"), std::string::npos) << read(log);
  }
}

// islands.shard_exchange (docs/ranks.md "The outer exchange, sharded"): rank r of every
// island all-reduces shard r over its own ZeroMQ plane; the simulator runs the shards as
// sub-groups of the hub. The real run ends bitwise as the simulated one, lossy codecs too
// (each shard's collectives are numbered alike in both, so their seeds agree); it differs
// from the unsharded run (each shard is a ring of its own); and both ranks carry the bytes.
TEST_F(Processes, IslandsOfTwoRanksShardTheExchangeBitwiseAsSimulate) {
  const std::string cfg = config(3, 20);
  const std::string ranks = " --set model.layers=2 --set islands.ranks=2 --set transport.rank_port=" +
                            std::to_string(port_ + 10);
  const std::string sharded = " --set islands.shard_exchange=true";
  struct Case {
    std::string name, sets;
    bool sharded_bytes = true;  // its exchange is all-reduces of the island's group
    // Its parts are whole tensors, decoded on their own, each with the seed it has unsharded
    // (the unsharded run's bits, which an unsharded simulate gives independently).
    bool as_unsharded = false;
  };
  const std::vector<Case> cases = {
      {"diloco", ""},
      {"diloco_int8_eager", " --set 'algorithm={name: diloco, inner_steps: 5, overlap: eager}'"
                            " --set 'compression=[{quantize: int8}]'"},
      {"ddp", " --set 'algorithm={name: ddp}'"},
      {"streaming_diloco", " --set 'algorithm={name: streaming_diloco, inner_steps: 8, fragments: 2, overlap_steps: 2}'"},
      // All-gathers of messages in parts (Group::allgather_parts): rank r gathers part r.
      {"demo", kDemo, true, true},
      {"sparseloco_lut2", " --set 'algorithm={name: sparseloco, inner_steps: 4, chunk: 16, topk: 8}'"
                          " --set 'compression=[{quantize: lut2}]'", true, true},
      // Adam's two moments, each cut in shards.
      {"diloco_adam", " --set 'algorithm={name: diloco, inner_steps: 5, outer_optimizer: adam, outer_lr: 0.01}'"},
      // Its modules' all-reduces are sub-groups' (transport::sharded_subgroup): rank r
      // all-reduces shard r of each module on a sub-group of its plane.
      {"dipaco", " --set algorithm.name=dipaco --set 'dipaco={levels: [{blocks: [0], modules: 2}], prefix: 8}'"},
      // ... over gloo: each shard sub-group a gloo group of its rank's plane.
      {"dipaco_gloo", " --set algorithm.name=dipaco --set 'dipaco={levels: [{blocks: [0], modules: 2}], prefix: 8}'"
                      " --set transport.kind=gloo --set 'compression=[{quantize: int8}]'"},
      // Over gloo: rank r's plane meets the others' through the coordinator's store, by way of
      // its rank 0 (src/run/shard_plane.h).
      {"diloco_gloo", " --set transport.kind=gloo --set 'compression=[{quantize: int8}]'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(run("simulate " + cfg + " --quiet" + ranks + sharded + c.sets + " --set run.name=sim_" + c.name), 0);
    if (c.as_unsharded) {
      ASSERT_EQ(run("simulate " + cfg + " --quiet" + ranks + c.sets + " --set run.name=whole_" + c.name), 0);
      EXPECT_TRUE(read(dir_ / "runs" / ("sim_" + c.name) / "final_params.bin") ==
                  read(dir_ / "runs" / ("whole_" + c.name) / "final_params.bin"))
          << "the exchange in parts does not give the unsharded run's parameters";
    }
    const fs::path log = dir_ / (c.name + ".log");
    // Not quiet: the ranks' byte lines are info lines.
    const int status = std::system((std::string(ATOLL_BINARY) + " launch " + cfg + ranks + sharded + c.sets +
                                    " --set run.name=real_" + c.name + " > " + log.string() + " 2>&1").c_str());
    ASSERT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << read(log);
    const std::string real = read(dir_ / "runs" / ("real_" + c.name) / "final_params.bin");
    ASSERT_GT(real.size(), 100u);
    EXPECT_TRUE(read(dir_ / "runs" / ("sim_" + c.name) / "final_params.bin") == real)
        << "final parameters differ between simulate and launch";
    // Each island: rank 1 sent its shard on its own plane, rank 0 about as much.
    const std::string text = read(log);
    for (int island = 0; island < 3; ++island) {
      const std::string id = "island " + std::to_string(island);
      const size_t one = text.find(id + " rank 1: its shard plane sent ");
      const size_t zero = text.find(id + " rank 0: sent ");
      ASSERT_NE(one, std::string::npos) << text;
      ASSERT_NE(zero, std::string::npos) << text;
      const double by_one = std::stod(text.substr(one + id.size() + 29));
      const double by_zero = std::stod(text.substr(zero + id.size() + 14));
      if (c.sharded_bytes) {
        EXPECT_GT(by_one, 0.35 * (by_zero + by_one)) << text;
        EXPECT_GT(by_zero, 0.35 * (by_zero + by_one)) << text;
      }
      // Each rank keeps its shard of the outer optimizers' state: the two
      // shards make the whole, about half each (shards start at multiples of 4,096 values).
      int64_t held[2] = {0, 0}, whole[2] = {0, 0};
      for (int rank = 0; rank < 2; ++rank) {
        const std::string who = id + " rank " + std::to_string(rank) + ": holds ";
        const size_t at = text.find(who);
        ASSERT_NE(at, std::string::npos) << text;
        std::istringstream line(text.substr(at + who.size()));
        std::string of, the, islands;
        line >> held[rank] >> of >> the >> islands >> whole[rank];
        ASSERT_EQ(islands, "island's") << text.substr(at, 200);
      }
      EXPECT_EQ(whole[0], whole[1]);
      EXPECT_EQ(held[0] + held[1], whole[0]);
      const bool outer_state =
          c.name.rfind("diloco", 0) == 0 || c.name == "streaming_diloco" || c.name.rfind("dipaco", 0) == 0;
      if (!outer_state) {  // ddp, demo, sparseloco: no outer optimizer
        EXPECT_EQ(whole[0], 0);
        continue;
      }
      EXPECT_GT(held[0], 0.3 * static_cast<double>(whole[0]));
      EXPECT_GT(held[1], 0.3 * static_cast<double>(whole[0]));
    }
  }
  // A shard run again as after a member lost between the shards (ATOLL_SHARD_FAULT: every
  // island reruns shard 1 of its third all-reduce, from its input, over the same members): the
  // same bits as without (fp32: the same ring over the same values).
  const fs::path again = dir_ / "again.log";
  const int status = std::system(("ATOLL_SHARD_FAULT=rerun:3:1 " + std::string(ATOLL_BINARY) + " launch " + cfg + ranks +
                                  sharded + " --set run.name=again > " + again.string() + " 2>&1").c_str());
  ASSERT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 0) << read(again);
  for (int island = 0; island < 3; ++island)
    for (int rank = 0; rank < 2; ++rank)
      EXPECT_NE(read(again).find("island " + std::to_string(island) + " rank " + std::to_string(rank) +
                                 ": the exchange's shards ended with different contributors; shards 1 run again"),
                std::string::npos) << read(again);
  EXPECT_TRUE(read(dir_ / "runs/again/final_params.bin") == read(dir_ / "runs/sim_diloco/final_params.bin"));
  // The same for a part of an all-gather (DeMo's fifth step), gathered again from its message.
  const int gather = std::system(("ATOLL_SHARD_FAULT=rerun:5:1 " + std::string(ATOLL_BINARY) + " launch " + cfg + ranks +
                                  sharded + kDemo + " --set run.name=again_demo > " + again.string() + " 2>&1").c_str());
  ASSERT_EQ(WIFEXITED(gather) ? WEXITSTATUS(gather) : -1, 0) << read(again);
  EXPECT_NE(read(again).find("island 0 rank 1: the exchange's shards ended with different contributors; shards 1 run again"),
            std::string::npos) << read(again);
  EXPECT_TRUE(read(dir_ / "runs/again_demo/final_params.bin") == read(dir_ / "runs/sim_demo/final_params.bin"));
  // Rank 0's views reaching its ranks 300 ms late (ATOLL_SHARD_FAULT=slow_views): every shard
  // plane catches up with its rank 0's epoch before a collective, so none starts among fewer
  // members than rank 0's; the same bits.
  const int slow = std::system(("ATOLL_SHARD_FAULT=slow_views:300 timeout 120 " + std::string(ATOLL_BINARY) + " launch " +
                                cfg + " --quiet" + ranks + sharded + " --set run.name=slow > " + again.string() + " 2>&1").c_str());
  ASSERT_EQ(WIFEXITED(slow) ? WEXITSTATUS(slow) : -1, 0) << read(again);
  EXPECT_TRUE(read(dir_ / "runs/slow/final_params.bin") == read(dir_ / "runs/sim_diloco/final_params.bin"));
  // With transport.curve the shard planes authenticate as their island (its key pair) and let in
  // the members of rank 0's view, whose keys reach them with it.
  const std::string keys = (dir_ / "keys").string();
  bool curve = true;
  for (const char* name : {"coordinator", "island-0", "island-1", "island-2"})
    curve = curve && std::system((std::string(ATOLL_BINARY) + " keygen " + keys + " --name " + name + " >/dev/null 2>&1").c_str()) == 0;
  if (curve) {
    fs::create_directories(keys + "/allowed");
    for (const char* name : {"island-0", "island-1", "island-2"})
      fs::copy_file(keys + "/" + name + ".pub", keys + "/allowed/" + name + ".pub");
    ASSERT_EQ(run("launch " + cfg + " --quiet" + ranks + sharded + " --set transport.curve=true --set transport.keys_dir=" +
                  keys + " --set run.name=curve"), 0);
    EXPECT_TRUE(read(dir_ / "runs/curve/final_params.bin") == read(dir_ / "runs/sim_diloco/final_params.bin"));
  }
  // The shards are all-reduced apart: not the bits of the exchange made whole by rank 0.
  ASSERT_EQ(run("simulate " + cfg + " --quiet" + ranks + " --set run.name=whole"), 0);
  EXPECT_FALSE(read(dir_ / "runs/whole/final_params.bin") == read(dir_ / "runs/sim_diloco/final_params.bin"));
}

// Two ranks at batch 2 each train like one rank at batch 4 (docs/ranks.md): the real run with
// islands of two ranks ends within float-summation distance of the simulated run of one rank
// per island, and not bitwise (the gradient is summed in another order).
TEST_F(Processes, IslandsOfTwoRanksTrainLikeOneRankOfTheWholeBatch) {
  const std::string cfg = config(3, 20);
  ASSERT_EQ(run("simulate " + cfg + " --quiet --set run.name=one"), 0);
  ASSERT_EQ(run("launch " + cfg + " --quiet --set run.name=two --set islands.ranks=2 --set transport.rank_port=" +
                std::to_string(port_ + 10)), 0);
  auto params = [&](const std::string& name) {
    const std::string b = read(dir_ / "runs" / name / "final_params.bin");
    std::vector<float> v((b.size() - 16 - 8) / 4);  // "ATLP", version, count; values; checksum
    std::memcpy(v.data(), b.data() + 16, v.size() * 4);
    return v;
  };
  const auto one = params("one"), two = params("two");
  ASSERT_EQ(one.size(), two.size());
  ASSERT_GT(one.size(), 1000u);
  double max_diff = 0;
  for (size_t i = 0; i < one.size(); ++i) max_diff = std::max(max_diff, static_cast<double>(std::abs(one[i] - two[i])));
  EXPECT_LT(max_diff, 1e-4) << "two ranks did not train like one rank of the whole batch";
  EXPECT_GT(max_diff, 0.0) << "bitwise equal: the ranks' shares were not summed apart";
}

// kill -9 of one rank of a two-rank island mid-run: its rank 0 fails at its next step (c10d
// sees the closed connection), the island leaves, the other islands finish (launch's survivors
// exit code), nothing hangs. Both ranks started again by hand rejoin with a state hand-over and
// end with the others' global model.
// `extra`: more settings, for launch and the restarted ranks alike.
void killed_rank_takes_its_island_down(Processes& t, const std::vector<std::string>& extra) {
  const int steps = 3000;
  const std::string cfg = t.config(3, steps);
  std::vector<std::string> sets = {"--set", "islands.ranks=2", "--set", "transport.rank_port=" + std::to_string(t.port_ + 10)};
  for (const std::string& e : extra) sets.insert(sets.end(), {"--set", e});
  const fs::path& dir_ = t.dir_;
  const fs::path metrics = dir_ / "runs/r/metrics.jsonl";
  std::vector<std::string> args = {"launch", cfg, "--quiet"};
  args.insert(args.end(), sets.begin(), sets.end());
  const pid_t launch = spawn(args, dir_ / "launch.log");
  ASSERT_GT(launch, 0);
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"round\"", "\"round\":3,"}, 30)) << "no rounds within 30 s";
  const auto kids = children_of(launch);
  ASSERT_EQ(kids.size(), 7u);  // the coordinator, three ranks 0, three ranks 1
  const pid_t victim = atl::testing::island_child(launch, 2, 1);  // island 2's rank 1
  ASSERT_GT(victim, 0);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_for_record(metrics, {"\"event\":\"round\"", "\"contributors\":2,"}, 30))
      << "the others did not go on without island 2\n" << read(dir_ / "launch.log");
  // Island 2's rank 0 is gone well within the heartbeat timeout.
  bool rank0_gone = false;
  while (!rank0_gone && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(5)) {
    rank0_gone = children_of(launch).size() == 5;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(rank0_gone) << read(dir_ / "launch.log");
  EXPECT_NE(read(dir_ / "launch.log").find("[island 2] exited with code 1"), std::string::npos) << read(dir_ / "launch.log");

  std::vector<pid_t> restarted;
  for (const char* r : {"0", "1"})
  {
    std::vector<std::string> island = {"island", cfg, "--id", "2", "--rank", r, "--quiet"};
    island.insert(island.end(), sets.begin(), sets.end());
    restarted.push_back(spawn(island, dir_ / ("island2-" + std::string(r) + ".log")));
  }
  const int launch_rc = wait_bounded(launch, 90);
  // The restarted ranks are waited for (killed if they hang) before anything may end the test.
  std::vector<int> restarted_rc;
  for (pid_t pid : restarted) restarted_rc.push_back(wait_bounded(pid, launch_rc == -1 ? 1 : 30));
  ASSERT_NE(launch_rc, -1) << "launch did not finish (a hang)\n" << read(dir_ / "launch.log");
  EXPECT_EQ(launch_rc, 3) << read(dir_ / "launch.log");
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(restarted_rc[static_cast<size_t>(r)], 0) << read(dir_ / ("island2-" + std::to_string(r) + ".log"));
  bool rejoined = false;
  std::map<int, std::string> global;
  for (const auto& l : lines(metrics)) {
    const std::string event = json_find_string(l, "event").value_or("");
    if (event == "rejoin" && json_find_number(l, "island") == 2) rejoined = true;
    if (event == "island_end")
      global[static_cast<int>(json_find_number(l, "island").value_or(-1))] = json_find_string(l, "global_xxh64").value_or("");
  }
  EXPECT_TRUE(rejoined) << "no rejoin record of island 2";
  ASSERT_EQ(global.size(), 3u);
  EXPECT_EQ(global[0], global[2]) << "the restarted island's final global model differs";
}

TEST_F(Processes, KilledRankTakesItsIslandDownAndTheRestartedIslandRejoins) {
  killed_rank_takes_its_island_down(*this, {});
}

// The same with the exchange sharded over the ranks (docs/ranks.md): the restarted island's
// rank 1 takes its shard plane's place from the donor's hand-over.
TEST_F(Processes, KilledRankOfAShardedIslandTakesItDownAndTheRestartedIslandRejoins) {
  killed_rank_takes_its_island_down(*this, {"islands.shard_exchange=true", "model.layers=2"});
}
