// DiPaCo routing as a run loads its data (src/core/island_parts.cpp): a corpus made of two
// very different halves, two paths, four islands. K-means on the initial model's features
// must put the two halves on different paths, every island of a path must hold only that
// path's sequences, and every training sequence must be dealt exactly once.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "src/config/config.h"
#include "src/core/island_parts.h"
#include "src/dipaco/run/routing_data.h"

namespace atl::core {
namespace {

namespace fs = std::filesystem;

TEST(DiPaCoRouting, KMeansSendsTheTwoHalvesOfACorpusToTwoPaths) {
  const fs::path dir = fs::temp_directory_path() / ("atoll_routing_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "corpus.txt") << std::string(3000, 'a') + std::string(3000, 'z');
  const config::Config c = config::parse_config(
      "run: {seed: 3, threads: 1}\n"
      "model: {name: gpt, layers: 2, heads: 2, dim: 16, seq_len: 16}\n"
      "data: {kind: text, path: " + (dir / "corpus.txt").string() + ", val_fraction: 0.1}\n"
      "islands: {count: 4}\n"
      "algorithm: {name: dipaco, inner_steps: 2}\n"
      "dipaco: {levels: [{blocks: [0, 1], modules: 2}], prefix: 8}\n",
      "routing.yaml");
  const RunData d = load_run_data(c);
  const data::Dataset& train = *d.splits.train;

  // Dealt exactly once, and the sizes are the shards'.
  std::set<int64_t> seen;
  for (size_t i = 0; i < d.shards.size(); ++i) {
    EXPECT_EQ(d.shard_sizes[i], static_cast<int64_t>(d.shards[i].size()));
    for (int64_t e : d.shards[i]) EXPECT_TRUE(seen.insert(e).second) << "sequence " << e << " dealt twice";
  }
  EXPECT_EQ(static_cast<int64_t>(seen.size()), train.size());

  // The path of each sequence is the path of the island that holds it (island i: path i % 2);
  // a sequence whose prefix is all 'a' (all 'z') goes with the other such sequences.
  std::set<int> paths_of_a, paths_of_z;
  for (int island = 0; island < 4; ++island) {
    for (int64_t e : d.shards[island]) {
      const at::Tensor prefix = train.gather({e}).input.narrow(1, 0, 8);
      if ((prefix == 'a').all().item<bool>()) paths_of_a.insert(island % 2);
      if ((prefix == 'z').all().item<bool>()) paths_of_z.insert(island % 2);
    }
  }
  ASSERT_EQ(paths_of_a.size(), 1u) << "the 'a' half is split between paths";
  ASSERT_EQ(paths_of_z.size(), 1u) << "the 'z' half is split between paths";
  EXPECT_NE(*paths_of_a.begin(), *paths_of_z.begin()) << "both halves went to one path";
  // Two islands per path share its sequences about equally (round-robin).
  EXPECT_LE(std::abs(d.shard_sizes[0] - d.shard_sizes[2]), 1);
  EXPECT_LE(std::abs(d.shard_sizes[1] - d.shard_sizes[3]), 1);

  // The same config routes the same way (every process of a run computes it).
  EXPECT_EQ(load_run_data(c).shards, d.shards);
  fs::remove_all(dir);
}

// The routing features are computed a batch per thread: any run.threads gives the same bits
// (every process of a run must route alike, whatever its thread count), and so the same paths.
TEST(DiPaCoRouting, FeaturesAreTheSameBitsOnAnyNumberOfThreads) {
  const fs::path dir = fs::temp_directory_path() / ("atoll_routing_threads_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string text;
  uint64_t state = 7;
  for (int i = 0; i < 24000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    text += static_cast<char>('a' + (state >> 59) % 16);
  }
  std::ofstream(dir / "corpus.txt") << text;
  auto load = [&](int threads) {
    return load_run_data(config::parse_config(
        "run: {seed: 3, threads: " + std::to_string(threads) + "}\n"
        "model: {name: gpt, layers: 2, heads: 2, dim: 16, seq_len: 16}\n"
        "data: {kind: text, path: " + (dir / "corpus.txt").string() + ", val_fraction: 0.1}\n"
        "islands: {count: 4}\n"
        "algorithm: {name: dipaco, inner_steps: 2}\n"
        "dipaco: {levels: [{blocks: [0, 1], modules: 2}], prefix: 8}\n",
        "routing.yaml"));
  };
  const RunData one = load(1);
  ASSERT_TRUE(one.router);
  ASSERT_GT(one.router->train_features.rows, 3 * 256) << "too few batches to spread over threads";
  for (int threads : {2, 3}) {
    const RunData more = load(threads);
    EXPECT_TRUE(more.router->train_features.v == one.router->train_features.v) << threads << " threads";
    EXPECT_TRUE(more.router->val_features.v == one.router->val_features.v) << threads << " threads";
    EXPECT_EQ(more.shards, one.shards) << threads << " threads";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace atl::core
