// Streaming DiLoCo with overlapping communication (Douillard, Donchev et al., arXiv
// 2501.18512, Algorithm 2; docs/algorithms.md §2).
//
// Update rule, per island, for each fragment p (P fragments of transformer blocks, see
// streaming_diloco.h for the assignment and the schedule):
//   send, after step t (every H steps, at offset t_p):
//     delta_p = anchor_p - theta_p                        (old minus new)
//     start: Delta_p = mean_i delta_{i,p}                 (async all-reduce, ctx.codec)
//   receive, after step t + tau (training went on meanwhile):
//     wait for Delta_p
//     anchor_p <- OuterOpt_p(anchor_p, Delta_p)           (the outer step is on the ANCHOR)
//     theta_p  <- alpha * theta_p + (1 - alpha) * anchor_p
// The all-reduce is started at the send and waited for at the receive, so on the
// simulator's virtual clock the transfer overlaps tau inner steps.
// [impl choice] Last step: sends whose receive would fall after the last step are not
// made; instead, after the last step every fragment with inner steps since its last send is
// synced once more without overlap (like DiLoCo's final partial round), so the run ends
// with every step in the anchors. The global model (evaluated, saved) is the anchor.
// Compression: each fragment's delta goes through ctx.codec, with its own error-feedback
//   residual for lossy codecs.
// State per island: anchor [N], per fragment an outer optimizer (momentum [n_p]), the
//   exchange buffer [n_p] (CPU) and the error-feedback residual [n_p].
// Hand-over to a joiner (rejoin / add): see can_hand_over() below.
// Bytes on the wire per fragment sync (ring): 2 (W-1)/W * n_p * b per island; per H steps
//   the same as DiLoCo, with a peak P times lower.
#include "algorithms/streaming_diloco.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>

#include "algorithms/builtin.h"
#include "algorithms/exchange.h"
#include "algorithms/outer_optimizer.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace streaming_diloco {

std::vector<std::vector<Run>> assign_fragments(const std::vector<ParamRange>& layout,
                                               int64_t numel, int fragments, FragmentMode mode) {
  const std::vector<ParamRange> whole = {{0, numel, -1, {}}};
  const std::vector<ParamRange>& ranges = layout.empty() ? whole : layout;
  int blocks = 0;
  for (const auto& r : ranges) blocks = std::max(blocks, r.block + 1);
  if (fragments > std::max(blocks, 1)) {
    throw UserError("streaming_diloco: algorithm.fragments = " + std::to_string(fragments) +
                    " but the model has " + std::to_string(blocks) +
                    " transformer blocks (a fragment is made of whole blocks)");
  }
  auto fragment_of_block = [&](int j) {
    if (mode == FragmentMode::kStrided) return j % fragments;
    // sequential: the p with floor(p B / P) <= j < floor((p + 1) B / P)
    int p = 0;
    while (static_cast<int64_t>(p + 1) * blocks / fragments <= j) ++p;
    return p;
  };
  std::vector<std::vector<Run>> out(static_cast<size_t>(fragments));
  bool seen_block = false;
  for (const auto& r : ranges) {
    int p;
    if (r.block >= 0) {
      p = fragment_of_block(r.block);
      seen_block = true;
    } else {
      p = seen_block ? fragments - 1 : 0;
    }
    auto& runs = out[static_cast<size_t>(p)];
    if (!runs.empty() && runs.back().offset + runs.back().numel == r.offset) {
      runs.back().numel += r.numel;
    } else {
      runs.push_back({r.offset, r.numel});
    }
  }
  return out;
}


Schedule::Schedule(int64_t inner_steps, int fragments, int64_t overlap_steps, int64_t last_step)
    : h_(inner_steps), tau_(overlap_steps), last_step_(last_step) {
  if (auto problem = check(inner_steps, fragments, overlap_steps))
    throw UserError("streaming_diloco: " + problem->key + ": " + problem->message);
  for (int p = 0; p < fragments; ++p) offsets_.push_back(static_cast<int64_t>(p) * h_ / fragments);
}

int Schedule::fragment_at_offset(int64_t step) const {
  if (step < h_) return -1;
  auto it = std::find(offsets_.begin(), offsets_.end(), step % h_);
  return it == offsets_.end() ? -1 : static_cast<int>(it - offsets_.begin());
}

int Schedule::sends_at(int64_t step) const {
  return step + tau_ <= last_step_ ? fragment_at_offset(step) : -1;
}

int Schedule::receives_at(int64_t step) const { return sends_at(step - tau_); }

}  // namespace streaming_diloco

namespace {

using streaming_diloco::Run;

// fragment <- full[runs], contiguous, on full's device.
at::Tensor gather(const at::Tensor& full, const std::vector<Run>& runs) {
  std::vector<at::Tensor> parts;
  for (const Run& r : runs) parts.push_back(full.narrow(0, r.offset, r.numel));
  return at::cat(parts);
}

// full[runs] <- fragment.
void scatter(const at::Tensor& fragment, const std::vector<Run>& runs, at::Tensor& full) {
  int64_t at = 0;
  for (const Run& r : runs) {
    full.narrow(0, r.offset, r.numel).copy_(fragment.narrow(0, at, r.numel));
    at += r.numel;
  }
}

class StreamingDiLoCo final : public Algorithm {
 public:
  explicit StreamingDiLoCo(const AlgorithmOptions& options)
      : options_(options), own_(options.get<StreamingDilocoOptions>()) {
    // Checked here too, so that a bad config fails before the run starts.
    (void)streaming_diloco::Schedule(own_.inner_steps, own_.fragments, own_.overlap_steps, own_.inner_steps);
  }

  std::string name() const override { return "streaming_diloco"; }

  void setup(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    anchor_ = share(ctx.shared, ctx.params.detach().clone());  // held once for islands in step
    auto runs = streaming_diloco::assign_fragments(ctx.layout, ctx.params.numel(),
                                                   own_.fragments, own_.fragment_mode);
    for (auto& r : runs) fragments_.emplace_back(std::move(r), own_, ctx.params.options());
    for (auto& f : fragments_) f.outer.place(ctx.shared, ctx.outer_shards);
  }

  int64_t planned_steps(int64_t configured) override {
    schedule_.emplace(own_.inner_steps, own_.fragments, own_.overlap_steps, configured);
    return configured;
  }

  void after_inner_step(IslandContext& ctx, int64_t step) override {
    at::NoGradGuard no_grad;
    // Send before receive: with tau = 0 a fragment is sent and received after the same
    // step (with tau > 0 no send and receive share a step).
    const int sent = schedule_->sends_at(step);
    if (sent >= 0) send(ctx, sent, step);
    const int received = schedule_->receives_at(step);
    if (received >= 0) receive(ctx, received, step);
    if (step != schedule_->last_step()) return;
    for (size_t p = 0; p < fragments_.size(); ++p) {
      if (fragments_[p].sent_at == step) continue;
      send(ctx, static_cast<int>(p), step);
      receive(ctx, static_cast<int>(p), step);
    }
  }

  // Completes any exchange still in flight (none after the last step's flush).
  void finish(IslandContext& ctx) override {
    at::NoGradGuard no_grad;
    for (size_t p = 0; p < fragments_.size(); ++p) {
      if (fragments_[p].handle) receive(ctx, static_cast<int>(p), fragments_[p].sent_at);
    }
  }

  at::Tensor global_params() const override { return anchor_; }

  // A joiner gets the anchor as its parameters (global_params) and, here, every fragment's
  // outer optimizer (momentum, step count) and the sync count. [impl choice] The hand-over
  // waits for a step boundary with no fragment in flight (at most overlap_steps later), so
  // the joiner's anchor and outer state equal the donor's exactly and it takes part from the
  // next fragment send on. Error-feedback residuals start at zero (they are the joiner's own).
  bool can_hand_over() const override {
    return std::none_of(fragments_.begin(), fragments_.end(), [](const Fragment& f) { return f.handle != nullptr; });
  }

  // Checkpoint: "round", "anchor", then per fragment p: its outer optimizer's
  // "fragment.<p>.outer.*" and "fragment.<p>.residual" (error feedback). Checkpoints fall
  // where no fragment is in flight (with overlap_steps > 0, a due one moves to the step after
  // the receive; at most one fragment is ever in flight).
  bool can_checkpoint() const override { return can_hand_over(); }
  AlgorithmCheckpoint state() const override {
    TORCH_CHECK(can_hand_over(), "streaming_diloco: checkpoint with a fragment in flight");
    AlgorithmCheckpoint s;
    s.add("round", round_).add("anchor", anchor_);
    for (size_t p = 0; p < fragments_.size(); ++p) {
      fragments_[p].outer.save(s, fragment_name(p, "outer"));
      s.add(fragment_name(p, "residual"), fragments_[p].feedback.residual());
    }
    return s;
  }
  void load(IslandContext& ctx, const AlgorithmCheckpoint& state) override {
    for (size_t p = 0; p < fragments_.size(); ++p) state.tensor(fragment_name(p, "residual"));  // all there first
    import_state(ctx, state);
    at::NoGradGuard no_grad;
    writable(ctx.shared, anchor_);
    anchor_.copy_(state.tensor("anchor"));
    anchor_ = share(ctx.shared, anchor_);
    for (size_t p = 0; p < fragments_.size(); ++p) fragments_[p].feedback.load(state.tensor(fragment_name(p, "residual")));
  }

  // A joiner gets the round count and every fragment's outer optimizer state (a subset of
  // the checkpoint's); its residuals start at zero.
  AlgorithmState export_state() const override {
    TORCH_CHECK(can_hand_over(), "streaming_diloco: state exported with a fragment in flight");
    AlgorithmState s;
    s.add("round", round_);
    for (size_t p = 0; p < fragments_.size(); ++p) fragments_[p].outer.save(s, fragment_name(p, "outer"));
    return s;
  }

  void import_state(IslandContext&, const AlgorithmState& state) override {
    const int64_t round = state.integer("round");
    for (size_t p = 0; p < fragments_.size(); ++p)
      fragments_[p].outer.load(state, fragment_name(p, "outer"), anchor_.device());
    round_ = round;
  }

 private:
  static std::string fragment_name(size_t p, const char* what) {
    return "fragment." + std::to_string(p) + "." + what;
  }
  struct Fragment {
    Fragment(std::vector<Run> r, const StreamingDilocoOptions& options, at::TensorOptions like)
        : runs(std::move(r)), outer(options.outer), feedback(options.error_feedback) {
      int64_t n = 0;
      for (const Run& run : runs) n += run.numel;
      buffer = at::empty({n}, like.device(at::kCPU));
    }
    std::vector<Run> runs;
    OuterOptimizer outer;
    Feedback feedback;
    at::Tensor buffer;  // [n_p] CPU: this island's delta, then the average
    std::unique_ptr<transport::Handle> handle;  // the exchange in flight, if any
    RoundMeter meter;
    int64_t sent_at = 0;
  };

  void send(IslandContext& ctx, int p, int64_t step) {
    Fragment& f = fragments_[static_cast<size_t>(p)];
    TORCH_CHECK(!f.handle, "streaming_diloco: fragment ", p, " sent twice");
    f.meter = RoundMeter(*ctx.group);
    f.buffer.copy_(gather(anchor_, f.runs) - gather(ctx.params, f.runs));
    const double weight = own_.weight_by_shard ? static_cast<double>(ctx.shard_size) : 1.0;
    at::Tensor transmitted = f.feedback.compensate(f.buffer, *ctx.codec);
    f.handle = ctx.group->allreduce_mean(f.buffer, *ctx.codec, weight, transmitted);
    f.sent_at = step;
  }

  void receive(IslandContext& ctx, int p, int64_t step) {
    Fragment& f = fragments_[static_cast<size_t>(p)];
    TORCH_CHECK(f.handle, "streaming_diloco: fragment ", p, " received at step ", step,
                " without a send (an island joined while it was in flight)");
    auto result = f.handle->wait();
    f.handle.reset();
    require_usable(result, ctx, "streaming_diloco all-reduce", step);
    f.feedback.update();
    at::Tensor global = gather(anchor_, f.runs);
    f.outer.step(global, f.buffer.to(global.device()));
    writable(ctx.shared, anchor_);
    scatter(global, f.runs, anchor_);
    anchor_ = share(ctx.shared, anchor_);
    const double alpha = own_.mix_alpha;
    if (alpha == 0) {
      scatter(global, f.runs, ctx.params);
    } else if (alpha != 1) {
      at::Tensor local = gather(ctx.params, f.runs);
      local.mul_(alpha).add_(global, 1 - alpha);
      scatter(local, f.runs, ctx.params);
    }
    ++round_;
    if (ctx.on_round) {
      ctx.on_round(f.meter.finish(*ctx.group, round_, step, static_cast<int>(result.contributors.size()),
                                  f.buffer.norm().item<double>()));
    }
  }

  AlgorithmOptions options_;
  StreamingDilocoOptions own_;
  std::optional<streaming_diloco::Schedule> schedule_;
  at::Tensor anchor_;  // [N] the fragments' outer values, each from its last sync
  std::vector<Fragment> fragments_;
  int64_t round_ = 0;  // fragment syncs so far
};

}  // namespace

std::unique_ptr<Algorithm> make_streaming_diloco(const AlgorithmOptions& options, int) {
  return std::make_unique<StreamingDiLoCo>(options);
}

}  // namespace atl::algorithms
