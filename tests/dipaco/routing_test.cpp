// DiPaCo routing math (src/dipaco/routing.h) on synthetic features whose right answer is known
// by construction.
#include "src/dipaco/routing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "src/data/rng.h"

namespace atl::dipaco {
namespace {

// `per` rows around each of `centres` (rows of a [k, d] list), Gaussian noise of `sigma`;
// row i belongs to cluster i / per. Fixed seed: the same rows every run.
Matrix blobs(const std::vector<std::vector<double>>& centres, int per, double sigma, uint64_t seed) {
  const int64_t d = static_cast<int64_t>(centres[0].size());
  Matrix x(static_cast<int64_t>(centres.size()) * per, d);
  data::Rng rng(seed);
  for (size_t c = 0; c < centres.size(); ++c)
    for (int i = 0; i < per; ++i)
      for (int64_t j = 0; j < d; ++j) x.row(static_cast<int64_t>(c) * per + i)[j] = centres[c][j] + sigma * rng.normal();
  return x;
}

// Whether `got` is `truth` up to a renaming of the clusters (a bijection).
bool same_partition(const std::vector<int>& got, const std::vector<int>& truth) {
  if (got.size() != truth.size()) return false;
  std::map<int, int> fwd, back;
  for (size_t i = 0; i < got.size(); ++i) {
    auto [f, fnew] = fwd.emplace(truth[i], got[i]);
    auto [b, bnew] = back.emplace(got[i], truth[i]);
    if (f->second != got[i] || b->second != truth[i]) return false;
  }
  return true;
}

std::vector<int> truth_labels(int clusters, int per) {
  std::vector<int> t;
  for (int c = 0; c < clusters; ++c) t.insert(t.end(), static_cast<size_t>(per), c);
  return t;
}

TEST(KMeans, RecoversSeparableClusters) {
  const Matrix x = blobs({{0, 0, 0}, {10, 0, 0}, {0, 10, 0}, {0, 0, 10}}, 50, 1.0, 7);
  for (uint64_t seed : {1u, 2u, 3u}) {
    const KMeans km = kmeans(x, 4, seed);
    EXPECT_TRUE(same_partition(km.assignment, truth_labels(4, 50))) << "seed " << seed;
    EXPECT_EQ(nearest(x, km.centroids), km.assignment);
    // Each centroid is the mean of its rows: within a few sigma / sqrt(50) of a true centre.
    for (int64_t c = 0; c < 4; ++c) {
      double lo = 1e9;
      for (const auto& centre : std::vector<std::vector<double>>{{0, 0, 0}, {10, 0, 0}, {0, 10, 0}, {0, 0, 10}}) {
        double s = 0;
        for (int j = 0; j < 3; ++j) s += std::pow(km.centroids.row(c)[j] - centre[j], 2);
        lo = std::min(lo, std::sqrt(s));
      }
      EXPECT_LT(lo, 0.6) << "centroid " << c;
    }
  }
}

TEST(KMeans, SameSeedSameBitsAndEveryClusterUsed) {
  const Matrix x = blobs({{0, 0}, {3, 0}, {0, 3}}, 40, 1.5, 11);  // overlapping: a real fit
  const KMeans a = kmeans(x, 5, 42), b = kmeans(x, 5, 42);
  EXPECT_EQ(a.assignment, b.assignment);
  EXPECT_EQ(a.centroids.v, b.centroids.v);
  EXPECT_EQ(a.inertia, b.inertia);
  const std::vector<int64_t> sizes = shard_sizes(a.assignment, 5);
  for (int64_t s : sizes) EXPECT_GT(s, 0);
  // Identical rows: more clusters than distinct points still leaves none empty.
  Matrix same(6, 2);
  const KMeans c = kmeans(same, 3, 1);
  EXPECT_EQ(std::set<int>(c.assignment.begin(), c.assignment.end()).size(), 3u);
  EXPECT_THROW(kmeans(x, 0, 1), std::invalid_argument);
  EXPECT_THROW(kmeans(x, 121, 1), std::invalid_argument);
}

TEST(ProductKMeans, PathIsTheMixedRadixOfThePartsClusters) {
  // Four dimensions: the first two carry one of 2 clusters, the last two one of 3; the six
  // combinations are the six paths.
  std::vector<std::vector<double>> centres;
  std::vector<std::pair<int, int>> parts;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b) {
      centres.push_back({10.0 * a, -10.0 * a, 10.0 * b, 5.0 * b});
      parts.push_back({a, b});
    }
  const Matrix x = blobs(centres, 30, 0.8, 5);
  const ProductKMeans pk = product_kmeans(x, {2, 3}, 9);
  ASSERT_EQ(pk.bounds, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_TRUE(same_partition(pk.assignment, truth_labels(6, 30)));
  EXPECT_EQ(route(pk, x), pk.assignment);
  // path = id of part 0 * 3 + id of part 1
  for (int64_t i = 0; i < x.rows; ++i) {
    EXPECT_EQ(pk.assignment[i], pk.parts[0].assignment[i] * 3 + pk.parts[1].assignment[i]) << i;
  }
  EXPECT_EQ(std::set<int>(pk.assignment.begin(), pk.assignment.end()).size(), 6u);
}

// The discriminative step end to end: two paths, each better (lower loss) on the sequences
// whose feature z0 has its sign; the router learns the rule from the labels and assigns a new
// sequence to the path with the lower loss.
TEST(LinearRouter, AssignsASequenceToThePathWithTheLowerLoss) {
  data::Rng rng(3);
  const int n = 400;
  Matrix z(n, 3), losses(n, 2);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) z.row(i)[j] = rng.normal();
    // path 0 models sequences with z0 > 0 better, path 1 the others
    losses.row(i)[0] = 2.0 - 0.5 * z.row(i)[0] + 0.01 * rng.normal();
    losses.row(i)[1] = 2.0 + 0.5 * z.row(i)[0] + 0.01 * rng.normal();
  }
  const std::vector<int> labels = best_paths(losses);
  for (int i = 0; i < n; ++i) EXPECT_EQ(labels[i], losses.row(i)[0] <= losses.row(i)[1] ? 0 : 1);
  const LinearRouter r = fit_linear_router(z, labels, 2, {});
  const std::vector<int> routed = r.route(z);
  int agree = 0;
  for (int i = 0; i < n; ++i) agree += routed[i] == labels[i];
  EXPECT_GE(agree, n * 97 / 100) << "the router does not reproduce the labels it was fitted on";
  // New sequences, one clearly on each side.
  Matrix fresh(2, 3);
  fresh.row(0)[0] = 1.5;   // lower loss on path 0
  fresh.row(1)[0] = -1.5;  // lower loss on path 1
  EXPECT_EQ(r.route(fresh), (std::vector<int>{0, 1}));
}

TEST(LinearRouter, BiasKeepsThePathsShareAsTargeted) {
  // Labels from a skewed rule (path 0 gets ~84 %), target equal shares: the balanced router
  // routes half of the data to each path and still orders sequences by the learned score.
  data::Rng rng(8);
  const int n = 1000;
  Matrix z(n, 2);
  std::vector<int> labels(n);
  for (int i = 0; i < n; ++i) {
    z.row(i)[0] = rng.normal();
    z.row(i)[1] = rng.normal();
    labels[i] = z.row(i)[0] > -1.0 ? 0 : 1;
  }
  const std::vector<int64_t> skew = shard_sizes(labels, 2);
  EXPECT_GT(skew[0], 780);
  const LinearRouter unbalanced = fit_linear_router(z, labels, 2, {});
  const LinearRouter balanced = fit_linear_router(z, labels, 2, {0.5, 0.5});
  const std::vector<int64_t> sizes = shard_sizes(balanced.route(z), 2);
  EXPECT_NEAR(static_cast<double>(sizes[0]) / n, 0.5, 0.01);
  EXPECT_GT(shard_sizes(unbalanced.route(z), 2)[0], 700);
  // Same weights, only the biases moved.
  EXPECT_EQ(unbalanced.weight.v, balanced.weight.v);
  // Three paths, a third each, from labels that leave path 2 empty: no empty path.
  std::vector<int> two(n);
  for (int i = 0; i < n; ++i) two[i] = z.row(i)[1] > 0 ? 0 : 1;
  const LinearRouter three = fit_linear_router(z, two, 3, {1.0 / 3, 1.0 / 3, 1.0 / 3});
  for (int64_t s : shard_sizes(three.route(z), 3)) EXPECT_NEAR(static_cast<double>(s) / n, 1.0 / 3, 0.02);
}

}  // namespace
}  // namespace atl::dipaco
