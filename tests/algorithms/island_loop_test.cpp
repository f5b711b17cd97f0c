// The island loop's hooks (src/core/island_loop.h): an algorithm that replaces the inner
// optimizer step gets it, with the step's learning rate in the context, and the inner
// optimizer is not used.
#include <gtest/gtest.h>

#include <vector>

#include "tests/algorithms/quadratic_harness.h"

namespace atl::testing {
namespace {

// p <- p - lr * sign(g) instead of the inner optimizer; records the learning rates it saw.
class SignStep final : public algorithms::Algorithm {
 public:
  std::string name() const override { return "sign_step"; }
  void setup(algorithms::IslandContext& ctx) override { global_ = ctx.params; }
  bool replaces_inner_step() const override { return true; }
  void inner_step(algorithms::IslandContext& ctx, int64_t step) override {
    lrs.push_back(ctx.lr);
    ctx.params.sub_(ctx.grads.sign() * ctx.lr);
  }
  at::Tensor global_params() const override { return global_; }
  std::vector<double> lrs;

 private:
  at::Tensor global_;
};

TEST(IslandLoop, AnAlgorithmCanReplaceTheInnerStepAndSeesTheLearningRate) {
  config::TrainConfig train = sgd_train(0.1, 6);
  train.momentum = 0.9;  // the inner optimizer, if it ran, would move differently
  train.schedule = "cosine";
  train.warmup_steps = 2;
  at::manual_seed(5);
  const at::Tensor c = at::randn({64});
  at::Tensor params = at::zeros({64}), grads = at::zeros({64});
  SignStep algo;
  auto opt = train::make_inner_optimizer(train);
  algorithms::IslandContext ctx;
  ctx.params = params;
  ctx.grads = grads;
  core::IslandLoop loop;
  loop.algorithm = &algo;
  loop.context = &ctx;
  loop.optimizer = opt.get();
  loop.train = &train;
  loop.forward_backward = [&](int64_t) {
    grads.copy_(params - c);
    return 0.0;
  };
  EXPECT_EQ(core::run_island(loop), 6);

  at::Tensor want = at::zeros({64});
  std::vector<double> want_lrs;
  for (int64_t s = 1; s <= 6; ++s) {
    const double lr = train::learning_rate(train, s, 6);
    want_lrs.push_back(lr);
    want = want - (want - c).sign() * lr;
  }
  EXPECT_EQ(algo.lrs, want_lrs);
  EXPECT_TRUE(at::allclose(params, want, 0, 1e-6));
  EXPECT_GT(want_lrs[2], want_lrs[5]);  // the schedule moved: the hook saw each step's rate
}

}  // namespace
}  // namespace atl::testing
