// docs/algorithms.md §9 oracle 13 (eager updates) and the delayed / eager DiLoCo variants (§3),
// through the real island loop and in-process group.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/diloco.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

using atl::testing::random_targets;
using atl::testing::run_quadratic;
using atl::testing::sgd_by_hand;
using atl::testing::sgd_train;

AlgorithmOptions overlapped(int k, int64_t h, Overlap overlap, OuterOptimizerOptions outer) {
  DilocoOptions d;
  d.inner_steps = h;
  d.overlap = overlap;
  d.outer = outer;
  AlgorithmOptions o = AlgorithmOptions::of(d);
  o.islands = k;
  return o;
}

at::Tensor mean_of(const std::vector<at::Tensor>& xs) {
  at::Tensor m = at::zeros_like(xs[0]);
  for (const auto& x : xs) m += x;
  return m / static_cast<double>(xs.size());
}

// Oracle 13: the incremental form Delta(t-1) + (delta_m(t) - delta_m(t-1)) / M equals the
// explicit form (delta_m(t) + sum_{m' != m} delta_m'(t-1)) / M.
TEST(EagerDiLoCo, IncrementalFormEqualsExplicitForm) {
  const int m = 4;
  auto prev = random_targets(m, 257, 1);
  auto now = random_targets(m, 257, 2);
  const at::Tensor mean_prev = mean_of(prev);
  for (int i = 0; i < m; ++i) {
    at::Tensor explicit_form = now[i].clone();
    for (int j = 0; j < m; ++j) {
      if (j != i) explicit_form += prev[j];
    }
    explicit_form /= m;
    EXPECT_TRUE(at::allclose(diloco::eager_delta(mean_prev, prev[i], now[i], 1.0 / m), explicit_form,
                             1e-5, 1e-6))
        << "worker " << i;
  }
}

// Oracle 13: when no worker's delta changes between rounds, the eager delta is the
// average DiLoCo would use.
TEST(EagerDiLoCo, UnchangedDeltasGiveTheDiLoCoAverage) {
  const int m = 3;
  auto d = random_targets(m, 100, 4);
  const at::Tensor mean = mean_of(d);
  for (int i = 0; i < m; ++i) {
    EXPECT_TRUE(at::allclose(diloco::eager_delta(mean, d[i], d[i], 1.0 / m), mean, 1e-6, 1e-7));
  }
}

// Oracle 13: M = 1 -> eager is DiLoCo, bitwise (same anchor, same parameters).
TEST(EagerDiLoCo, OneIslandEqualsDiLoCoBitwise) {
  auto c = random_targets(1, 64);
  at::Tensor theta0 = at::randn({64});
  config::TrainConfig train = sgd_train(0.05, 11);
  train.optimizer = "adamw";
  const OuterOptimizerOptions nesterov{OuterKind::kNesterov, 0.7, 0.9};
  auto eager = run_quadratic(overlapped(1, 3, Overlap::kEager, nesterov), train, c, theta0);
  auto plain = run_quadratic(overlapped(1, 3, Overlap::kNone, nesterov), train, c, theta0);
  EXPECT_TRUE(at::equal(eager.globals[0], plain.globals[0]));
  EXPECT_TRUE(at::equal(eager.params[0], plain.params[0]));
  EXPECT_FALSE(at::allclose(plain.globals[0], theta0, 1e-3, 1e-3));
}

// Delayed: the outer step at the end of round t uses Delta(t-1) (Delta(0) = 0); the last
// round's average is completed but not applied. Recomputed by hand with outer SGD.
TEST(DelayedDiLoCo, MatchesTheOneRoundStaleRecursion) {
  const int k = 3, h = 3, rounds = 4;
  const double lr = 0.1, outer_lr = 0.7;
  auto c = random_targets(k, 40);
  at::Tensor theta0 = at::randn({40});
  auto run = run_quadratic(overlapped(k, h, Overlap::kDelayed, {OuterKind::kSgd, outer_lr, 0.0}),
                           sgd_train(lr, h * rounds), c, theta0);
  at::Tensor anchor = theta0.clone(), stale = at::zeros({40});
  for (int t = 0; t < rounds; ++t) {
    std::vector<at::Tensor> deltas;
    for (int i = 0; i < k; ++i) deltas.push_back(anchor - sgd_by_hand(anchor, c[i], lr, h));
    anchor = anchor - outer_lr * stale;
    stale = mean_of(deltas);
  }
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::allclose(run.globals[i], anchor, 1e-5, 1e-6)) << "island " << i;
    EXPECT_TRUE(at::equal(run.globals[i], run.globals[0]));  // replicated state stays identical
    EXPECT_TRUE(at::equal(run.params[i], run.globals[i]));
    ASSERT_EQ(run.rounds[i].size(), static_cast<size_t>(rounds));  // the last one in finish()
    EXPECT_EQ(run.rounds[i][0].step, 2 * h);  // round 1's average is applied after round 2
    EXPECT_EQ(run.rounds[i][0].contributors, k);
  }
}

// Eager: each island replaces its stale contribution by its fresh one and keeps its own
// anchor. Recomputed by hand with outer SGD, island by island.
TEST(EagerDiLoCo, MatchesTheEagerRecursion) {
  const int k = 3, h = 2, rounds = 5;
  const double lr = 0.1, outer_lr = 0.7;
  auto c = random_targets(k, 30, 9);
  at::Tensor theta0 = at::randn({30});
  auto run = run_quadratic(overlapped(k, h, Overlap::kEager, {OuterKind::kSgd, outer_lr, 0.0}),
                           sgd_train(lr, h * rounds), c, theta0);
  std::vector<at::Tensor> anchors(k, theta0), own(k, at::zeros({30}));
  at::Tensor stale = at::zeros({30});
  for (int t = 0; t < rounds; ++t) {
    std::vector<at::Tensor> deltas;
    for (int i = 0; i < k; ++i) {
      at::Tensor fresh = anchors[i] - sgd_by_hand(anchors[i], c[i], lr, h);
      anchors[i] = anchors[i] - outer_lr * (stale + (fresh - own[i]) / k);
      deltas.push_back(fresh);
    }
    stale = mean_of(deltas);
    own = deltas;
  }
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::allclose(run.globals[i], anchors[i], 1e-5, 1e-6)) << "island " << i;
  }
  EXPECT_FALSE(at::allclose(run.globals[0], run.globals[1], 1e-4, 1e-4));  // own anchors
}

}  // namespace
}  // namespace atl::algorithms
