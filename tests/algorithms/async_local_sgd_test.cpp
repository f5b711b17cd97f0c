// docs/algorithms.md §9 oracles 21–24 (asynchronous local-SGD: Delayed Nesterov, DyLU), and the
// workers + server role through the real island loop, in-process group and a virtual clock.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/async_local_sgd.h"
#include "algorithms/outer_optimizer.h"
#include "src/base/status.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

using async_local_sgd::DelayedNesterov;
using atl::testing::random_targets;
using atl::testing::run_quadratic;
using atl::testing::sgd_by_hand;
using atl::testing::sgd_train;

AlgorithmOptions async_options(int k, int64_t h, int64_t train_steps) {
  AsyncLocalSgdOptions a;
  a.inner_steps = h;
  a.outer = {OuterKind::kNesterov, 0.7, 0.9};
  a.min_local_steps = 1;
  AlgorithmOptions o = AlgorithmOptions::of(a);
  o.islands = k;
  o.train_steps = train_steps;
  return o;
}

// The async options of `o`.
AsyncLocalSgdOptions& own(AlgorithmOptions& o) { return o.get<AsyncLocalSgdOptions>(); }

// Oracle 21: DN with N = 1, c = 0 is PyTorch Nesterov applied per arrival.
TEST(DelayedNesterov, BufferOneIsNesterovPerArrival) {
  auto g = random_targets(5, 50, 1);
  at::Tensor dn_theta = at::randn({50}), nesterov_theta = dn_theta.clone();
  DelayedNesterov dn(0.7, 0.9, 1, 0.0);
  OuterOptimizer nesterov({OuterKind::kNesterov, 0.7, 0.9});
  for (const auto& gi : g) {
    dn.apply(dn_theta, gi);
    nesterov.step(nesterov_theta, gi);
    EXPECT_TRUE(at::allclose(dn_theta, nesterov_theta, 1e-5, 1e-6));
  }
  EXPECT_TRUE(at::allclose(dn.momentum(), nesterov.momentum(), 1e-5, 1e-6));
}

// Oracle 22: with c = 0, N arrivals g_1..g_N move theta by exactly
// eps ((1 + beta) mean(g) + beta^2 m_old) and leave m = beta m_old + mean(g); arrivals
// inside a cycle are plain SGD steps eps g / N.
TEST(DelayedNesterov, CycleOfNArrivalsIsOneNesterovStepOnTheMean) {
  const int n = 3;
  const double eps = 0.5, beta = 0.8;
  DelayedNesterov dn(eps, beta, n, 0.0);
  at::Tensor theta = at::randn({40});
  for (const auto& g : random_targets(n, 40, 2)) dn.apply(theta, g);  // m_old != 0
  const at::Tensor m_old = dn.momentum().clone();
  const at::Tensor before = theta.clone();
  auto g = random_targets(n, 40, 3);
  at::Tensor mean = at::zeros({40});
  for (int j = 0; j < n; ++j) {
    const at::Tensor prev = theta.clone();
    dn.apply(theta, g[j]);
    if (j < n - 1) {
      EXPECT_TRUE(at::allclose(prev - theta, eps * g[j] / n, 1e-5, 1e-6));
    }
    mean += g[j] / n;
  }
  EXPECT_TRUE(at::allclose(before - theta, eps * ((1 + beta) * mean + beta * beta * m_old), 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(dn.momentum(), beta * m_old + mean, 1e-5, 1e-6));
}

// Oracle 23: DyLU with speeds (1/0.58, 1/0.75, 1/1.51, 1/3.33) steps/s and H = 50.
TEST(AsyncLocalSgd, DynamicLocalUpdates) {
  const std::vector<double> speeds = {1 / 0.58, 1 / 0.75, 1 / 1.51, 1 / 3.33};
  const std::vector<int64_t> expected = {50, 38, 19, 8};
  AlgorithmOptions o = async_options(4, 50, 1000);
  o.speeds = speeds;
  own(o).min_local_steps = 5;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(async_local_sgd::dylu_local_steps(speeds[i], speeds[0], 50, 5), expected[i]);
    EXPECT_EQ(async_local_sgd::task_steps(o, i), expected[i]);
  }
  own(o).min_local_steps = 10;
  EXPECT_EQ(async_local_sgd::task_steps(o, 3), 10);  // the floor
  own(o).dynamic_local_updates = false;
  EXPECT_EQ(async_local_sgd::task_steps(o, 3), 50);
  // every island trains for about the fastest one's time: floor(1000 * speed / max)
  EXPECT_EQ(async_local_sgd::island_steps(o, 0, 1000), 1000);
  EXPECT_EQ(async_local_sgd::island_steps(o, 3, 1000), 174);  // 1000 * 0.58 / 3.33 = 174.2
}

// Oracle 24: Nesterov applied sequentially to k = 4 identical pseudo-gradients (eq. 5):
// m <- beta^4 m + (1 + beta + beta^2 + beta^3) g and a move of
// eps ((4 + 4 beta + 3 beta^2 + 2 beta^3 + beta^4) g + beta^2 (1 + beta + beta^2 + beta^3) m).
TEST(AsyncLocalSgd, SequentialNesterovAmplification) {
  const double eps = 0.7, b = 0.9;
  OuterOptimizer nesterov({OuterKind::kNesterov, eps, b});
  at::Tensor theta = at::randn({30});
  nesterov.step(theta, at::randn({30}));  // m_old != 0
  const at::Tensor m_old = nesterov.momentum().clone();
  const at::Tensor before = theta.clone();
  const at::Tensor g = at::randn({30});
  for (int j = 0; j < 4; ++j) nesterov.step(theta, g);
  const double geometric = 1 + b + b * b + b * b * b;
  const double amplified = 4 + 4 * b + 3 * b * b + 2 * b * b * b + std::pow(b, 4);
  EXPECT_TRUE(at::allclose(nesterov.momentum(), std::pow(b, 4) * m_old + geometric * g, 1e-5, 1e-6));
  EXPECT_TRUE(at::allclose(before - theta, eps * (amplified * g + b * b * geometric * m_old), 1e-4, 1e-5));
  // DN over the same four arrivals (N = 4, c = 0) moves by one Nesterov step on g instead.
  DelayedNesterov dn(eps, b, 4, 0.0);
  at::Tensor dn_theta = before.clone();
  for (int j = 0; j < 4; ++j) dn.apply(dn_theta, g);
  EXPECT_TRUE(at::allclose(before - dn_theta, eps * (1 + b) * g, 1e-5, 1e-6));
}

// Equal speeds, DN with N = islands and c = 0, and a grace window: all islands finish a
// task at the same virtual time, their pushes form one DN cycle and they all restart from
// its result, which is synchronous DiLoCo with Nesterov. Without the window the first
// pusher restarts from a model that has only its own update.
TEST(AsyncLocalSgd, GraceWindowWithDelayedNesterovEqualsDiLoCo) {
  const int k = 3, h = 5, steps = 15;
  auto c = random_targets(k, 25);
  at::Tensor theta0 = at::randn({25});
  AlgorithmOptions o = async_options(k, h, steps);
  own(o).grace_s = 0.5;
  auto async = run_quadratic(o, sgd_train(0.1, steps), c, theta0);
  AlgorithmOptions diloco = o;  // the same H and outer optimizer, synchronous
  DilocoOptions d;
  d.inner_steps = own(o).inner_steps;
  d.outer = own(o).outer;
  diloco.name = "diloco";
  diloco.params = d;
  auto sync = run_quadratic(diloco, sgd_train(0.1, steps), c, theta0);
  ASSERT_TRUE(async.server_global.defined());
  EXPECT_TRUE(at::allclose(async.server_global, sync.globals[0], 1e-5, 1e-6));
  EXPECT_EQ(async.server_rounds.back(), k * steps);  // local steps applied

  own(o).grace_s = 0;
  auto eager_pull = run_quadratic(o, sgd_train(0.1, steps), c, theta0);
  EXPECT_FALSE(at::allclose(eager_pull.server_global, sync.globals[0], 1e-4, 1e-4));
}

// Heterogeneous speeds (2, 1, 0.5), H = 8: islands run 20, 10, 5 steps in tasks of 8, 4, 2
// (the last one shorter); the server counts every applied local step.
TEST(AsyncLocalSgd, SpeedsSetTaskLengthsAndIslandSteps) {
  const int k = 3;
  AlgorithmOptions o = async_options(k, 8, 20);
  o.speeds = {2, 1, 0.5};
  auto c = random_targets(k, 12);
  auto run = run_quadratic(o, sgd_train(0.1, 20), c, at::zeros({12}));
  const std::vector<std::vector<int64_t>> task_ends = {{8, 16, 20}, {4, 8, 10}, {2, 4, 5}};
  for (int i = 0; i < k; ++i) {
    std::vector<int64_t> ends;
    for (const auto& r : run.rounds[i]) {
      ends.push_back(r.step);
      EXPECT_GT(r.bytes_sent, 0u);
      EXPECT_GT(r.bytes_received, 0u);  // the pull
    }
    EXPECT_EQ(ends, task_ends[i]) << "island " << i;
  }
  EXPECT_EQ(async_local_sgd::total_steps(o), 35);
  ASSERT_EQ(run.server_rounds.size(), 9u);
  EXPECT_EQ(run.server_rounds.back(), 35);
  for (size_t j = 1; j < run.server_rounds.size(); ++j) EXPECT_GT(run.server_rounds[j], run.server_rounds[j - 1]);
}

// Naive updates, one island, outer SGD lr 1: each arrival moves the server to the island's
// parameters, so the run equals the inner optimizer alone.
TEST(AsyncLocalSgd, NaiveOuterSgdLrOneWithOneIslandIsTheInnerOptimizer) {
  AlgorithmOptions o = async_options(1, 4, 14);
  own(o).async_update = AsyncUpdate::kNaive;
  own(o).outer = {OuterKind::kSgd, 1.0, 0.0};
  auto c = random_targets(1, 20);
  at::Tensor theta0 = at::randn({20});
  auto run = run_quadratic(o, sgd_train(0.1, 14), c, theta0);
  EXPECT_TRUE(at::allclose(run.server_global, sgd_by_hand(theta0, c[0], 0.1, 14), 1e-5, 1e-6));
}

TEST(AsyncLocalSgd, RejectsActivationAboveOneOverN) {
  AlgorithmOptions o = async_options(4, 10, 100);
  own(o).dn_c = 0.5;
  EXPECT_THROW(make_algorithm(o, 0), UserError);
  own(o).dn_c = 0.25;
  EXPECT_NO_THROW(make_algorithm(o, 0));
}

}  // namespace
}  // namespace atl::algorithms
