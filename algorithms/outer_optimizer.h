// The outer optimizer: treats the averaged pseudo-gradient Δ as a gradient of θ_g.
// docs/algorithms.md §0: Nesterov exactly as torch.optim.SGD(momentum=mu, nesterov=True):
//   buf <- mu*buf + Δ;  θ_g <- θ_g - lr*(Δ + mu*buf)
// SGD (momentum mu, no nesterov): buf <- mu*buf + Δ; θ_g <- θ_g - lr*buf (mu = 0: -lr*Δ).
// Adam: standard bias-corrected Adam with eps (DiLoCo: large eps, e.g. 0.1).
// State: momentum buffer [N] (nesterov/sgd), two moments [N] + step (adam).
// Owned by one island (or the server); not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "algorithms/options.h"
#include "algorithms/shared_tensors.h"
#include "src/base/named_state.h"

namespace atl::algorithms {

class OuterOptimizer {
 public:
  explicit OuterOptimizer(OuterOptimizerOptions options) : options_(options) {}
  // theta_g -= update(delta). Both [N] float32 on the same device. Under no-grad.
  void step(at::Tensor& theta_g, const at::Tensor& delta);
  // The simulator: the state goes through `shared` after every step (docs/simulator.md
  // "Memory"), so that islands in step hold it once. May be null.
  void set_shared(SharedTensors* shared) { shared_ = shared; }
  int64_t steps() const { return steps_; }
  const at::Tensor& momentum() const { return buf_; }
  // Its state as named entries (src/base/named_state.h), for checkpoints and hand-overs:
  // `prefix`.steps (integer), `prefix`.momentum (nesterov / sgd momentum, adam first moment)
  // and `prefix`.second_moment (adam), tensors undefined until they are used. load() reads
  // them back (copies, on `device`).
  void save(NamedState& s, const std::string& prefix) const;
  void load(const NamedState& s, const std::string& prefix, c10::Device device);

 private:
  OuterOptimizerOptions options_;
  at::Tensor buf_;  // nesterov/sgd momentum; adam first moment
  at::Tensor v_;    // adam second moment
  int64_t steps_ = 0;
  SharedTensors* shared_ = nullptr;
  void update(at::Tensor& theta_g, const at::Tensor& delta);
};

}  // namespace atl::algorithms
