// docs/algorithms.md §9 oracle 1: outer Nesterov against its closed form, over two steps.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "algorithms/outer_optimizer.h"

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

}  // namespace
}  // namespace atl::algorithms
