// The outer optimizer: treats the averaged pseudo-gradient Δ as a gradient of θ_g.
// docs/algorithms.md §0: Nesterov exactly as torch.optim.SGD(momentum=mu, nesterov=True):
//   buf <- mu*buf + Δ;  θ_g <- θ_g - lr*(Δ + mu*buf)
// SGD (momentum mu, no nesterov): buf <- mu*buf + Δ; θ_g <- θ_g - lr*buf (mu = 0: -lr*Δ).
// Adam: standard bias-corrected Adam with eps (DiLoCo: large eps, e.g. 0.1).
// State: momentum buffer [N] (nesterov/sgd), two moments [N] + step (adam).
// Owned by one island (or the server); not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "algorithms/options.h"

namespace atl::algorithms {

class OuterOptimizer {
 public:
  explicit OuterOptimizer(OuterOptimizerOptions options) : options_(options) {}
  // theta_g -= update(delta). Both [N] float32 on the same device. Under no-grad.
  void step(at::Tensor& theta_g, const at::Tensor& delta);
  int64_t steps() const { return steps_; }
  const at::Tensor& momentum() const { return buf_; }
  // The state as tensors (momentum / first moment, second moment; undefined until the first
  // step) and back: for handing it to an island that joins.
  std::vector<at::Tensor> state() const { return {buf_, v_}; }
  void load(int64_t steps, const std::vector<at::Tensor>& state);
  // The state and the step count as three tensors (the count a scalar double tensor), as an
  // algorithm hands them to a joiner (Algorithm::export_state); load_handover reads `three`
  // such tensors back.
  std::vector<at::Tensor> handover() const;
  void load_handover(const at::Tensor* three);

 private:
  OuterOptimizerOptions options_;
  at::Tensor buf_;  // nesterov/sgd momentum; adam first moment
  at::Tensor v_;    // adam second moment
  int64_t steps_ = 0;
};

}  // namespace atl::algorithms
