// partition(): invariants for every kind (disjoint, exact cover, deterministic, seeded), the
// FedAvg pathological non-IID oracle, Dirichlet skew, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "src/data/dataset.h"
#include "src/data/lm_dataset.h"
#include "tests/data/test_util.h"

namespace atl::data {
namespace {

using testing::expect_exact_cover;
using testing::expect_user_error;
using testing::synthetic_config;

using Shards = std::vector<std::vector<int64_t>>;

std::shared_ptr<const Dataset> synthetic(int examples, int classes) {
  return load_splits(synthetic_config(examples, 2, classes), 0, 1).train;
}

// Labels seen per island: histogram[island][label].
std::vector<std::vector<int64_t>> label_histograms(const Dataset& d, const Shards& shards) {
  std::vector<std::vector<int64_t>> h(shards.size(), std::vector<int64_t>(d.num_classes(), 0));
  for (size_t s = 0; s < shards.size(); ++s) {
    for (int64_t i : shards[s]) ++h[s][static_cast<size_t>(d.labels()[static_cast<size_t>(i)])];
  }
  return h;
}

// Mean over islands of the share of the island's most common label.
double mean_top_label_share(const Dataset& d, const Shards& shards) {
  double total = 0.0;
  for (const auto& h : label_histograms(d, shards)) {
    int64_t n = 0;
    for (int64_t c : h) n += c;
    total += static_cast<double>(*std::max_element(h.begin(), h.end())) / static_cast<double>(n);
  }
  return total / static_cast<double>(shards.size());
}

class EveryPartition : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPartition, DisjointExactCoverDeterministicSeeded) {
  auto data = synthetic(2051, 5);  // 2051: no kind divides evenly
  config::DataConfig c = synthetic_config(2051, 2, 5);
  c.partition = GetParam();
  c.shards_per_island = 3;
  const Shards a = partition(*data, 7, c, 42);
  ASSERT_EQ(a.size(), 7u);
  expect_exact_cover(a, data->size());
  EXPECT_EQ(partition(*data, 7, c, 42), a);
  if (GetParam() != "contiguous") {
    EXPECT_NE(partition(*data, 7, c, 43), a);
  } else {
    EXPECT_EQ(partition(*data, 7, c, 43), a);  // not random
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, EveryPartition,
                         ::testing::Values("iid", "contiguous", "dirichlet", "shards"));

TEST(Partition, IidAndContiguousHaveNearEqualSizes) {
  auto data = synthetic(1003, 3);
  config::DataConfig c = synthetic_config(1003, 2, 3);
  for (const char* kind : {"iid", "contiguous"}) {
    c.partition = kind;
    const Shards shards = partition(*data, 10, c, 5);
    for (size_t i = 0; i < shards.size(); ++i) {
      EXPECT_EQ(static_cast<int64_t>(shards[i].size()), i < 3 ? 101 : 100) << kind << " " << i;
    }
  }
  c.partition = "contiguous";
  const Shards shards = partition(*data, 10, c, 5);
  for (size_t i = 0; i < shards.size(); ++i) {
    EXPECT_EQ(shards[i].back() - shards[i].front() + 1, static_cast<int64_t>(shards[i].size()));
    if (i > 0) {
      EXPECT_EQ(shards[i].front(), shards[i - 1].back() + 1);
    }
  }
}

TEST(Partition, ContiguousTextGivesIncreasingRanges) {
  testing::TempDir dir;
  std::vector<uint8_t> bytes(20000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i % 97 + 32);
  testing::write_bytes(dir.file("book.txt"), bytes);
  config::DataConfig c;
  c.kind = "text";
  c.path = dir.file("book.txt");
  c.val_fraction = 0.05;
  c.partition = "contiguous";
  Splits s = load_splits(c, 31, 1);
  const auto& lm = dynamic_cast<const LmDataset&>(*s.train);
  const Shards shards = partition(lm, 4, c, 9);
  expect_exact_cover(shards, lm.size());
  for (size_t i = 1; i < shards.size(); ++i) {
    // Island i reads strictly later text than island i - 1.
    EXPECT_LT(lm.window_start(shards[i - 1].back()), lm.window_start(shards[i].front()));
  }
  EXPECT_EQ(lm.window_start(shards[0].front()), 0);
}

TEST(Partition, LanguageModelsRejectLabelPartitions) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("t.txt"), std::vector<uint8_t>(1000, 'a'));
  config::DataConfig c;
  c.kind = "text";
  c.path = dir.file("t.txt");
  Splits s = load_splits(c, 8, 1);
  for (const char* kind : {"dirichlet", "shards"}) {
    c.partition = kind;
    expect_user_error([&] { partition(*s.train, 2, c, 1); },
                      {"data.partition", kind, "needs labels (classification data)"});
  }
}

TEST(Partition, ErrorsNameTheKey) {
  auto data = synthetic(100, 4);
  config::DataConfig c = synthetic_config(100, 2, 4);
  expect_user_error([&] { partition(*data, 101, c, 1); }, {"islands.count", "101", "100"});
  expect_user_error([&] { partition(*data, 0, c, 1); }, {"islands.count"});
  c.partition = "random";
  expect_user_error([&] { partition(*data, 2, c, 1); }, {"data.partition", "random", "iid"});
  c.partition = "shards";
  c.shards_per_island = 11;
  expect_user_error([&] { partition(*data, 10, c, 1); },
                    {"data.shards_per_island", "110 shards", "100"});
  c.partition = "dirichlet";
  c.dirichlet_alpha = 0.0;
  expect_user_error([&] { partition(*data, 10, c, 1); }, {"data.dirichlet_alpha"});
}

// FedAvg (McMahan et al. 2017), section 3: 60000 examples sorted by label, 200 shards of
// 300, 100 clients with 2 shards each; most clients then see examples of only two digits.
void expect_fedavg_oracle(const Dataset& data) {
  config::DataConfig c;
  c.partition = "shards";
  c.shards_per_island = 2;
  const Shards shards = partition(data, 100, c, 2017);
  expect_exact_cover(shards, 60000);
  int at_most_two = 0;
  for (const auto& h : label_histograms(data, shards)) {
    int labels = 0;
    int64_t n = 0;
    for (int64_t count : h) {
      labels += count > 0;
      n += count;
      // Each label's count is a whole number of 300-example shards (shards are label-pure
      // when every label has a multiple of 300 examples, as here).
      EXPECT_EQ(count % 300, 0);
    }
    EXPECT_EQ(n, 600);
    at_most_two += labels <= 2;
  }
  EXPECT_EQ(at_most_two, 100);
}

// Oracle 27, IID half: 60000 examples over 100 clients -> 600 each, every example once.
TEST(Partition, FedAvgIidOracle) {
  auto data = synthetic(60000, 10);
  config::DataConfig c;
  c.partition = "iid";
  const Shards shards = partition(*data, 100, c, 2017);
  expect_exact_cover(shards, 60000);
  for (const auto& s : shards) EXPECT_EQ(s.size(), 600u);
}

TEST(Partition, FedAvgShardsOracleSynthetic) {
  expect_fedavg_oracle(*synthetic(60000, 10));
}

TEST(Partition, FedAvgShardsOracleFashionMnist) {
  const std::string root = "data/fashion-mnist/";
  if (!std::filesystem::exists(root + "train-labels-idx1-ubyte")) GTEST_SKIP() << "no data/";
  config::DataConfig c;
  c.kind = "idx";
  c.path = root + "train-images-idx3-ubyte";
  c.labels_path = root + "train-labels-idx1-ubyte";
  c.val_path = root + "t10k-images-idx3-ubyte";
  c.val_labels_path = root + "t10k-labels-idx1-ubyte";
  expect_fedavg_oracle(*load_splits(c, 0, 1).train);
}

TEST(Partition, ShardsRemainderGoesToTheFirstShards) {
  auto data = synthetic(1003, 10);  // 20 shards: 3 of 51, 17 of 50
  config::DataConfig c;
  c.partition = "shards";
  c.shards_per_island = 2;
  const Shards shards = partition(*data, 10, c, 3);
  expect_exact_cover(shards, 1003);
  int64_t total = 0;
  for (const auto& s : shards) {
    EXPECT_GE(s.size(), 100u);
    EXPECT_LE(s.size(), 102u);
    total += static_cast<int64_t>(s.size());
  }
  EXPECT_EQ(total, 1003);
}

TEST(Partition, DirichletAlphaControlsSkew) {
  auto data = synthetic(5000, 10);
  config::DataConfig c;
  c.partition = "dirichlet";
  c.dirichlet_alpha = 0.05;
  const Shards skewed = partition(*data, 10, c, 11);
  expect_exact_cover(skewed, 5000);
  c.dirichlet_alpha = 1000.0;
  const Shards even = partition(*data, 10, c, 11);
  expect_exact_cover(even, 5000);
  // Uniform labels give a top share of 0.1; one label per island gives 1.
  EXPECT_GT(mean_top_label_share(*data, skewed), 0.5);
  EXPECT_LT(mean_top_label_share(*data, even), 0.15);
  for (const auto& s : even) EXPECT_NEAR(static_cast<double>(s.size()), 500.0, 50.0);
}

TEST(Partition, DirichletNeverLeavesAnIslandEmpty) {
  auto data = synthetic(60, 3);
  config::DataConfig c;
  c.partition = "dirichlet";
  c.dirichlet_alpha = 0.001;  // nearly every class goes to a single island
  for (uint64_t seed = 0; seed < 20; ++seed) expect_exact_cover(partition(*data, 60, c, seed), 60);
  for (uint64_t seed = 0; seed < 20; ++seed) expect_exact_cover(partition(*data, 25, c, seed), 60);
}

}  // namespace
}  // namespace atl::data
