// The flat inner optimizers against libtorch's own torch::optim implementations.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "src/train/inner_optimizer.h"

namespace atl::train {
namespace {

config::TrainConfig base() {
  config::TrainConfig c;
  c.lr = 1e-2;
  c.beta1 = 0.9;
  c.beta2 = 0.95;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  return c;
}

TEST(InnerOptimizer, AdamWMatchesTorchAdamW) {
  torch::manual_seed(0);
  config::TrainConfig c = base();
  at::Tensor p = torch::randn({300});
  at::Tensor ref = p.clone().set_requires_grad(true);
  torch::optim::AdamW torch_opt({ref}, torch::optim::AdamWOptions(c.lr).betas({c.beta1, c.beta2}).eps(c.eps).weight_decay(c.weight_decay));
  auto opt = make_inner_optimizer(c);
  for (int s = 0; s < 20; ++s) {
    at::Tensor g = torch::randn({300});
    ref.mutable_grad() = g.clone();
    torch_opt.step();
    opt->step(p, g, c.lr);
  }
  EXPECT_TRUE(torch::allclose(p, ref.detach(), 1e-5, 1e-6));
  EXPECT_EQ(opt->steps(), 20);
}

// AdamW computes its denominator a slice of 64K values at a time (one scratch slice per
// island instead of a parameter-sized buffer): bitwise the one-pass update, written here,
// over more than two slices and a ragged last one.
TEST(InnerOptimizer, AdamWSlicedDenominatorIsBitwiseOnePass) {
  torch::manual_seed(2);
  config::TrainConfig c = base();
  const int64_t n = 3 * (int64_t{1} << 16) + 1001;
  at::Tensor p = torch::randn({n});
  at::Tensor q = p.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  auto opt = make_inner_optimizer(c);
  for (int t = 1; t <= 5; ++t) {
    at::Tensor g = torch::randn({n});
    opt->step(p, g, c.lr);
    q.mul_(1 - c.lr * c.weight_decay);
    m.mul_(c.beta1).add_(g, 1 - c.beta1);
    v.mul_(c.beta2).addcmul_(g, g, 1 - c.beta2);
    const double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
    q.addcdiv_(m, v.sqrt().div_(std::sqrt(bc2)).add_(c.eps), -c.lr / bc1);
  }
  EXPECT_TRUE(torch::equal(p, q));
}

TEST(InnerOptimizer, SgdMomentumMatchesTorchSgd) {
  torch::manual_seed(1);
  config::TrainConfig c = base();
  c.optimizer = "sgd";
  c.momentum = 0.9;
  c.weight_decay = 0.01;
  at::Tensor p = torch::randn({100});
  at::Tensor ref = p.clone().set_requires_grad(true);
  torch::optim::SGD torch_opt({ref}, torch::optim::SGDOptions(c.lr).momentum(c.momentum).weight_decay(c.weight_decay));
  auto opt = make_inner_optimizer(c);
  for (int s = 0; s < 10; ++s) {
    at::Tensor g = torch::randn({100});
    ref.mutable_grad() = g.clone();
    torch_opt.step();
    opt->step(p, g, c.lr);
  }
  EXPECT_TRUE(torch::allclose(p, ref.detach(), 1e-5, 1e-6));
}

TEST(InnerOptimizer, ClipMatchesTorchClipGradNorm) {
  torch::manual_seed(2);
  at::Tensor g = torch::randn({1000}) * 3;
  at::Tensor ref = torch::zeros({1000}, torch::requires_grad());
  ref.mutable_grad() = g.clone();
  const double torch_norm = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{ref}, 1.0);
  const double norm = clip_grad_norm(g, 1.0);
  EXPECT_NEAR(norm, torch_norm, 1e-3);
  EXPECT_TRUE(torch::allclose(g, ref.grad(), 1e-5, 1e-6));
  EXPECT_NEAR(g.norm().item<double>(), 1.0, 1e-4);
  at::Tensor small = torch::full({4}, 0.1);
  clip_grad_norm(small, 1.0);
  EXPECT_TRUE(torch::equal(small, torch::full({4}, 0.1)));  // below the limit: untouched
}

TEST(LearningRate, WarmupThenCosineToFloor) {
  config::TrainConfig c = base();
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(c, 1, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(c, 5, 110), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10, 110), 1.0);
  EXPECT_NEAR(learning_rate(c, 60, 110), 0.55, 1e-12);  // halfway: floor + (1-floor)/2
  EXPECT_NEAR(learning_rate(c, 110, 110), 0.1, 1e-12);
  for (int s = 11; s < 110; ++s) EXPECT_GE(learning_rate(c, s, 110), learning_rate(c, s + 1, 110));
  c.schedule = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(c, 50, 110), 1.0);
}

// A checkpoint's state (steps() and state(), loaded into a fresh optimizer) continues
// bitwise like the optimizer it came from: AdamW (moments and step count) and SGD momentum.
TEST(InnerOptimizer, LoadedStateContinuesBitwise) {
  for (const char* name : {"adamw", "sgd"}) {
    torch::manual_seed(3);
    config::TrainConfig c = base();
    c.optimizer = name;
    c.momentum = 0.9;
    at::Tensor p = torch::randn({64});
    std::vector<at::Tensor> grads;
    for (int s = 0; s < 12; ++s) grads.push_back(torch::randn({64}));
    auto a = make_inner_optimizer(c);
    for (int s = 0; s < 5; ++s) a->step(p, grads[s], c.lr);
    auto b = make_inner_optimizer(c);
    std::vector<at::Tensor> saved;
    for (const auto& t : a->state()) saved.push_back(t.clone());
    b->load(a->steps(), saved);
    at::Tensor q = p.clone();
    for (int s = 5; s < 12; ++s) {
      a->step(p, grads[s], c.lr);
      b->step(q, grads[s], c.lr);
    }
    EXPECT_TRUE(torch::equal(p, q)) << name;
    EXPECT_EQ(b->steps(), 12) << name;
    // A fresh optimizer's (empty) state loads too.
    auto fresh = make_inner_optimizer(c);
    auto other = make_inner_optimizer(c);
    other->load(fresh->steps(), fresh->state());
    EXPECT_EQ(other->steps(), 0) << name;
  }
}

}  // namespace
}  // namespace atl::train
