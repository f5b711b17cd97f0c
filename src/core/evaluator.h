// Evaluates a flat parameter vector on fixed validation batches with a model instance of its
// own (dropout off, no grad). Used by one thread at a time.
//
// Two kinds: the whole (selected) validation split, or a routed evaluation of several paths
// (docs/architecture.md "Runs of several models"): the selected sequences dealt to paths by the router,
// and a path's parameters evaluated on its own sequences only.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "src/data/dataset.h"
#include "src/models/model.h"

namespace atl::core {

// Means over every example (token) of the batches: each batch weighs what it holds, so a
// short last batch (data::validation_batches over the whole split) counts exactly once.
struct EvalResult {
  double loss = 0;       // mean cross-entropy per token (LM) or per example; NaN: nothing evaluated
  double accuracy = -1;  // classifiers; -1 for language models
  int64_t count = 0;     // examples (classifiers) or tokens (LMs) evaluated
  // A routed evaluation. A path's result: `path` >= 0, `paths` = P, `sequences` its
  // routed validation sequences, `train_sequences` its training shard. The routed result
  // (EvalSummary::add_path combines the P path results of a step): path -1, paths = P, loss
  // the token-weighted mean over every routed sequence, and per path, in path order:
  int path = -1;
  int paths = 0;
  int64_t sequences = 0;
  int64_t train_sequences = 0;
  std::vector<double> path_losses;            // NaN: a path with no sequence
  std::vector<int64_t> path_tokens, path_sequences, path_train_sequences;
};

class Evaluator {
 public:
  // The whole-split evaluator.
  Evaluator(std::unique_ptr<models::Model> model, std::vector<data::Batch> batches, bool classifier);
  // Routed: batches_by_path[p] holds path p's sequences (possibly none), train_sizes[p] its
  // training shard.
  Evaluator(std::unique_ptr<models::Model> model, std::vector<std::vector<data::Batch>> batches_by_path,
            std::vector<int64_t> train_sizes, bool classifier);

  // P for a routed evaluator, 0 for a whole-split one.
  int paths() const { return routed_ ? static_cast<int>(routings_.front().batches.size()) : 0; }
  // Whole split (path < 0; a routed evaluator requires a path), or path `path`'s sequences
  // with `params` as that path's parameters, under the routing in effect at `step`.
  EvalResult evaluate(const at::Tensor& params, int path = -1, int64_t step = 0);
  // Per-sequence mean loss of `params` on `batches` (LMs; each batch's targets from its
  // score_from on), in batch order: a re-routing scores sequences so.
  std::vector<double> sequence_losses(const at::Tensor& params, const std::vector<data::Batch>& batches);
  // A re-routing: from `from_step` on (steps >= it), a routed evaluator uses these
  // batches and shard sizes (same shapes as the constructor's); earlier steps keep the
  // routing they had, so a step evaluated late is evaluated as it would have been on time.
  // A second call with the same from_step is ignored (every island re-routes alike).
  void reroute(int64_t from_step, std::vector<std::vector<data::Batch>> batches_by_path,
               std::vector<int64_t> train_sizes);

 private:
  struct Routing {
    int64_t from_step = 0;
    std::vector<std::vector<data::Batch>> batches;  // [1] whole split, or [P] routed
    std::vector<int64_t> train_sizes;               // [P] routed
  };
  std::unique_ptr<models::Model> model_;
  std::vector<Routing> routings_;  // ascending from_step; the first from step 0
  bool classifier_;
  bool routed_ = false;
};

}  // namespace atl::core
