// docs/algorithms.md §9 oracles 2–7 (DiLoCo), through the real island loop and in-process group.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "algorithms/algorithm.h"
#include "tests/algorithms/quadratic_harness.h"
#include "compression/frame.h"
#include "transport/ring.h"

namespace atl::algorithms {
namespace {

using atl::testing::run_quadratic;
using atl::testing::sgd_train;

std::vector<at::Tensor> targets(int k, int64_t n, int64_t seed = 7) {
  at::manual_seed(seed);
  std::vector<at::Tensor> t;
  for (int i = 0; i < k; ++i) t.push_back(at::randn({n}));
  return t;
}

// θ after `steps` of inner SGD (lr) on f_i from theta0, computed by hand.
at::Tensor sgd_by_hand(at::Tensor theta, const at::Tensor& c, double lr, int steps) {
  theta = theta.clone();
  for (int s = 0; s < steps; ++s) theta = theta - lr * (theta - c);
  return theta;
}

AlgorithmOptions diloco(int k, int64_t h, OuterKind kind, double lr, double mu) {
  DilocoOptions d;
  d.inner_steps = h;
  d.outer = {kind, lr, mu};
  AlgorithmOptions o = AlgorithmOptions::of(d);
  o.islands = k;
  return o;
}

// Oracle 2: outer SGD lr 1, momentum 0, uniform weights -> global = mean of island params.
TEST(DiLoCo, OuterSgdLrOneIsParameterAveraging) {
  const int k = 3, h = 4;
  auto c = targets(k, 33);
  at::Tensor theta0 = at::zeros({33});
  auto run = run_quadratic(diloco(k, h, OuterKind::kSgd, 1.0, 0.0), sgd_train(0.1, h), c, theta0);
  at::Tensor mean = at::zeros({33});
  for (int i = 0; i < k; ++i) mean += sgd_by_hand(theta0, c[i], 0.1, h);
  mean /= k;
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::allclose(run.globals[i], mean, 1e-5, 1e-6)) << "island " << i;
    EXPECT_TRUE(at::equal(run.params[i], run.globals[i]));  // θ_i <- θ_g after the sync
  }
}

// Oracle 3: H = 1, inner SGD, outer SGD lr 1 == synchronous DDP SGD with averaged gradients.
TEST(DiLoCo, HOneWithOuterSgdEqualsDdp) {
  const int k = 4, steps = 12;
  auto c = targets(k, 50);
  at::Tensor theta0 = at::randn({50});
  auto local = run_quadratic(diloco(k, 1, OuterKind::kSgd, 1.0, 0.0), sgd_train(0.05, steps), c, theta0);
  AlgorithmOptions ddp = AlgorithmOptions::of(DdpOptions{});
  ddp.islands = k;
  auto sync = run_quadratic(ddp, sgd_train(0.05, steps), c, theta0);
  for (int i = 0; i < k; ++i) {
    EXPECT_TRUE(at::allclose(local.params[i], sync.params[i], 1e-5, 1e-6)) << "island " << i;
  }
  // and both differ from the start (the test would pass vacuously otherwise)
  EXPECT_FALSE(at::allclose(sync.params[0], theta0, 1e-3, 1e-3));
}

// Oracle 4: one island, outer SGD lr 1 == the inner optimizer alone (anchor follows it).
TEST(DiLoCo, SingleIslandOuterSgdLrOneEqualsInnerOptimizerAlone) {
  auto c = targets(1, 40);
  at::Tensor theta0 = at::randn({40});
  config::TrainConfig train = sgd_train(0.01, 15);
  train.optimizer = "adamw";
  train.weight_decay = 0.1;
  auto with = run_quadratic(diloco(1, 5, OuterKind::kSgd, 1.0, 0.0), train, c, theta0);
  AlgorithmOptions none = AlgorithmOptions::of(DdpOptions{});  // ddp with one island: no communication at all
  none.islands = 1;
  auto alone = run_quadratic(none, train, c, theta0);
  EXPECT_TRUE(at::allclose(with.params[0], alone.params[0], 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(alone.params[0], theta0, 1e-3, 1e-3));
}

// Oracle 5: shard-size weights equal to each other give the uniform result (bitwise);
// unequal weights give the weighted mean.
TEST(DiLoCo, WeightedAveragingWithEqualShardsEqualsUniform) {
  const int k = 3, h = 3;
  auto c = targets(k, 21);
  at::Tensor theta0 = at::zeros({21});
  auto opts = diloco(k, h, OuterKind::kSgd, 1.0, 0.0);
  auto uniform = run_quadratic(opts, sgd_train(0.2, h), c, theta0, {100, 100, 100});
  opts.get<DilocoOptions>().weight_by_shard = true;
  auto weighted = run_quadratic(opts, sgd_train(0.2, h), c, theta0, {100, 100, 100});
  EXPECT_TRUE(at::equal(uniform.globals[0], weighted.globals[0]));

  auto skewed = run_quadratic(opts, sgd_train(0.2, h), c, theta0, {100, 200, 700});
  at::Tensor expected = at::zeros({21});
  const double w[] = {0.1, 0.2, 0.7};
  for (int i = 0; i < k; ++i) expected += w[i] * sgd_by_hand(theta0, c[i], 0.2, h);
  EXPECT_TRUE(at::allclose(skewed.globals[0], expected, 1e-5, 1e-6));
}

// Oracle 6: a sync leaves the inner optimizer state bitwise unchanged; the anchor moves
// only at syncs. One island, hooks driven by hand.
TEST(DiLoCo, SyncLeavesInnerStateAloneAndAnchorMovesOnlyAtSyncs) {
  transport::Scheduler scheduler(1);
  transport::InprocHub hub(1, scheduler);
  auto group = hub.make_group(0);
  compression::Pipeline codec;
  at::Tensor params = at::randn({64}), grads = at::zeros({64}), c = at::randn({64});
  auto algo = make_algorithm(diloco(1, 4, OuterKind::kNesterov, 0.7, 0.9), 0);
  config::TrainConfig train = sgd_train(0.01, 12);
  train.optimizer = "adamw";
  auto opt = train::make_inner_optimizer(train);
  IslandContext ctx;
  ctx.params = params;
  ctx.grads = grads;
  ctx.group = group.get();
  ctx.codec = &codec;
  algo->setup(ctx);
  algo->planned_steps(12);
  at::Tensor anchor = algo->global_params().clone();
  int syncs = 0;
  for (int64_t step = 1; step <= 12; ++step) {
    grads.copy_(params - c);
    opt->step(params, grads, 0.01);
    std::vector<at::Tensor> before;
    for (auto& s : opt->state()) before.push_back(s.clone());
    algo->after_inner_step(ctx, step);
    auto after = opt->state();
    ASSERT_EQ(before.size(), after.size());
    for (size_t j = 0; j < before.size(); ++j) EXPECT_TRUE(at::equal(before[j], after[j]));
    const bool moved = !at::equal(anchor, algo->global_params());
    EXPECT_EQ(moved, step % 4 == 0) << "step " << step;
    if (moved) ++syncs;
    anchor = algo->global_params().clone();
  }
  EXPECT_EQ(syncs, 3);
}

// Oracle 7: one round = one all-reduce of N elements: over all islands, the ring sends
// 2 (W-1) N fp32 values; each island 2 (W-1)/W of that, up to chunk rounding.
TEST(DiLoCo, OneRoundCostsOneAllReduceOfNElements) {
  const int k = 4, h = 5;
  const int64_t n = 1001;  // not a multiple of W
  auto c = targets(k, n);
  at::Tensor theta0 = at::zeros({n});
  auto run = run_quadratic(diloco(k, h, OuterKind::kNesterov, 0.7, 0.9), sgd_train(0.1, 2 * h), c, theta0);
  uint64_t total = 0, total_received = 0;
  for (int i = 0; i < k; ++i) {
    ASSERT_EQ(run.rounds[i].size(), 2u);
    for (const auto& r : run.rounds[i]) {
      total_received += r.bytes_received;
      const double per_island = 2.0 * (k - 1) / k * n * 4 + 2.0 * (k - 1) * compression::kMinFrameHeaderBytes;
      EXPECT_NEAR(static_cast<double>(r.bytes_sent), per_island, 2.0 * (k - 1) * 4);
      EXPECT_EQ(r.contributors, k);
      total += r.bytes_sent;
    }
    EXPECT_EQ(run.bytes[i].sent, run.rounds[i][0].bytes_sent + run.rounds[i][1].bytes_sent);
  }
  // two rounds; each member sends 2(W-1) frames per round
  EXPECT_EQ(total, 2u * (2u * (k - 1) * n * 4 + 2u * k * (k - 1) * compression::kMinFrameHeaderBytes));
  EXPECT_EQ(total_received, total);
}

// Anchors stay bitwise identical on every island (replicated outer state, docs/algorithms.md §0).
TEST(DiLoCo, AnchorsBitwiseIdenticalAcrossIslands) {
  const int k = 5;
  auto c = targets(k, 300);
  auto run = run_quadratic(diloco(k, 3, OuterKind::kNesterov, 0.7, 0.9), sgd_train(0.1, 9), c,
                           at::randn({300}));
  for (int i = 1; i < k; ++i) EXPECT_TRUE(at::equal(run.globals[0], run.globals[i]));
}

// The simulator holds the anchor and outer momentum of islands in step once
// (algorithms/shared_tensors.h): every island ends with the same global tensor, and every
// number is bitwise that of islands that share nothing. With eager overlap each island's
// anchor takes its own fresh delta, so the anchors differ and stay each island's own.
TEST(DiLoCo, IslandsInStepHoldOneGlobalModelBitwiseAsUnshared) {
  auto c = targets(4, 300);
  const at::Tensor theta0 = at::randn({300});
  for (Overlap overlap : {Overlap::kNone, Overlap::kDelayed, Overlap::kEager}) {
    AlgorithmOptions o = diloco(4, 3, OuterKind::kNesterov, 0.7, 0.9);
    o.get<DilocoOptions>().overlap = overlap;
    const auto alone = run_quadratic(o, sgd_train(0.1, 10), c, theta0);
    const auto shared = atl::testing::run_quadratic_shared(o, sgd_train(0.1, 10), c, theta0);
    EXPECT_EQ(shared.one_global, overlap != Overlap::kEager) << static_cast<int>(overlap);
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(at::equal(shared.run.params[i], alone.params[i]));
      EXPECT_TRUE(at::equal(shared.run.globals[i], alone.globals[i]));
    }
  }
}

TEST(DiLoCo, FinalPartialRoundSyncs) {
  auto c = targets(2, 10);
  auto run = run_quadratic(diloco(2, 4, OuterKind::kSgd, 1.0, 0.0), sgd_train(0.1, 10), c, at::zeros({10}));
  ASSERT_EQ(run.rounds[0].size(), 3u);  // steps 4, 8 and the last step 10
  EXPECT_EQ(run.rounds[0].back().step, 10);
}

}  // namespace
}  // namespace atl::algorithms

namespace atl::algorithms {
namespace {

// With a lossy codec and error feedback, DiLoCo still converges to the average of the
// islands' targets on a quadratic, and ends closer to the lossless result than without it.
TEST(DiLoCo, ErrorFeedbackCompensatesLossyCompression) {
  const int k = 3, h = 2, rounds = 30;
  auto c = targets(k, 512, 21);
  at::Tensor theta0 = at::zeros({512});
  auto opts = diloco(k, h, OuterKind::kNesterov, 0.7, 0.9);
  compression::StageConfig st;
  st.id = compression::StageId::kInt4;
  st.block = 128;
  auto int4 = compression::Pipeline::make({st}).value();
  auto exact = run_quadratic(opts, sgd_train(0.2, h * rounds), c, theta0);
  opts.get<DilocoOptions>().error_feedback = true;
  auto with = atl::testing::run_quadratic(opts, sgd_train(0.2, h * rounds), c, theta0, {}, &int4);
  opts.get<DilocoOptions>().error_feedback = false;
  auto without = atl::testing::run_quadratic(opts, sgd_train(0.2, h * rounds), c, theta0, {}, &int4);
  const double err_with = (with.globals[0] - exact.globals[0]).norm().item<double>();
  const double err_without = (without.globals[0] - exact.globals[0]).norm().item<double>();
  EXPECT_LT(err_with, err_without);
  for (int i = 1; i < k; ++i) EXPECT_TRUE(at::equal(with.globals[i], with.globals[0]));
}

}  // namespace
}  // namespace atl::algorithms
