// The outer optimizer: treats the averaged pseudo-gradient Δ as a gradient of θ_g.
// ALGORITHMS.md §0: Nesterov exactly as torch.optim.SGD(momentum=mu, nesterov=True):
//   buf <- mu*buf + Δ;  θ_g <- θ_g - lr*(Δ + mu*buf)
// SGD (momentum mu, no nesterov): buf <- mu*buf + Δ; θ_g <- θ_g - lr*buf (mu = 0: -lr*Δ).
// Adam: standard bias-corrected Adam with eps (DiLoCo: large eps, e.g. 0.1).
// State: momentum buffer [N] (nesterov/sgd), two moments [N] + step (adam).
// Owned by one island (or the server); not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include "algorithms/options.h"

namespace atl::algorithms {

class OuterOptimizer {
 public:
  explicit OuterOptimizer(OuterOptimizerOptions options) : options_(options) {}
  // theta_g -= update(delta). Both [N] float32 on the same device. Under no-grad.
  void step(at::Tensor& theta_g, const at::Tensor& delta);
  int64_t steps() const { return steps_; }
  const at::Tensor& momentum() const { return buf_; }

 private:
  OuterOptimizerOptions options_;
  at::Tensor buf_;  // nesterov/sgd momentum; adam first moment
  at::Tensor v_;    // adam second moment
  int64_t steps_ = 0;
};

}  // namespace atl::algorithms
