// Evaluates a flat parameter vector on the fixed validation batches with a model instance
// of its own (dropout off, no grad). Used by one thread at a time.
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
  double loss = 0;       // mean cross-entropy per token (LM) or per example
  double accuracy = -1;  // classifiers; -1 for language models
  int64_t count = 0;     // examples (classifiers) or tokens (LMs) evaluated
};

class Evaluator {
 public:
  Evaluator(std::unique_ptr<models::Model> model, std::vector<data::Batch> batches, bool classifier);
  EvalResult evaluate(const at::Tensor& params);

 private:
  std::unique_ptr<models::Model> model_;
  std::vector<data::Batch> batches_;
  bool classifier_;
};

}  // namespace atl::core
