#include "src/core/island_loop.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace atl::core {

int64_t run_island(IslandLoop& loop) {
  auto& algo = *loop.algorithm;
  auto& ctx = *loop.context;
  const auto& train = *loop.train;
  algo.setup(ctx);
  if (loop.after_setup) loop.after_setup();
  const int64_t total = algo.planned_steps(train.steps);
  for (int64_t step = loop.first_step; step <= total; ++step) {
    algo.before_step(ctx, step);
    {
      at::NoGradGuard no_grad;
      ctx.grads.zero_();
    }
    const double loss = loop.forward_backward(step);
    if (loop.after_compute && !loop.compute_ends_after_step) loop.after_compute(step);
    const double lr = train::learning_rate(train, step, total);
    ctx.lr = lr;
    algo.after_backward(ctx, step);
    train::clip_grad_norm(ctx.grads, train.grad_clip);
    if (algo.replaces_inner_step()) algo.inner_step(ctx, step);
    else loop.optimizer->step(ctx.params, ctx.grads, lr);
    if (loop.after_compute && loop.compute_ends_after_step) loop.after_compute(step);
    algo.after_inner_step(ctx, step);
    if (loop.on_step) loop.on_step(step, total, loss, lr);
  }
  algo.finish(ctx);
  return total;
}

}  // namespace atl::core
