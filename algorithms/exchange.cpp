#include "algorithms/exchange.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <string>
#include <utility>

#include "src/base/status.h"

namespace atl::algorithms {

at::Tensor Feedback::compensate(at::Tensor& delta, const compression::Pipeline& codec) {
  active_ = enabled_ && !codec.lossless();
  if (!active_) return {};
  ef_.compensate(delta);
  if (!sent_.defined()) {
    sent_ = at::empty_like(delta);
    transmitted_ = at::empty_like(delta);
  }
  sent_.copy_(delta);
  return transmitted_;
}

void Feedback::update() {
  if (active_) ef_.update(sent_, transmitted_);
}

void require_usable(const transport::CollectiveResult& result, const IslandContext& ctx,
                    const char* what, int64_t step, bool survivors_ok) {
  if (result.status.is_ok() || (survivors_ok && !result.contributors.empty())) return;
  throw StatusError("island " + std::to_string(ctx.island) + ": " + what + " at step " + std::to_string(step),
                    result.status);
}

RoundInfo RoundMeter::finish(const transport::Group& group, int64_t round, int64_t step,
                             int contributors, double outer_grad_norm) const {
  const auto after = group.bytes();
  RoundInfo info;
  info.round = round;
  info.step = step;
  info.contributors = contributors;
  info.members = members_;
  info.bytes_sent = after.sent - before_.sent;
  info.bytes_received = after.received - before_.received;
  info.raw_bytes_sent = after.raw_sent - before_.raw_sent;
  info.outer_grad_norm = outer_grad_norm;
  return info;
}

AlgorithmCheckpoint anchor_and_outer(int64_t round, const at::Tensor& anchor, const OuterOptimizer& outer) {
  AlgorithmCheckpoint s;
  s.add("round", round).add("anchor", anchor);
  outer.save(s, "outer");
  return s;
}

void load_anchor_and_outer(const AlgorithmCheckpoint& s, int64_t& round, at::Tensor& anchor, OuterOptimizer& outer) {
  at::NoGradGuard no_grad;
  const at::Tensor& a = s.tensor("anchor");
  TORCH_CHECK(a.defined() && a.numel() == anchor.numel(), "checkpoint: 'anchor' has ", a.defined() ? a.numel() : 0,
              " values, the model ", anchor.numel());
  outer.load(s, "outer", anchor.device());
  round = s.integer("round");
  anchor.copy_(a);
}

AlgorithmState round_and_outer(const AlgorithmCheckpoint& state) {
  return state.only({"round", "outer.steps", "outer.momentum", "outer.second_moment"});
}

void import_round_and_outer(const AlgorithmState& s, int64_t& round, OuterOptimizer& outer, c10::Device device) {
  outer.load(s, "outer", device);
  round = s.integer("round");
}

}  // namespace atl::algorithms
