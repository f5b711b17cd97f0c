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
#include "compression/error_feedback.h"

namespace atl::algorithms {
namespace {

class DiLoCo final : public Algorithm {
 public:
  explicit DiLoCo(const AlgorithmOptions& options) : options_(options), outer_(options.outer) {}

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
    const auto before = ctx.group->bytes();
    const int members = static_cast<int>(ctx.group->view().members.size());

    delta_.copy_(anchor_ - ctx.params);
    const double weight = options_.weight_by_shard ? static_cast<double>(ctx.shard_size) : 1.0;
    const bool feedback = options_.error_feedback && !ctx.codec->lossless();
    if (feedback) {
      ef_.compensate(delta_);
      if (!sent_.defined()) sent_ = at::empty_like(delta_), transmitted_ = at::empty_like(delta_);
      sent_.copy_(delta_);
    }
    auto result = ctx.group->allreduce_mean(delta_, *ctx.codec, weight,
                                            feedback ? transmitted_ : at::Tensor())->wait();
    if (feedback) ef_.update(sent_, transmitted_);
    TORCH_CHECK(result.status.is_ok() || !result.contributors.empty(),
                "diloco all-reduce failed: ", result.status.to_string());

    at::Tensor delta = delta_.device() == anchor_.device() ? delta_ : delta_.to(anchor_.device());
    outer_.step(anchor_, delta);
    ctx.params.copy_(anchor_);
    ++round_;

    if (ctx.on_round) {
      const auto after = ctx.group->bytes();
      RoundInfo info;
      info.round = round_;
      info.step = step;
      info.contributors = static_cast<int>(result.contributors.size());
      info.members = members;
      info.bytes_sent = after.sent - before.sent;
      info.bytes_received = after.received - before.received;
      info.raw_bytes_sent = after.raw_sent - before.raw_sent;
      info.outer_grad_norm = delta_.norm().item<double>();
      ctx.on_round(info);
    }
  }

  at::Tensor global_params() const override { return anchor_; }

 private:
  AlgorithmOptions options_;
  OuterOptimizer outer_;
  at::Tensor anchor_;
  at::Tensor delta_;
  compression::ErrorFeedback ef_;
  at::Tensor sent_, transmitted_;  // error feedback: what was sent, what the others decoded
  int64_t round_ = 0;
  int64_t last_step_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_diloco(const AlgorithmOptions& options, int) {
  return std::make_unique<DiLoCo>(options);
}

}  // namespace atl::algorithms
