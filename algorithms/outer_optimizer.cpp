#include "algorithms/outer_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>

namespace atl::algorithms {

void OuterOptimizer::save(NamedState& s, const std::string& prefix) const {
  s.add(prefix + ".steps", steps_).add(prefix + ".momentum", buf_).add(prefix + ".second_moment", v_);
}

void OuterOptimizer::load(const NamedState& s, const std::string& prefix, c10::Device device) {
  const int64_t steps = s.integer(prefix + ".steps");
  auto copy = [&](const std::string& name) {
    const at::Tensor& t = s.tensor(prefix + "." + name);
    return t.defined() ? t.to(device, /*non_blocking=*/false, /*copy=*/true) : at::Tensor();
  };
  at::Tensor buf = copy("momentum"), v = copy("second_moment");
  steps_ = steps;
  buf_ = std::move(buf);
  v_ = std::move(v);
}

void OuterOptimizer::step(at::Tensor& theta_g, const at::Tensor& delta) {
  writable(shared_, buf_);
  writable(shared_, v_);
  update(theta_g, delta);
  buf_ = share(shared_, buf_);
  v_ = share(shared_, v_);
}

void OuterOptimizer::update(at::Tensor& theta_g, const at::Tensor& delta) {
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
