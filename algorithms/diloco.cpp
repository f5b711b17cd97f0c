// DiLoCo — Distributed Low-Communication training (Douillard et al., arXiv 2311.08105).
//
// Update rule (docs/algorithms.md §1): every H inner steps
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
//
// Overlapped variants (algorithm.overlap; eager updates, Kale, Douillard, Donchev, arXiv
// 2502.12996; docs/algorithms.md §3): the all-reduce of round t is started at the end of round t
// and completed at the end of round t+1, overlapping H inner steps.
//   delayed: theta_g <- OuterOpt(theta_g, Delta(t-1))               (one round stale)
//   eager:   theta_g <- OuterOpt(theta_g, Delta(t-1) + w_i/sum w * (delta_i(t) - delta_i(t-1)))
//            (this island's stale contribution replaced by its fresh one; every island
//            then keeps its own anchor and outer state, which may differ slightly)
// [impl choice] First round: Delta(0) = delta_i(0) = 0, so delayed applies no outer step
//   and eager applies only this island's own share.
// [impl choice] Last round: its all-reduce is completed in finish() so that no exchange is
//   left open, but not applied: as throughout the run, the global model lags one round of
//   remote contributions.
// State per island: anchor theta_g [N], outer optimizer state ([N] momentum), the
//   pseudo-gradient buffer [N] (CPU, reused every round; without overlap, on the CPU, the
//   parameters' own buffer), error-feedback residual [N];
//   eager also this island's last contribution [N].
// Bytes on the wire per round (ring): 2 (W-1)/W * N * b per island, b = encoded bytes per
//   element (4 for fp32); nothing between rounds.
#include "algorithms/diloco.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <memory>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"
#include "algorithms/outer_optimizer.h"

namespace atl::algorithms {

at::Tensor diloco::eager_delta(const at::Tensor& mean_prev, const at::Tensor& own_prev,
                               const at::Tensor& own_now, double share) {
  return (mean_prev - share * own_prev).add_(own_now, share);
}

namespace {

class DiLoCo final : public Algorithm {
 public:
  explicit DiLoCo(const AlgorithmOptions& options)
      : options_(options), own_(options.get<DilocoOptions>()), outer_(own_.outer), feedback_(own_.error_feedback) {}

  std::string name() const override { return "diloco"; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    anchor_ = share(ctx.shared, ctx.params.detach().clone());
    outer_.place(ctx.shared, ctx.outer_shards);
    // Without overlap the exchange happens after the round's last optimizer step and ends
    // with the parameters set to the new global model: the parameters' own buffer holds the
    // delta meanwhile (on the CPU, where the exchange runs), so that the gradient's buffer is
    // free between steps (AlgorithmTraits::step_local_gradient; docs/simulator.md "Memory").
    in_params_ = own_.overlap == Overlap::kNone && ctx.params.is_cpu() && ctx.params.is_contiguous();
    delta_ = in_params_ ? ctx.params.view({ctx.params.numel()})
                        : at::empty({ctx.params.numel()}, ctx.params.options().device(at::kCPU));
    if (own_.overlap == Overlap::kEager) sent_ = at::empty_like(delta_);
  }

  int64_t planned_steps(int64_t configured) override {
    last_step_ = configured;
    return configured;
  }

  void after_inner_step(IslandContext& ctx, int64_t step) override {
    if (step % own_.inner_steps != 0 && step != last_step_) return;
    at::NoGradGuard no_grad;
    if (own_.overlap == Overlap::kNone) {
      sync(ctx, step);
    } else {
      overlapped_sync(ctx, step);
    }
  }

  void finish(IslandContext& ctx) override {
    if (handle_) complete(ctx, last_step_);
  }

  at::Tensor global_params() const override { return anchor_; }

  // A joiner gets the outer optimizer's state and round count. [impl choice] With overlap,
  // the exchange in flight at the hand-over is not the joiner's: it starts like a first
  // round (no stale average), so its anchor lacks that one outer step.
  AlgorithmState export_state() const override { return round_and_outer(state()); }

  void import_state(IslandContext&, const AlgorithmState& state) override {
    import_round_and_outer(state, round_, outer_, anchor_.device());
  }

  // Checkpoint (docs/checkpoints.md): "round", "anchor", the outer optimizer's "outer.*",
  // "feedback.residual" (undefined until a lossy round). Without overlap checkpoints fall
  // between rounds, where nothing is in flight. With overlap the exchange of the last round
  // is always in flight there; every island has posted it, so it is complete in the
  // simulator and saved with the run (in real runs each island waits for it first:
  // wait_in_flight()), and Group::resume_in_flight() hands its result back: then
  // "in_flight" is 1 and the round's byte counters at its start ("in_flight.sent",
  // ".received", ".raw_sent"), its members, whether error feedback was active, and the
  // tensors "in_flight.average", "in_flight.sent_delta" (eager; else undefined),
  // "in_flight.compensated" and "in_flight.transmitted" (error feedback; else undefined)
  // follow; with nothing in flight yet, "in_flight" is 0.
  AlgorithmCheckpoint state() const override {
    AlgorithmCheckpoint s = anchor_and_outer(round_, anchor_, outer_);
    s.add("feedback.residual", feedback_.residual());
    if (own_.overlap == Overlap::kNone) {
      TORCH_CHECK(!handle_, "diloco: no checkpoint while an exchange is in flight");
      return s;
    }
    s.add("in_flight", int64_t{handle_ ? 1 : 0});
    if (!handle_) return s;
    const transport::ByteCounters& b = meter_.before();
    s.add("in_flight.sent", static_cast<int64_t>(b.sent))
        .add("in_flight.received", static_cast<int64_t>(b.received))
        .add("in_flight.raw_sent", static_cast<int64_t>(b.raw_sent))
        .add("in_flight.members", int64_t{meter_.members()})
        .add("in_flight.feedback", int64_t{feedback_.active() ? 1 : 0})
        .add("in_flight.average", delta_)
        .add("in_flight.sent_delta", own_.overlap == Overlap::kEager ? sent_ : at::Tensor())
        .add("in_flight.compensated", feedback_.active() ? feedback_.sent() : at::Tensor())
        .add("in_flight.transmitted", feedback_.active() ? feedback_.transmitted() : at::Tensor());
    return s;
  }
  std::optional<transport::CollectiveResult> wait_in_flight() override {
    if (!handle_) return std::nullopt;
    return handle_->wait();  // its result stays: the round collects it at its boundary
  }
  void load(IslandContext& ctx, const AlgorithmCheckpoint& state) override {
    const bool overlap = own_.overlap != Overlap::kNone;
    TORCH_CHECK(overlap == state.has("in_flight"), "diloco checkpoint: saved ", overlap ? "without" : "with",
                " algorithm.overlap");
    const bool in_flight = overlap && state.integer("in_flight") == 1;
    writable(ctx.shared, anchor_);
    load_anchor_and_outer(state, round_, anchor_, outer_);
    anchor_ = share(ctx.shared, anchor_);
    at::NoGradGuard no_grad;
    feedback_.load(state.tensor("feedback.residual"));
    if (!in_flight) return;
    auto n = [&](const char* name) { return static_cast<uint64_t>(state.integer(std::string("in_flight.") + name)); };
    meter_ = RoundMeter(transport::ByteCounters{n("sent"), n("received"), n("raw_sent")},
                        static_cast<int>(n("members")));
    auto cpu = [](const at::Tensor& t) { return t.defined() ? t.to(at::kCPU) : t; };
    delta_.copy_(state.tensor("in_flight.average"));
    if (own_.overlap == Overlap::kEager) sent_.copy_(state.tensor("in_flight.sent_delta"));
    feedback_.load_in_flight(n("feedback") == 1, cpu(state.tensor("in_flight.compensated")),
                             cpu(state.tensor("in_flight.transmitted")));
    handle_ = ctx.group->resume_in_flight();
    TORCH_CHECK(handle_, "diloco checkpoint: an exchange was in flight, but the group has none to resume");
  }

 private:
  double weight(const IslandContext& ctx) const {
    return own_.weight_by_shard ? static_cast<double>(ctx.shard_size) : 1.0;
  }

  void sync(IslandContext& ctx, int64_t step) {
    meter_ = RoundMeter(*ctx.group);
    if (in_params_) at::sub_out(delta_, anchor_, delta_);  // the parameters become the delta
    else delta_.copy_(anchor_ - ctx.params);
    at::Tensor transmitted = feedback_.compensate(delta_, *ctx.codec);
    handle_ = ctx.group->allreduce_mean(delta_, *ctx.codec, weight(ctx), transmitted);
    complete(ctx, step);
    outer_step(ctx, delta_.device() == anchor_.device() ? delta_ : delta_.to(anchor_.device()));
    ctx.params.copy_(anchor_);
  }

  void overlapped_sync(IslandContext& ctx, int64_t step) {
    const bool eager = own_.overlap == Overlap::kEager;
    const at::Tensor fresh = anchor_ - ctx.params;  // delta_i(t), on the anchor's device
    if (handle_) {
      const transport::CollectiveResult result = complete(ctx, step);
      const at::Tensor mean = delta_.to(anchor_.device());
      if (eager) {
        const double share = weight(ctx) / result.weight_sum;
        outer_step(ctx, diloco::eager_delta(mean, sent_.to(anchor_.device()), fresh, share));
      } else {
        outer_step(ctx, mean);
      }
    } else if (eager) {
      outer_step(ctx, fresh * first_share(ctx));
    }
    meter_ = RoundMeter(*ctx.group);
    delta_.copy_(fresh);
    at::Tensor transmitted = feedback_.compensate(delta_, *ctx.codec);
    if (eager) sent_.copy_(delta_);
    handle_ = ctx.group->allreduce_mean(delta_, *ctx.codec, weight(ctx), transmitted);
    ctx.params.copy_(anchor_);
  }

  // The outer step on the anchor, which may be held once for all islands in step
  // (IslandContext::shared): written on a private copy, then shared again.
  void outer_step(IslandContext& ctx, const at::Tensor& delta) {
    writable(ctx.shared, anchor_);
    outer_.step(anchor_, delta);
    anchor_ = share(ctx.shared, anchor_);
  }

  // Waits for the exchange in flight (its average lands in delta_) and reports the round.
  transport::CollectiveResult complete(IslandContext& ctx, int64_t step) {
    transport::CollectiveResult result = handle_->wait();
    handle_.reset();
    require_usable(result, ctx, "diloco all-reduce", step);
    feedback_.update();
    ++round_;
    if (ctx.on_round) {
      ctx.on_round(meter_.finish(*ctx.group, round_, step, static_cast<int>(result.contributors.size()),
                                 delta_.norm().item<double>()));
    }
    return result;
  }

  // This island's weight over the members' total, before any exchange has completed
  // (1/M unless weighting by shard size with every member's size known).
  double first_share(const IslandContext& ctx) const {
    const auto members = ctx.group->view().members;
    if (own_.weight_by_shard) {
      double total = 0;
      for (int m : members) {
        if (m >= static_cast<int>(options_.shard_sizes.size())) return 1.0 / static_cast<double>(members.size());
        total += static_cast<double>(options_.shard_sizes[m]);
      }
      if (total > 0) return weight(ctx) / total;
    }
    return 1.0 / static_cast<double>(members.size());
  }

  AlgorithmOptions options_;
  DilocoOptions own_;
  OuterOptimizer outer_;
  at::Tensor anchor_;
  at::Tensor delta_;  // [N] CPU: this island's contribution, then the average
  bool in_params_ = false;  // delta_ is the parameters' buffer (no overlap, CPU)
  at::Tensor sent_;   // eager: [N] CPU, this island's contribution in flight
  Feedback feedback_;
  std::unique_ptr<transport::Handle> handle_;  // the exchange in flight
  RoundMeter meter_;
  int64_t round_ = 0;
  int64_t last_step_ = 0;
};

}  // namespace

std::unique_ptr<Algorithm> make_diloco(const AlgorithmOptions& options, int) {
  return std::make_unique<DiLoCo>(options);
}

}  // namespace atl::algorithms
