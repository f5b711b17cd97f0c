#include "algorithms/outer_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>

namespace atl::algorithms {

void OuterOptimizer::load(int64_t steps, const std::vector<at::Tensor>& state) {
  TORCH_CHECK(state.size() == 2, "outer optimizer state: expected 2 tensors, got ", state.size());
  steps_ = steps;
  buf_ = state[0].defined() ? state[0].clone() : at::Tensor();
  v_ = state[1].defined() ? state[1].clone() : at::Tensor();
}

std::vector<at::Tensor> OuterOptimizer::handover() const {
  return {buf_, v_, at::scalar_tensor(static_cast<double>(steps_), at::kDouble)};
}

void OuterOptimizer::load_handover(const at::Tensor* three) { load(three[2].item<int64_t>(), {three[0], three[1]}); }

void OuterOptimizer::step(at::Tensor& theta_g, const at::Tensor& delta) {
  at::NoGradGuard no_grad;
  ++steps_;
  const double lr = options_.lr;
  switch (options_.kind) {
    case OuterKind::kNesterov:
    case OuterKind::kSgd: {
      const double mu = options_.momentum;
      if (mu == 0.0) {
        theta_g.sub_(delta, lr);
        return;
      }
      if (!buf_.defined()) buf_ = at::zeros_like(delta);
      buf_.mul_(mu).add_(delta);
      if (options_.kind == OuterKind::kNesterov) {
        theta_g.sub_(delta, lr).sub_(buf_, lr * mu);
      } else {
        theta_g.sub_(buf_, lr);
      }
      return;
    }
    case OuterKind::kAdam: {
      if (!buf_.defined()) {
        buf_ = at::zeros_like(delta);
        v_ = at::zeros_like(delta);
      }
      const double b1 = options_.beta1, b2 = options_.beta2;
      buf_.mul_(b1).add_(delta, 1 - b1);
      v_.mul_(b2).addcmul_(delta, delta, 1 - b2);
      const double bc1 = 1 - std::pow(b1, static_cast<double>(steps_));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(steps_));
      at::Tensor denom = (v_ / bc2).sqrt_().add_(options_.eps);
      theta_g.addcdiv_(buf_, denom, -lr / bc1);
      return;
    }
  }
}

}  // namespace atl::algorithms
