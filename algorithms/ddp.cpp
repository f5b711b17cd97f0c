// DDP — synchronous data parallel (the baseline every comparison needs).
//
// Update rule: after every backward pass, g <- mean_i g_i (one all-reduce of the N-element
// flat gradient), then every island applies the same inner optimizer step, so parameters
// stay identical on all islands.
// State per island: none beyond the model and the inner optimizer.
// Bytes on the wire per step (ring): 2 (W-1)/W * N * 4 sent and received per island.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"

namespace atl::algorithms {
namespace {

class Ddp final : public Algorithm {
 public:
  std::string name() const override { return "ddp"; }
  void setup(IslandContext& ctx) override { params_ = ctx.params; }

  void after_backward(IslandContext& ctx, int64_t step) override {
    at::NoGradGuard no_grad;
    const RoundMeter meter(*ctx.group);
    at::Tensor g = ctx.grads.device().is_cpu() ? ctx.grads : ctx.grads.to(at::kCPU);
    auto result = ctx.group->allreduce_mean(g, *ctx.codec, 1.0)->wait();
    require_usable(result, ctx, "ddp all-reduce", step);
    if (!g.is_same(ctx.grads)) ctx.grads.copy_(g);
    ++round_;
    if (ctx.on_round) {
      ctx.on_round(meter.finish(*ctx.group, round_, step, static_cast<int>(result.contributors.size())));
    }
  }

  at::Tensor global_params() const override { return params_; }

  // Checkpoint: "round"; the parameters and inner optimizer are the island's.
  AlgorithmCheckpoint state() const override { return AlgorithmCheckpoint().add("round", round_); }
  void load(IslandContext&, const AlgorithmCheckpoint& state) override { round_ = state.integer("round"); }

 private:
  at::Tensor params_;
  int64_t round_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_ddp(const AlgorithmOptions&, int) { return std::make_unique<Ddp>(); }

}  // namespace atl::algorithms
