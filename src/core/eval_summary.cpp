#include "src/core/eval_summary.h"

#include <algorithm>
#include <string>
#include <type_traits>

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

std::optional<EvalResult> EvalSummary::add_path(int64_t step, const EvalResult& r) {
  if (r.path < 0 || r.paths <= 0 || !path_results_.emplace(std::make_pair(step, r.path), r).second) return std::nullopt;
  EvalResult routed;
  routed.paths = r.paths;
  double sum = 0;
  for (int p = 0; p < r.paths; ++p) {
    auto it = path_results_.find({step, p});
    if (it == path_results_.end()) return std::nullopt;  // a path still to come
    const EvalResult& e = it->second;
    if (e.count > 0) {
      sum += e.loss * static_cast<double>(e.count);
      routed.count += e.count;
    }
    routed.path_losses.push_back(e.loss);
    routed.path_tokens.push_back(e.count);
    routed.path_sequences.push_back(e.sequences);
    routed.path_train_sequences.push_back(e.train_sequences);
  }
  routed.loss = routed.count > 0 ? sum / static_cast<double>(routed.count) : NAN;
  if (step >= last_step_) last_routed_ = routed;  // add() of this step follows
  return routed;
}

void EvalSummary::restore(const Saved& s) {
  steps_ = {s.steps.begin(), s.steps.end()};
  last_step_ = s.last_step;
  last_loss_ = s.last_loss;
  last_accuracy_ = s.last_accuracy;
  best_loss_ = s.best_loss;
  path_results_.clear();
  last_routed_ = EvalResult{};
  // Replayed in order: the routed result of the latest complete step comes back with them.
  for (const auto& [step, r] : s.path_results) {
    std::optional<EvalResult> routed = add_path(step, r);
    if (routed && step == last_step_) last_routed_ = *routed;
  }
  if (last_routed_.paths > 0 && !evaluated(last_step_)) last_routed_ = EvalResult{};
}

void EvalSummary::add_fields(JsonObject& summary, int64_t final_step, bool classifier) const {
  summary.add("final_val_loss", final_loss(final_step))
      .add("last_val_loss", last_loss_)
      .add("last_eval_step", last_step_)
      .add("best_val_loss", best_loss_);
  if (classifier) summary.add("final_val_accuracy", final_accuracy(final_step));
  if (last_routed_.paths > 0) {
    auto list = [&](const auto& v) {
      if (!is_final(final_step)) return std::string("null");
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ",";
        if constexpr (std::is_floating_point_v<typename std::decay_t<decltype(v)>::value_type>) {
          out += json_number(v[i]);
        } else {
          out += std::to_string(v[i]);
        }
      }
      return out + "]";
    };
    summary.add("paths", last_routed_.paths)
        .add_raw("path_val_losses", list(last_routed_.path_losses))
        .add_raw("path_tokens", list(last_routed_.path_tokens))
        .add_raw("path_sequences", list(last_routed_.path_sequences))
        .add_raw("path_train_sequences", list(last_routed_.path_train_sequences));
  }
}

}  // namespace atl::core
