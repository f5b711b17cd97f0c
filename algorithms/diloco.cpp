// DiLoCo — Distributed Low-Communication training (Douillard et al., arXiv 2311.08105).
//
// Update rule (ALGORITHMS.md §1): every H inner steps
//   delta_i = theta_g - theta_i                     (old minus new)
//   Delta   = sum_i w_i delta_i / sum_i w_i          (w_i = 1, or shard size n_i)
//   theta_g <- OuterOpt(theta_g, Delta)              (Nesterov 0.7 / 0.9 by default)
//   theta_i <- theta_g
// A final sync also happens at the last step when the step count is not a multiple of H,
// so the run ends on a global model. The inner optimizer state is never touched.
// The average is over the islands that contributed (a lost island's delta is dropped).
// Compression: delta_i travels through the configured pipeline (ctx.codec). With a lossy
//   codec and error feedback on, each island adds its previous compression error to
//   delta_i before sending and keeps e - decode(encode(e)) for the next round.
// State per island: anchor theta_g [N], outer optimizer state ([N] momentum), the
//   pseudo-gradient buffer [N] (CPU, reused every round), error-feedback residual [N].
// Bytes on the wire per round (ring): 2 (W-1)/W * N * b per island, b = encoded bytes per
//   element (4 for fp32); nothing between rounds.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "algorithms/builtin.h"
#include "algorithms/outer_optimizer.h"
#include "algorithms/exchange.h"

namespace atl::algorithms {
namespace {

class DiLoCo final : public Algorithm {
 public:
  explicit DiLoCo(const AlgorithmOptions& options)
      : options_(options), outer_(options.outer), feedback_(options.error_feedback) {}

  std::string name() const override { return "diloco"; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    anchor_ = ctx.params.detach().clone();
    delta_ = at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
  }

  int64_t planned_steps(int64_t configured) override {
    last_step_ = configured;
    return configured;
  }

  void after_inner_step(IslandContext& ctx, int64_t step) override {
    if (step % options_.inner_steps != 0 && step != last_step_) return;
    at::NoGradGuard no_grad;
    const RoundMeter meter(*ctx.group);
    delta_.copy_(anchor_ - ctx.params);
    const double weight = options_.weight_by_shard ? static_cast<double>(ctx.shard_size) : 1.0;
    at::Tensor transmitted = feedback_.compensate(delta_, *ctx.codec);
    auto result = ctx.group->allreduce_mean(delta_, *ctx.codec, weight, transmitted)->wait();
    TORCH_CHECK(result.status.is_ok() || !result.contributors.empty(),
                "diloco all-reduce failed: ", result.status.to_string());
    feedback_.update();

    at::Tensor delta = delta_.device() == anchor_.device() ? delta_ : delta_.to(anchor_.device());
    outer_.step(anchor_, delta);
    ctx.params.copy_(anchor_);
    ++round_;
    if (ctx.on_round) {
      ctx.on_round(meter.finish(*ctx.group, round_, step, static_cast<int>(result.contributors.size()),
                                delta_.norm().item<double>()));
    }
  }

  at::Tensor global_params() const override { return anchor_; }

 private:
  AlgorithmOptions options_;
  OuterOptimizer outer_;
  at::Tensor anchor_;
  at::Tensor delta_;
  Feedback feedback_;
  int64_t round_ = 0;
  int64_t last_step_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_diloco(const AlgorithmOptions& options, int) {
  return std::make_unique<DiLoCo>(options);
}

}  // namespace atl::algorithms
