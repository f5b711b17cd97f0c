#include "src/core/eval_summary.h"

#include <algorithm>

namespace atl::core {

bool EvalSummary::add(int64_t step, double val_loss, double val_accuracy) {
  if (!steps_.insert(step).second) return false;
  best_loss_ = std::fmin(best_loss_, val_loss);
  if (step >= last_step_) {
    last_step_ = step;
    last_loss_ = val_loss;
    last_accuracy_ = val_accuracy;
  }
  return true;
}

void EvalSummary::add_fields(JsonObject& summary, int64_t final_step, bool classifier) const {
  summary.add("final_val_loss", final_loss(final_step))
      .add("last_val_loss", last_loss_)
      .add("last_eval_step", last_step_)
      .add("best_val_loss", best_loss_);
  if (classifier) summary.add("final_val_accuracy", final_accuracy(final_step));
}

}  // namespace atl::core
