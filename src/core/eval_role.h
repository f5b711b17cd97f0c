// Evaluation of the global model, done by one island for the whole run: the lead, the live
// island with the lowest id (docs/metrics.md, "eval"). Every island holds the same global
// model at a given step (after a sync all survivors apply the same mean; a joiner receives
// the donor's), so any island can evaluate any step.
//
// In a real run the lead can die at any moment, and the others learn it only when the
// coordinator declares it dead (after the heartbeat timeout). EvalRole makes every eval step
// recorded exactly once all the same:
//   - at an eval step the lead evaluates (hooks.evaluate records and marks the step); every
//     other island keeps a copy of that step's global model;
//   - a kept step is dropped once hooks.recorded(step) says its record is in the run's
//     metrics; it is evaluated here when this island has become the lead, or when it has
//     waited `patience_s` (a lower island that is live but never evaluates it, e.g. one that
//     rejoined after that step);
//   - the lead may die between recording a step and marking it, so the record sink keeps
//     the first eval record of a step and drops any later one.
// The simulator knows the lead exactly at every step, but an island ahead of a slow lead
// passes eval steps the lead may die before reaching: it keeps them the same way, with hooks
// that answer from the simulator's own state.
//
// Not thread-safe: used by the island's training thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace atl::core {

class EvalRole {
 public:
  struct Hooks {
    // This island is the lead now (no lower id among the live islands that hold the model).
    std::function<bool()> is_lead;
    // The run's metrics hold an eval record of `step` already.
    std::function<bool(int64_t step)> recorded;
    // Evaluates `global` ([N] flat parameters) as the model of `step`, writes the eval
    // record and marks the step recorded.
    std::function<void(int64_t step, const at::Tensor& global)> evaluate;
    // Seconds on a monotonic clock.
    std::function<double()> now_s;
    // Blocks until the membership may have changed or `deadline_s` (now_s()'s clock) passed.
    std::function<void(double deadline_s)> wait;
    // The copy of a step's global model to keep (empty: a clone). The simulator's many islands
    // keep one copy between them (SharedTensors: equal copies are held once, never written).
    std::function<at::Tensor(const at::Tensor& global)> keep;
  };

  // `patience_s`: how long a kept step waits for the lead before this island evaluates it
  // (infinity: until the lead records it or dies). `settle_every_s`: settle() without
  // force does its work at most this often (recorded() may cost a round trip).
  EvalRole(Hooks hooks, double patience_s, double settle_every_s = 1.0);

  // The island reached eval step `step` with global model `global` (not retained: copied
  // when kept). Settles earlier kept steps first, so records go out in step order.
  void at_eval_step(int64_t step, const at::Tensor& global);
  // Resolves kept steps (see above). Without `force` at most once per settle_every_s; cheap
  // when nothing is kept.
  void settle(bool force = false);
  // At the end of this island's run: settles until nothing is kept (bounded by patience_s).
  void drain();
  size_t kept() const { return kept_.size(); }

 private:
  struct Kept {
    int64_t step;
    at::Tensor global;
    double since_s;
  };
  Hooks hooks_;
  double patience_s_;
  double settle_every_s_;
  double last_settle_s_ = -1e300;
  std::vector<Kept> kept_;  // ascending steps
};

}  // namespace atl::core
