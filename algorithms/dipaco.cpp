// DiPaCo's optimisation: DiLoCo per module (Douillard et al., arXiv 2403.10616;
// docs/dipaco.md "Optimisation").
//
// Each island trains one path of a modular model; its parameters are that path, and each
// parameter belongs to one module (ParamRange::module, filled from the path structure). Every
// H inner steps, for every module m on this island's path:
//   delta_m  = theta_g[m] - theta_i[m]                    (old minus new, this module's slices)
//   Delta_m  = sum_{i through m} w_i delta_m,i / sum w_i   (w_i = 1, or the island's shard size)
//              over a sub-group of exactly the islands whose path goes through m (key m + 1),
//              all modules' all-reduces in flight together;
//   Delta_m *= sqrt(P_m)   with norm rescaling (P_m = paths through m)
// then one outer step theta_g <- OuterOpt(theta_g, Delta) over the whole path (the outer
// optimizers are element-wise, so this is the per-module outer step), and theta_i <- theta_g.
// A module that only this island goes through (path-specific, or a path with one island) is
// not exchanged: its Delta is this island's own delta (no bytes), and the outer step still
// applies to it. A final sync happens at the last step when it is not a multiple of H.
// Lost islands: a module's average is over the sub-group's survivors (kPeerLost is usable).
// Compression: each module's delta travels through ctx.codec, with error feedback per module.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"
#include "algorithms/outer_optimizer.h"

namespace atl::algorithms {

namespace {

class DiPaCo final : public Algorithm {
 public:
  explicit DiPaCo(const AlgorithmOptions& options) : options_(options), outer_(options.outer) {}

  std::string name() const override { return "dipaco"; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    anchor_ = ctx.params.detach().clone();
    delta_ = at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
    std::map<int, Module> by_id;
    if (ctx.layout.empty()) {
      by_id[0].ranges.push_back({0, ctx.params.numel()});
    } else {
      for (const ParamRange& r : ctx.layout) by_id[r.module].ranges.push_back({r.offset, r.numel});
    }
    for (auto& [id, m] : by_id) {
      m.id = id;
      m.what = "dipaco all-reduce of module " + std::to_string(id);
      for (const auto& [offset, numel] : m.ranges) m.numel += numel;
      const std::vector<int>& islands = islands_through(id);
      TORCH_CHECK(std::binary_search(islands.begin(), islands.end(), ctx.island), "dipaco: island ", ctx.island,
                  " holds module ", id, " but is not among the islands through it");
      if (islands.size() > 1) m.group = ctx.group->subgroup(static_cast<uint32_t>(id) + 1, islands);
      m.scale = options_.norm_rescale ? std::sqrt(static_cast<double>(paths_through(id))) : 1.0;
      m.buffer = at::empty({m.numel}, delta_.options());
      m.feedback = std::make_unique<Feedback>(options_.error_feedback);
      modules_.push_back(std::move(m));
    }
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
    for (Module& m : modules_) {
      if (!m.group) continue;
      gather(m);
      at::Tensor transmitted = m.feedback->compensate(m.buffer, *ctx.codec);
      m.handle = m.group->allreduce_mean(m.buffer, *ctx.codec, weight, transmitted);
    }
    int contributors = 1;
    for (Module& m : modules_) {
      if (m.group) {
        const transport::CollectiveResult result = m.handle->wait();
        m.handle.reset();
        require_usable(result, ctx, m.what.c_str(), step);
        m.feedback->update();
        contributors = std::max(contributors, static_cast<int>(result.contributors.size()));
        scatter(m);
      }
      if (m.scale != 1.0) {
        for (const auto& [offset, numel] : m.ranges) delta_.narrow(0, offset, numel).mul_(m.scale);
      }
    }
    ++round_;
    if (ctx.on_round) ctx.on_round(meter.finish(*ctx.group, round_, step, contributors, delta_.norm().item<double>()));
    outer_.step(anchor_, delta_.device() == anchor_.device() ? delta_ : delta_.to(anchor_.device()));
    ctx.params.copy_(anchor_);
  }

  at::Tensor global_params() const override { return anchor_; }

  // A joiner gets the outer optimizer's state and the round count (as DiLoCo's).
  AlgorithmState export_state() const override { return {round_, outer_.handover()}; }

  void import_state(IslandContext&, const AlgorithmState& state) override {
    TORCH_CHECK(state.tensors.size() == 3, "dipaco state: expected 3 tensors, got ", state.tensors.size());
    round_ = state.rounds;
    outer_.load_handover(state.tensors.data());
  }

  // Checkpoint (docs/checkpoints.md): counters = {round, outer-optimizer steps}; tensors =
  // {anchor, outer state (2, undefined until used), then each module's error-feedback
  // residual in ascending module id (undefined until a lossy round; always undefined for a
  // module only this island goes through)}. Every module's exchange completes within the
  // sync step, so any step boundary may hold a checkpoint.
  std::string checkpoint_limit() const override { return {}; }
  AlgorithmCheckpoint state() const override {
    AlgorithmCheckpoint s = anchor_and_outer(round_, anchor_, outer_);
    for (const Module& m : modules_) s.tensors.push_back(m.feedback->residual());
    return s;
  }
  void load(IslandContext&, const AlgorithmCheckpoint& state) override {
    TORCH_CHECK(state.counters.size() == 2 && state.tensors.size() == 3 + modules_.size(), "dipaco checkpoint: "
                "expected 2 counters and ", 3 + modules_.size(), " tensors, got ", state.counters.size(), " and ",
                state.tensors.size());
    load_anchor_and_outer(state, round_, anchor_, outer_);
    for (size_t i = 0; i < modules_.size(); ++i) modules_[i].feedback->load(state.tensors[3 + i]);
  }

 private:
  struct Module {
    int id = 0;
    std::vector<std::pair<int64_t, int64_t>> ranges;  // (offset, numel) in the flat buffer
    int64_t numel = 0;
    std::string what;                                 // "dipaco all-reduce of module 3"
    double scale = 1.0;                               // norm rescaling factor
    std::unique_ptr<transport::Group> group;          // null: only this island goes through it
    at::Tensor buffer;                                // [numel] CPU: delta_m, then Delta_m
    std::unique_ptr<Feedback> feedback;
    std::unique_ptr<transport::Handle> handle;
  };

  const std::vector<int>& islands_through(int module) const {
    TORCH_CHECK(module >= 0 && module < static_cast<int>(options_.module_islands.size()),
                "dipaco: no islands listed for module ", module);
    return options_.module_islands[module];
  }
  int paths_through(int module) const {
    return module < static_cast<int>(options_.module_paths.size()) ? options_.module_paths[module] : 1;
  }

  void gather(Module& m) {
    int64_t at = 0;
    for (const auto& [offset, numel] : m.ranges) {
      m.buffer.narrow(0, at, numel).copy_(delta_.narrow(0, offset, numel));
      at += numel;
    }
  }
  void scatter(Module& m) {
    int64_t at = 0;
    for (const auto& [offset, numel] : m.ranges) {
      delta_.narrow(0, offset, numel).copy_(m.buffer.narrow(0, at, numel));
      at += numel;
    }
  }

  AlgorithmOptions options_;
  OuterOptimizer outer_;
  at::Tensor anchor_;
  at::Tensor delta_;  // [N] CPU: this island's deltas, then the modules' averages
  std::vector<Module> modules_;  // ascending module id
  int64_t round_ = 0;
  int64_t last_step_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_dipaco(const AlgorithmOptions& options, int) {
  return std::make_unique<DiPaCo>(options);
}

}  // namespace atl::algorithms
