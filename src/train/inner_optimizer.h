// Inner optimizers working directly on a model's flat parameter and gradient buffers: a
// handful of whole-buffer ops per step, no per-tensor loops.
//
//  adamw: decoupled AdamW as torch.optim.AdamW:
//           p <- p * (1 - lr*wd);  m <- b1 m + (1-b1) g;  v <- b2 v + (1-b2) g^2
//           p <- p - lr/(1-b1^t) * m / (sqrt(v/(1-b2^t)) + eps)
//  sgd:   as torch.optim.SGD: g <- g + wd p; buf <- mu buf + g (buf = g at t = 1);
//           p <- p - lr * buf   (mu = 0: p <- p - lr g)
//
// Weight decay applies to every parameter (as torch's AdamW over model.parameters()).
// State (m, v or buf) is kept across outer rounds and never communicated.
// Owned by one island; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "src/config/config.h"

namespace atl::train {

class InnerOptimizer {
 public:
  virtual ~InnerOptimizer() = default;
  // One update of `params` from `grads` ([N] float32, same device) with learning rate `lr`.
  virtual void step(at::Tensor& params, const at::Tensor& grads, double lr) = 0;
  virtual int64_t steps() const = 0;
  // Internal state tensors (for checkpoints and the "state unchanged by sync" oracle).
  virtual std::vector<at::Tensor> state() const = 0;
  // Takes back what steps() and state() returned (a checkpoint's; tensors are copied, on
  // the device they come on). Throws c10::Error for a state of another optimizer.
  virtual void load(int64_t steps, const std::vector<at::Tensor>& state) = 0;
};

std::unique_ptr<InnerOptimizer> make_inner_optimizer(const config::TrainConfig& config);

// Scales `grads` so that its L2 norm is at most max_norm (no-op when max_norm <= 0);
// returns the norm before clipping. Same rule as torch.nn.utils.clip_grad_norm_.
double clip_grad_norm(at::Tensor& grads, double max_norm);

// Learning rate at 1-based inner step `step` of `total`: linear warmup from lr/warmup to lr
// over warmup_steps, then cosine decay to lr*min_lr_ratio at `total` (or constant).
double learning_rate(const config::TrainConfig& config, int64_t step, int64_t total);

}  // namespace atl::train
