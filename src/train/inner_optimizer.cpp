#include "src/train/inner_optimizer.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>

namespace atl::train {
namespace {

class AdamW final : public InnerOptimizer {
 public:
  explicit AdamW(const config::TrainConfig& c)
      : b1_(c.beta1), b2_(c.beta2), eps_(c.eps), wd_(c.weight_decay) {}

  void step(at::Tensor& p, const at::Tensor& g, double lr) override {
    at::NoGradGuard no_grad;
    if (!m_.defined()) {
      m_ = at::zeros_like(p);
      v_ = at::zeros_like(p);
    }
    ++t_;
    if (wd_ != 0) p.mul_(1 - lr * wd_);
    m_.mul_(b1_).add_(g, 1 - b1_);
    v_.mul_(b2_).addcmul_(g, g, 1 - b2_);
    const double bc1 = 1 - std::pow(b1_, static_cast<double>(t_));
    const double bc2 = 1 - std::pow(b2_, static_cast<double>(t_));
    // The denominator a slice at a time, in a scratch buffer of kDenomSlice values instead of
    // one of the parameters' size: an island keeps two state buffers, not three (a simulation
    // holds one optimizer per island). Element-wise, so bitwise the same as one pass.
    const int64_t n = p.numel();
    if (!denom_.defined()) denom_ = at::empty({std::min(n, kDenomSlice)}, p.options());
    at::Tensor flat_p = p.view({n}), flat_m = m_.view({n}), flat_v = v_.view({n});
    for (int64_t from = 0; from < n; from += kDenomSlice) {
      const int64_t len = std::min(kDenomSlice, n - from);
      at::Tensor denom = denom_.narrow(0, 0, len);
      at::sqrt_out(denom, flat_v.narrow(0, from, len)).div_(std::sqrt(bc2)).add_(eps_);
      flat_p.narrow(0, from, len).addcdiv_(flat_m.narrow(0, from, len), denom, -lr / bc1);
    }
  }
  int64_t steps() const override { return t_; }
  std::vector<at::Tensor> state() const override { return {m_, v_}; }
  void load(int64_t steps, const std::vector<at::Tensor>& state) override {
    TORCH_CHECK(state.size() == 2 && state[0].defined() == state[1].defined(),
                "adamw state: expected 2 tensors (m, v), got ", state.size());
    t_ = steps;
    m_ = state[0].defined() ? state[0].clone() : at::Tensor();
    v_ = state[1].defined() ? state[1].clone() : at::Tensor();
  }

 private:
  static constexpr int64_t kDenomSlice = int64_t{1} << 16;
  double b1_, b2_, eps_, wd_;
  at::Tensor m_, v_;
  at::Tensor denom_;  // scratch: kDenomSlice values at most
  int64_t t_ = 0;
};

class Sgd final : public InnerOptimizer {
 public:
  explicit Sgd(const config::TrainConfig& c) : mu_(c.momentum), wd_(c.weight_decay) {}

  void step(at::Tensor& p, const at::Tensor& g, double lr) override {
    at::NoGradGuard no_grad;
    ++t_;
    at::Tensor d = g;
    if (wd_ != 0) d = g.add(p, wd_);
    if (mu_ != 0) {
      if (!buf_.defined()) buf_ = d.clone();
      else buf_.mul_(mu_).add_(d);
      d = buf_;
    }
    p.sub_(d, lr);
  }
  int64_t steps() const override { return t_; }
  std::vector<at::Tensor> state() const override {
    return buf_.defined() ? std::vector<at::Tensor>{buf_} : std::vector<at::Tensor>{};
  }
  void load(int64_t steps, const std::vector<at::Tensor>& state) override {
    TORCH_CHECK(state.size() <= 1, "sgd state: expected at most 1 tensor, got ", state.size());
    t_ = steps;
    buf_ = state.empty() || !state[0].defined() ? at::Tensor() : state[0].clone();
  }

 private:
  double mu_, wd_;
  at::Tensor buf_;
  int64_t t_ = 0;
};

}  // namespace

std::unique_ptr<InnerOptimizer> make_inner_optimizer(const config::TrainConfig& config) {
  if (config.optimizer == "sgd") return std::make_unique<Sgd>(config);
  return std::make_unique<AdamW>(config);  // the config parser admits adamw | sgd only
}

double clip_grad_norm(at::Tensor& grads, double max_norm) {
  at::NoGradGuard no_grad;
  const double norm = grads.norm().item<double>();
  if (max_norm > 0 && norm > max_norm) grads.mul_(max_norm / (norm + 1e-6));
  return norm;
}

double learning_rate(const config::TrainConfig& c, int64_t step, int64_t total) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) {
    return c.lr * static_cast<double>(step) / static_cast<double>(c.warmup_steps);
  }
  if (c.schedule == "constant") return c.lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total - c.warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / span);
  const double floor = c.lr * c.min_lr_ratio;
  return floor + 0.5 * (c.lr - floor) * (1 + std::cos(M_PI * progress));
}

}  // namespace atl::train
