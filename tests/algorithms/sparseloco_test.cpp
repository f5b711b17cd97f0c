// SparseLoCo (algorithms/sparseloco.cpp, docs/algorithms.md §13) against a float64 oracle
// written here from the paper's rule: error feedback, top-k per tile, the mean over all
// islands (or, with aggregation: mean_selected, over the islands that selected a position),
// theta_g <- theta_g - alpha U. Real island loop, scheduler and in-process group.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "algorithms/algorithm.h"
#include "compression/lut2.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

using Vec = std::vector<double>;

// The element indices of every tile, each tile's in tile-local order: a [rows, cols] tensor
// in tiles of n1 x n2 (row-major tiles, row-major inside), a 1-D one in runs of n2.
std::vector<std::vector<int64_t>> tiles_of(int64_t offset, int64_t rows, int64_t cols, int64_t n1, int64_t n2) {
  std::vector<std::vector<int64_t>> tiles;
  for (int64_t tr = 0; tr < rows / n1; ++tr) {
    for (int64_t tc = 0; tc < cols / n2; ++tc) {
      std::vector<int64_t> t;
      for (int64_t r = 0; r < n1; ++r)
        for (int64_t c = 0; c < n2; ++c) t.push_back(offset + (tr * n1 + r) * cols + tc * n2 + c);
      tiles.push_back(t);
    }
  }
  return tiles;
}

Vec to_vec(const at::Tensor& t) {
  const at::Tensor d = t.to(at::kDouble).contiguous();
  return Vec(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// Every test's model: a [8, 12] matrix in 4 x 4 tiles and a [10] vector in runs of 2.
const std::vector<ParamRange> kLayout = {{0, 96, -1, {8, 12}, 0}, {96, 10, -1, {10}, 0}};

// SparseLoCo over kLayout's tiles (chunk 4) with H inner steps, top-k, alpha and beta.
AlgorithmOptions sparseloco(int64_t h, int64_t k, double alpha, double beta) {
  SparseLocoOptions s;
  s.inner_steps = h;
  s.outer_lr = alpha;
  s.decay = beta;
  s.chunk = 4;
  s.topk = k;
  return AlgorithmOptions::of(s);
}

// theta_g after `rounds` rounds of H SGD steps (lr) on 0.5 ||theta - c_i||^2 per island.
Vec oracle(const Vec& theta0, const std::vector<Vec>& targets, const std::vector<std::vector<int64_t>>& tiles,
           int64_t k, double lr, int64_t h, int rounds, double alpha, double beta, bool mean_selected) {
  const size_t n = theta0.size(), islands = targets.size();
  Vec global = theta0;
  std::vector<Vec> error(islands, Vec(n, 0.0));
  for (int r = 0; r < rounds; ++r) {
    Vec sum(n, 0.0), count(n, 0.0);
    for (size_t i = 0; i < islands; ++i) {
      Vec theta = global;
      for (int64_t s = 0; s < h; ++s)
        for (size_t j = 0; j < n; ++j) theta[j] -= lr * (theta[j] - targets[i][j]);
      for (size_t j = 0; j < n; ++j) error[i][j] = beta * error[i][j] + (global[j] - theta[j]);
      for (const auto& tile : tiles) {
        std::vector<size_t> order(tile.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
          return std::fabs(error[i][tile[a]]) > std::fabs(error[i][tile[b]]);
        });
        for (int64_t q = 0; q < std::min<int64_t>(k, static_cast<int64_t>(tile.size())); ++q) {
          const int64_t j = tile[order[q]];
          sum[j] += error[i][j];
          count[j] += 1;
          error[i][j] = 0;  // lossless values: e - decode(m) = 0 where sent
        }
      }
    }
    for (size_t j = 0; j < n; ++j) {
      const double u = mean_selected ? (count[j] > 0 ? sum[j] / count[j] : 0.0) : sum[j] / static_cast<double>(islands);
      global[j] -= alpha * u;
    }
  }
  return global;
}

TEST(SparseLoCo, MatchesAFloat64OracleForBothAggregations) {
  // A [8, 12] matrix in 4 x 4 tiles (k = 3 of 16) and a [10] vector in runs of 2 (all sent).
  const std::vector<ParamRange>& layout = kLayout;
  auto tiles = tiles_of(0, 8, 12, 4, 4);
  for (auto& t : tiles_of(96, 1, 10, 1, 2)) tiles.push_back(t);
  const auto targets = testing::random_targets(3, 106, 5);
  at::manual_seed(9);
  const at::Tensor theta0 = at::randn({106});
  std::vector<Vec> target_vecs;
  for (const auto& t : targets) target_vecs.push_back(to_vec(t));

  std::vector<Vec> finals;
  for (bool selected : {false, true}) {
    AlgorithmOptions o = sparseloco(2, 3, 0.8, 0.9);
    o.get<SparseLocoOptions>().aggregation = selected ? Aggregation::kMeanSelected : Aggregation::kMeanAll;
    const auto run = testing::run_quadratic(o, testing::sgd_train(0.1, 6), targets, theta0, {}, nullptr, layout);
    const Vec want = oracle(to_vec(theta0), target_vecs, tiles, 3, 0.1, 2, 3, 0.8, 0.9, selected);
    for (int i = 0; i < 3; ++i) {
      const Vec got = to_vec(run.globals[i]);
      for (size_t j = 0; j < want.size(); ++j) {
        ASSERT_NEAR(got[j], want[j], 1e-5) << (selected ? "mean_selected" : "mean_all") << " island " << i
                                           << " element " << j;
      }
      EXPECT_TRUE(at::equal(run.globals[i], run.globals[0])) << "islands apply the same update";
      EXPECT_TRUE(at::equal(run.params[i], run.globals[i])) << "theta_i <- theta_g after the last round";
      ASSERT_EQ(run.rounds[i].size(), 3u);
    }
    finals.push_back(want);
  }
  // The two rules differ where islands selected different positions.
  double gap = 0;
  for (size_t j = 0; j < finals[0].size(); ++j) gap = std::max(gap, std::fabs(finals[0][j] - finals[1][j]));
  EXPECT_GT(gap, 1e-3);
}

// With k = the tile size nothing is left out: e is emptied every round, and the update is
// the mean pseudo-gradient, so SparseLoCo is DiLoCo with outer SGD at lr alpha and no momentum
// (the same numbers up to the order of float additions).
TEST(SparseLoCo, SendingEverythingIsDiLoCoWithPlainOuterSgd) {
  const std::vector<ParamRange>& layout = kLayout;
  const auto targets = testing::random_targets(3, 106, 8);
  at::manual_seed(2);
  const at::Tensor theta0 = at::randn({106});
  AlgorithmOptions s = sparseloco(3, 16, 0.9, 0.5);
  DilocoOptions plain;
  plain.inner_steps = 3;
  plain.outer.kind = OuterKind::kSgd;
  plain.outer.lr = 0.9;
  plain.outer.momentum = 0;
  const AlgorithmOptions d = AlgorithmOptions::of(plain);
  const auto a = testing::run_quadratic(s, testing::sgd_train(0.1, 9), targets, theta0, {}, nullptr, layout);
  const auto b = testing::run_quadratic(d, testing::sgd_train(0.1, 9), targets, theta0, {}, nullptr, layout);
  EXPECT_TRUE(at::allclose(a.globals[0], b.globals[0], 1e-5, 1e-6))
      << (a.globals[0] - b.globals[0]).abs().max().item<double>();
  EXPECT_FALSE(at::allclose(a.globals[0], theta0, 1e-3, 1e-3)) << "the runs moved";
}

// Its global model held once for islands in step: the same tensor on every island, every
// number bitwise as without sharing.
TEST(SparseLoCo, IslandsInStepHoldOneGlobalModelBitwiseAsUnshared) {
  const auto targets = testing::random_targets(3, 106, 6);
  const at::Tensor theta0 = at::randn({106});
  const AlgorithmOptions o = sparseloco(2, 3, 1.0, 0.95);
  const auto alone = testing::run_quadratic(o, testing::sgd_train(0.1, 6), targets, theta0, {}, nullptr, kLayout);
  const auto shared = testing::run_quadratic_shared(o, testing::sgd_train(0.1, 6), targets, theta0, kLayout);
  EXPECT_TRUE(shared.one_global);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(at::equal(shared.run.params[i], alone.params[i]));
    EXPECT_TRUE(at::equal(shared.run.globals[i], alone.globals[i]));
  }
}

// Each island sends indices (12 bits each in a 64 x 64 tile, here 4 bits in a 4 x 4 tile)
// and per tensor a u32 size plus one codec frame of its values; lut2 makes them 2 bits each.
TEST(SparseLoCo, Lut2ValuesShrinkTheMessageAndKeepIslandsIdentical) {
  const std::vector<ParamRange>& layout = kLayout;
  const auto targets = testing::random_targets(3, 106, 5);
  const at::Tensor theta0 = at::zeros({106});
  AlgorithmOptions o = sparseloco(2, 3, 1.0, 0.95);
  const auto raw = testing::run_quadratic(o, testing::sgd_train(0.1, 2), targets, theta0, {}, nullptr, layout);
  auto lut2 = compression::Pipeline::make({compression::StageConfig{compression::StageId::kLut2}});
  ASSERT_TRUE(lut2.is_ok());
  const auto small = testing::run_quadratic(o, testing::sgd_train(0.1, 2), targets, theta0, {}, &*lut2, layout);
  ASSERT_EQ(raw.rounds[0].size(), 1u);
  ASSERT_EQ(small.rounds[0].size(), 1u);
  // Tensor 0 sends 6 tiles x 3 values, tensor 1 all 10; the messages differ by the frames of
  // those values only (the same indices, the same u32 sizes), each sent to 2 peers.
  const compression::Pipeline fp32;
  auto frame = [](const compression::Pipeline& p, int64_t n) {
    std::vector<uint8_t> out;
    p.encode(at::zeros({n}), out);
    return static_cast<int64_t>(out.size());
  };
  EXPECT_EQ(frame(*lut2, 18), frame(fp32, 0) + 1 + 20 + 5) << "frame header, stage id, shift and table, codes";
  const int64_t saved = 2 * (frame(fp32, 18) - frame(*lut2, 18) + frame(fp32, 10) - frame(*lut2, 10));
  EXPECT_EQ(static_cast<int64_t>(raw.rounds[0][0].bytes_sent - small.rounds[0][0].bytes_sent), saved);
  // fp32 frames hold 4 bytes a value; lut2's one more header byte, 20 of table, 2 bits a value
  EXPECT_EQ(saved, 2 * ((4 * 18 - 1 - 20 - 5) + (4 * 10 - 1 - 20 - 3)));
  for (int i = 1; i < 3; ++i) EXPECT_TRUE(at::equal(small.globals[i], small.globals[0]));
  EXPECT_FALSE(at::equal(small.globals[0], raw.globals[0])) << "2-bit values change the update";
}

// Lossy values: e keeps what the others did not see. One island, one round from e = 0, so
// U = decode(m) and theta_g = theta_0 - U. Then e + U = Delta everywhere (e = Delta - U where
// sent, Delta elsewhere), Delta read off a lossless run (theta_0 - theta_g + e there), and U at
// the sent positions is lut2's decode of Delta's values there, tensor by tensor.
TEST(SparseLoCo, ErrorFeedbackKeepsTheQuantisationError) {
  const std::vector<ParamRange>& layout = kLayout;
  const auto targets = testing::random_targets(1, 106, 3);
  at::manual_seed(4);
  const at::Tensor theta0 = at::randn({106});
  AlgorithmOptions o = sparseloco(3, 3, 1.0, 0.95);
  at::Tensor error;
  testing::HarnessHooks hooks;
  hooks.at_end = [&](int, const Algorithm& a) { error = a.state().tensor("error").clone(); };
  const auto raw = testing::run_quadratic(o, testing::sgd_train(0.1, 3), targets, theta0, {}, nullptr, layout, hooks);
  const at::Tensor e_raw = error;
  auto lut2 = compression::Pipeline::make({compression::StageConfig{compression::StageId::kLut2}});
  ASSERT_TRUE(lut2.is_ok());
  const auto lossy = testing::run_quadratic(o, testing::sgd_train(0.1, 3), targets, theta0, {}, &*lut2, layout, hooks);
  const at::Tensor delta = (theta0 - raw.globals[0]) + e_raw;
  const at::Tensor u = theta0 - lossy.globals[0];
  EXPECT_TRUE(at::allclose(error + u, delta, 1e-5, 1e-6)) << "e must be Delta minus the decoded message";
  EXPECT_GT((error - e_raw).abs().max().item<double>(), 1e-4) << "lut2 leaves an error where raw leaves 0";
  // Sent positions: where the lossless run left e = 0. Per tensor, in tile order.
  std::vector<std::vector<int64_t>> tensors = {{}, {}};
  for (const auto& t : tiles_of(0, 8, 12, 4, 4))
    for (int64_t j : t) tensors[0].push_back(j);
  for (int64_t j = 96; j < 106; ++j) tensors[1].push_back(j);
  const Vec d = to_vec(delta), ur = to_vec(u), er = to_vec(e_raw);
  for (const auto& positions : tensors) {
    std::vector<int64_t> sent;
    std::vector<float> values;
    for (int64_t j : positions)
      if (er[j] == 0) {
        sent.push_back(j);
        values.push_back(static_cast<float>(d[j]));
      }
    ASSERT_FALSE(sent.empty());
    std::vector<uint8_t> bytes(compression::lut2::encoded_size(static_cast<int64_t>(values.size())));
    compression::lut2::encode(values.data(), static_cast<int64_t>(values.size()), bytes.data());
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(compression::lut2::decode(bytes.data(), bytes.size(), static_cast<int64_t>(values.size()),
                                          decoded.data()).is_ok());
    for (size_t q = 0; q < sent.size(); ++q) EXPECT_NEAR(ur[sent[q]], decoded[q], 1e-5) << "position " << sent[q];
  }
}

}  // namespace
}  // namespace atl::algorithms
