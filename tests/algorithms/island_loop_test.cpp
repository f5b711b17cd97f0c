// The island loop's hooks (src/core/island_loop.h): an algorithm that replaces the inner
// optimizer step gets it, with the step's learning rate in the context, and the inner
// optimizer is not used; where the host's compute hook falls among the algorithm's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/algorithms/quadratic_harness.h"

namespace atl::testing {
namespace {

// An island loop running `algo` over [n] parameters and gradients (zeros first), with
// `train`'s inner optimizer; the test sets forward_backward and the other hooks.
struct Loop {
  Loop(algorithms::Algorithm& algo, const config::TrainConfig& t, int64_t n)
      : train(t), params(at::zeros({n})), grads(at::zeros({n})), optimizer(train::make_inner_optimizer(train)) {
    ctx.params = params;
    ctx.grads = grads;
    loop.algorithm = &algo;
    loop.context = &ctx;
    loop.optimizer = optimizer.get();
    loop.train = &train;
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  config::TrainConfig train;
  at::Tensor params, grads;
  std::unique_ptr<train::InnerOptimizer> optimizer;
  algorithms::IslandContext ctx;
  core::IslandLoop loop;
};

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
  SignStep algo;
  Loop l(algo, train, 64);
  const at::Tensor params = l.params;
  l.loop.forward_backward = [&](int64_t) {
    l.grads.copy_(params - c);
    return 0.0;
  };
  EXPECT_EQ(core::run_island(l.loop), 6);

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

// Writes the order of its hooks into `log`.
class HookLog final : public algorithms::Algorithm {
 public:
  explicit HookLog(std::vector<std::string>& log) : log_(log) {}
  std::string name() const override { return "hook_log"; }
  void setup(algorithms::IslandContext& ctx) override { global_ = ctx.params; }
  void after_backward(algorithms::IslandContext&, int64_t) override { log_.push_back("after_backward"); }
  bool replaces_inner_step() const override { return true; }
  void inner_step(algorithms::IslandContext&, int64_t) override { log_.push_back("inner_step"); }
  void after_inner_step(algorithms::IslandContext&, int64_t) override { log_.push_back("after_inner_step"); }
  at::Tensor global_params() const override { return global_; }

 private:
  std::vector<std::string>& log_;
  at::Tensor global_;
};

// The compute hook comes before any hook that may communicate; with compute_ends_after_step
// (the simulator's islands sharing one gradient), after the step, still before
// after_inner_step.
TEST(IslandLoop, TheComputeHookFallsAfterTheBackwardOrAfterTheStep) {
  for (const bool after_step : {false, true}) {
    std::vector<std::string> log;
    HookLog algo(log);
    Loop l(algo, sgd_train(0.1, 1), 4);
    l.loop.forward_backward = [&](int64_t) {
      log.push_back("forward_backward");
      return 0.0;
    };
    l.loop.after_compute = [&](int64_t) { log.push_back("compute"); };
    l.loop.compute_ends_after_step = after_step;
    EXPECT_EQ(core::run_island(l.loop), 1);
    const std::vector<std::string> want =
        after_step ? std::vector<std::string>{"forward_backward", "after_backward", "inner_step", "compute",
                                              "after_inner_step"}
                   : std::vector<std::string>{"forward_backward", "compute", "after_backward", "inner_step",
                                              "after_inner_step"};
    EXPECT_EQ(log, want) << "compute_ends_after_step " << after_step;
  }
}

}  // namespace
}  // namespace atl::testing
