// What summary.json says about a run's evaluations (docs/metrics.md "summary.json"), the same
// in `atoll simulate` and the coordinator of real runs: which steps have an eval record (one
// per step), the latest eval by step (records may arrive out of step order when the lead
// role moves), the best one, and the final one: the eval at the step the run ended on, or
// none (NaN, written as null) when the latest eval is elsewhere.
//
// Not thread-safe (the coordinator guards it).
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "src/core/evaluator.h"
#include "src/core/json.h"

namespace atl::core {

class EvalSummary {
 public:
  // Takes the eval of `step`; false (and ignored) when that step has one already.
  bool add(int64_t step, double val_loss, double val_accuracy);
  bool evaluated(int64_t step) const { return steps_.count(step) > 0; }
  // Several paths (a routed evaluation): takes one path's result of `step` (r.path,
  // r.paths = P, its tokens, sequences and training shard; a second one of the same step and
  // path is ignored). When it is the step's last missing path, returns the routed result:
  // loss = sum_p loss_p tokens_p / sum_p tokens_p over the paths with tokens (in path order),
  // tokens summed, the per-path lists filled; the caller records it and add()s it.
  std::optional<EvalResult> add_path(int64_t step, const EvalResult& r);
  // Whether `path`'s result of `step` was taken (path < 0: evaluated(step)).
  bool evaluated(int64_t step, int path) const {
    return path < 0 ? evaluated(step) : path_results_.count({step, path}) > 0;
  }
  // Records taken so far: evals and path evals (grows with each).
  size_t count() const { return steps_.size() + path_results_.size(); }
  int64_t last_step() const { return last_step_; }  // -1: none
  double last_loss() const { return last_loss_; }
  double best_loss() const { return best_loss_; }
  // The eval at `final_step` if it is the latest one, else NaN (also for final_step < 0).
  double final_loss(int64_t final_step) const { return is_final(final_step) ? last_loss_ : NAN; }
  double final_accuracy(int64_t final_step) const { return is_final(final_step) ? last_accuracy_ : NAN; }
  // Appends final_val_loss, last_val_loss, last_eval_step and best_val_loss, and with
  // `classifier` final_val_accuracy; after routed evals, the latest one's paths,
  // path_val_losses, path_tokens, path_sequences and path_train_sequences (null when
  // final_val_loss is).
  void add_fields(JsonObject& summary, int64_t final_step, bool classifier) const;

  // Everything above as plain values, and back (checkpoints).
  struct Saved {
    std::vector<int64_t> steps;  // ascending
    int64_t last_step = -1;
    double last_loss = NAN, last_accuracy = -1, best_loss = INFINITY;
    // Several paths: the path results taken, (step, result) ascending by (step, path); empty otherwise.
    std::vector<std::pair<int64_t, EvalResult>> path_results;
  };
  Saved saved() const {
    Saved s{{steps_.begin(), steps_.end()}, last_step_, last_loss_, last_accuracy_, best_loss_, {}};
    for (const auto& [key, r] : path_results_) s.path_results.emplace_back(key.first, r);
    return s;
  }
  void restore(const Saved& s);

 private:
  bool is_final(int64_t final_step) const { return final_step >= 0 && last_step_ == final_step; }
  std::set<int64_t> steps_;
  std::map<std::pair<int64_t, int>, EvalResult> path_results_;  // (step, path) -> path result
  EvalResult last_routed_;  // the routed result of last_step_ (paths 0: none)
  int64_t last_step_ = -1;
  double last_loss_ = NAN, last_accuracy_ = -1, best_loss_ = INFINITY;
};

}  // namespace atl::core
