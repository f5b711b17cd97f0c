// docs/algorithms.md §9 oracle 1: outer Nesterov against its closed form, over two steps.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "algorithms/outer_optimizer.h"
#include "transport/shards.h"

namespace atl::algorithms {
namespace {

TEST(OuterOptimizer, NesterovMatchesClosedFormOverTwoSteps) {
  at::manual_seed(1);
  const double lr = 0.7, mu = 0.9;
  OuterOptimizer opt({OuterKind::kNesterov, lr, mu});
  at::Tensor theta = at::randn({257}, at::kDouble).to(at::kFloat);
  at::Tensor d1 = at::randn({257}), d2 = at::randn({257});

  // Closed form (async paper eq. 4): theta - lr*((1+mu)*D + mu^2*buf_old), buf = mu*buf + D.
  at::Tensor t = theta.to(at::kDouble), buf = at::zeros_like(t);
  for (const at::Tensor& d : {d1, d2}) {
    at::Tensor dd = d.to(at::kDouble);
    at::Tensor expected = t - lr * ((1 + mu) * dd + mu * mu * buf);
    buf = mu * buf + dd;
    t = expected;
    opt.step(theta, d);
    EXPECT_TRUE(at::allclose(theta.to(at::kDouble), expected, 1e-5, 1e-6));
  }
  EXPECT_TRUE(at::allclose(opt.momentum().to(at::kDouble), buf, 1e-5, 1e-6));
  EXPECT_EQ(opt.steps(), 2);
}

TEST(OuterOptimizer, SgdWithoutMomentumIsPlainStep) {
  OuterOptimizer opt({OuterKind::kSgd, 1.0, 0.0});
  at::Tensor theta = at::arange(5, at::kFloat), d = at::ones({5});
  opt.step(theta, d);
  EXPECT_TRUE(at::equal(theta, at::arange(5, at::kFloat) - 1));
}

TEST(OuterOptimizer, SgdMomentumAccumulates) {
  OuterOptimizer opt({OuterKind::kSgd, 0.5, 0.5});
  at::Tensor theta = at::zeros({3}), d = at::ones({3});
  opt.step(theta, d);  // buf = 1, theta = -0.5
  opt.step(theta, d);  // buf = 1.5, theta = -1.25
  EXPECT_TRUE(at::allclose(theta, at::full({3}, -1.25)));
}

TEST(OuterOptimizer, AdamFirstStepMovesByLrTimesSign) {
  // With bias correction, step 1 is lr * D / (|D| + eps): ~lr*sign(D) for |D| >> eps.
  OuterOptimizer opt({OuterKind::kAdam, 0.1, 0, 0.9, 0.999, 1e-8});
  at::Tensor theta = at::zeros({4});
  at::Tensor d = at::tensor({3.0f, -2.0f, 0.5f, -7.0f});
  opt.step(theta, d);
  EXPECT_TRUE(at::allclose(theta, -0.1 * d.sign(), 1e-5, 1e-6));
}

// The ranks of an island with a sharded exchange step their shards of each buffer
// (OuterOptimizer with OuterShards: update() on a narrow view of theta_g and of delta, each
// with its own state), and the run's parameters must stay bitwise those of the simulator,
// which steps whole buffers: the step is element-wise, and its shards' values must be the
// whole step's bit for bit, whatever the kind, the shard count, the sizes (tails off the
// vector width) and the intra-op threads (ATen's chunks fall elsewhere in a shard).
TEST(OuterOptimizer, ShardsOfAStepAreTheWholeStepBitwise) {
  const int threads_before = at::get_num_threads();
  for (const OuterOptimizerOptions& o : {OuterOptimizerOptions{OuterKind::kNesterov, 0.7, 0.9},
                                         OuterOptimizerOptions{OuterKind::kSgd, 0.5, 0.8},
                                         OuterOptimizerOptions{OuterKind::kAdam, 0.1, 0, 0.9, 0.95, 0.1}}) {
    for (const int64_t n : {int64_t{3 * 4096 + 17}, int64_t{4 * 40000 + 5}}) {
      for (const int shards : {2, 3}) {
        for (const int threads : {1, 2}) {
          at::set_num_threads(threads);
          at::manual_seed(n + shards);
          at::Tensor whole = at::randn({n});
          at::Tensor cut = whole.clone();
          OuterOptimizer one(o);
          std::vector<OuterOptimizer> parts(static_cast<size_t>(shards), OuterOptimizer(o));
          const std::vector<transport::ShardRange> ranges = transport::shard_ranges(n, shards);
          ASSERT_EQ(ranges.size(), static_cast<size_t>(shards));
          for (int step = 0; step < 3; ++step) {
            const at::Tensor delta = at::randn({n}) * 0.1;
            one.step(whole, delta);
            for (int r = 0; r < shards; ++r) {
              const transport::ShardRange s = ranges[static_cast<size_t>(r)];
              at::Tensor part = cut.narrow(0, s.begin, s.size);
              parts[static_cast<size_t>(r)].step(part, delta.narrow(0, s.begin, s.size));
            }
            ASSERT_TRUE(at::equal(whole, cut)) << "kind " << static_cast<int>(o.kind) << ", n " << n << ", "
                                               << shards << " shards, " << threads << " threads, step " << step;
          }
        }
      }
    }
  }
  at::set_num_threads(threads_before);
}

}  // namespace
}  // namespace atl::algorithms
