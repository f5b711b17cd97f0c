// Pieces every outer exchange shares: error feedback around a lossy codec, and one round's
// byte accounting. Owned by one island; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include "algorithms/algorithm.h"
#include "algorithms/outer_optimizer.h"
#include "compression/error_feedback.h"
#include "compression/pipeline.h"
#include "transport/group.h"

namespace atl::algorithms {

// Error feedback for one island's outer exchange. Active only for lossy codecs with
// feedback enabled; otherwise every call is a no-op.
//   at::Tensor t = fb.compensate(delta, codec);        // delta += residual
//   group.allreduce_mean(delta, codec, w, t)->wait();   // t <- what the others decoded
//   fb.update();                                        // residual = sent - t
class Feedback {
 public:
  explicit Feedback(bool enabled) : enabled_(enabled) {}
  // Returns the `transmitted` buffer to hand to the collective (undefined when inactive).
  at::Tensor compensate(at::Tensor& delta, const compression::Pipeline& codec);
  void update();
  // The residual (undefined before the first lossy round) and back, for checkpoints.
  const at::Tensor& residual() const { return ef_.residual(); }
  void load(const at::Tensor& residual) {
    if (residual.defined()) ef_.load(residual);
  }
  // Between compensate() and update() (an exchange in flight across a checkpoint): whether
  // the round is compensated, what was sent and what the others decoded, and back.
  bool active() const { return active_; }
  const at::Tensor& sent() const { return sent_; }
  const at::Tensor& transmitted() const { return transmitted_; }
  void load_in_flight(bool active, const at::Tensor& sent, const at::Tensor& transmitted) {
    active_ = active;
    sent_ = sent.defined() ? sent.clone() : sent;
    transmitted_ = transmitted.defined() ? transmitted.clone() : transmitted;
  }

 private:
  bool enabled_;
  bool active_ = false;
  compression::ErrorFeedback ef_;
  at::Tensor sent_, transmitted_;
};

// Checks the outcome of an exchange this island's round depends on. Usable: ok, or, for
// collectives (`survivors_ok`), any result with at least one contributor (kPeerLost: the
// survivors' average; docs/algorithms.md §1, §8). Anything else (a timeout, every member
// lost, a failed push or pull) is an expected WAN outcome that ends this island's run: it
// is thrown as atl::StatusError with the context "island I: WHAT at step S" (one line, see
// docs/errors.md), never as a TORCH_CHECK.
void require_usable(const transport::CollectiveResult& result, const IslandContext& ctx,
                    const char* what, int64_t step, bool survivors_ok = true);

// Measures one round on a group: construct before the exchange, finish() after.
// The part of a checkpoint that the algorithms with one anchor and one outer optimizer share
// (DiLoCo and DiLoCo per module): "round", "anchor" and the outer optimizer's "outer.*"
// (OuterOptimizer::save); the algorithm adds its own entries. load_anchor_and_outer reads
// them back (the anchor in place, the outer state on the anchor's device).
AlgorithmCheckpoint anchor_and_outer(int64_t round, const at::Tensor& anchor, const OuterOptimizer& outer);
void load_anchor_and_outer(const AlgorithmCheckpoint& s, int64_t& round, at::Tensor& anchor, OuterOptimizer& outer);
// Their hand-over, a named subset of that checkpoint state: "round" and "outer.*" (a joiner
// takes the anchor as the global model). import_round_and_outer reads it back, the outer state
// onto `device`.
AlgorithmState round_and_outer(const AlgorithmCheckpoint& state);
void import_round_and_outer(const AlgorithmState& s, int64_t& round, OuterOptimizer& outer, c10::Device device);

class RoundMeter {
 public:
  RoundMeter() = default;
  explicit RoundMeter(const transport::Group& group)
      : before_(group.bytes()), members_(static_cast<int>(group.view().members.size())) {}
  // A round in flight across a checkpoint: its counters at the start, and back.
  RoundMeter(transport::ByteCounters before, int members) : before_(before), members_(members) {}
  const transport::ByteCounters& before() const { return before_; }
  int members() const { return members_; }
  RoundInfo finish(const transport::Group& group, int64_t round, int64_t step, int contributors,
                   double outer_grad_norm = 0) const;

 private:
  transport::ByteCounters before_;
  int members_ = 0;
};

}  // namespace atl::algorithms
