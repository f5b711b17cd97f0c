// Sampler and validation_batches(): determinism, epoch reshuffles, exact batch sizes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "src/data/classification_dataset.h"
#include "src/data/dataset.h"

namespace atl::data {
namespace {

// A data set whose example i has feature i and label i % 2, so batches reveal their indices.
std::shared_ptr<const Dataset> numbered(int64_t n) {
  at::Tensor features = at::arange(n, at::kFloat).reshape({n, 1});
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) labels[static_cast<size_t>(i)] = i % 2;
  return std::make_shared<ClassificationDataset>(features, labels, 2, "numbered");
}

std::vector<int64_t> ids(const Batch& b) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < b.input.size(0); ++i) out.push_back(b.input[i][0].item<int64_t>());
  return out;
}

TEST(Sampler, SameSeedSameStreamOtherSeedOtherStream) {
  auto data = numbered(100);
  std::vector<int64_t> shard = {3, 5, 8, 13, 21, 34, 55, 89, 90, 91, 92};
  Sampler a(data, shard, 7), b(data, shard, 7), c(data, shard, 8);
  bool differs = false;
  for (int step = 0; step < 20; ++step) {
    const std::vector<int64_t> x = ids(a.next(4));
    EXPECT_EQ(x, ids(b.next(4)));
    differs |= x != ids(c.next(4));
    for (int64_t i : x) EXPECT_TRUE(std::find(shard.begin(), shard.end(), i) != shard.end());
  }
  EXPECT_TRUE(differs);
}

TEST(Sampler, EveryEpochIsAPermutationAndEpochsDiffer) {
  auto data = numbered(50);
  std::vector<int64_t> shard(10);
  std::iota(shard.begin(), shard.end(), 20);
  Sampler s(data, shard, 1);
  EXPECT_EQ(s.shard_size(), 10);
  // 4 epochs of 10 in batches of 4: batches cross epoch boundaries but stay size 4.
  std::vector<int64_t> stream;
  for (int step = 0; step < 10; ++step) {
    const Batch b = s.next(4);
    ASSERT_EQ(b.input.size(0), 4);
    ASSERT_EQ(b.target.size(0), 4);
    const std::vector<int64_t> x = ids(b);
    stream.insert(stream.end(), x.begin(), x.end());
  }
  EXPECT_EQ(s.epoch(), 3);
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 4; ++e) {
    std::vector<int64_t> order(stream.begin() + e * 10, stream.begin() + (e + 1) * 10);
    std::vector<int64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, shard) << "epoch " << e;
    epochs.push_back(order);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(epochs[0], shard);  // shuffled, not in shard order
}

TEST(Sampler, ShardSmallerThanBatchWraps) {
  auto data = numbered(10);
  Sampler s(data, {4, 7}, 3);
  const std::vector<int64_t> x = ids(s.next(5));
  ASSERT_EQ(x.size(), 5u);
  EXPECT_EQ(std::count(x.begin(), x.end(), 4) + std::count(x.begin(), x.end(), 7), 5);
  EXPECT_EQ(s.epoch(), 2);
}

TEST(Sampler, BrokenInvariantsThrow) {
  auto data = numbered(10);
  EXPECT_THROW(Sampler(data, {}, 1), c10::Error);
  EXPECT_THROW(Sampler(data, {10}, 1), c10::Error);
  Sampler s(data, {1, 2}, 1);
  EXPECT_THROW(s.next(0), c10::Error);
}

TEST(ValidationBatches, FixedDisjointAndBounded) {
  auto data = numbered(103);
  const std::vector<Batch> a = validation_batches(*data, 10, 0, 5);
  const std::vector<Batch> b = validation_batches(*data, 10, 0, 5);
  ASSERT_EQ(a.size(), 11u);  // the whole split: 10 full batches and one of the 3 left over
  std::set<int64_t> seen;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(ids(a[i]), ids(b[i]));
    EXPECT_EQ(a[i].input.size(0), i < 10 ? 10 : 3);
    for (int64_t id : ids(a[i])) EXPECT_TRUE(seen.insert(id).second);
    EXPECT_TRUE(a[i].target.equal(at::remainder(a[i].input.squeeze(1), 2).to(at::kLong)));
  }
  EXPECT_EQ(seen.size(), 103u);  // every example exactly once
  EXPECT_NE(ids(a[0]), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // seeded order
  EXPECT_NE(ids(validation_batches(*data, 10, 0, 6)[0]), ids(a[0]));
  EXPECT_EQ(validation_batches(*data, 10, 4, 5).size(), 4u);
  EXPECT_EQ(validation_batches(*data, 10, 20, 5).size(), 11u);  // the short batch too
  EXPECT_EQ(ids(validation_batches(*data, 10, 4, 5)[3]), ids(a[3]));
}

TEST(ValidationBatches, SmallOrEmptySplits) {
  auto small = numbered(7);
  const std::vector<Batch> one = validation_batches(*small, 16, 3, 1);
  ASSERT_EQ(one.size(), 1u);
  std::vector<int64_t> x = ids(one[0]);
  std::sort(x.begin(), x.end());
  EXPECT_EQ(x, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
  auto empty = numbered(0);
  EXPECT_TRUE(validation_batches(*empty, 16, 0, 1).empty());
}

}  // namespace
}  // namespace atl::data
