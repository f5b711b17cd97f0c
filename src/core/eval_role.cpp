#include "src/core/eval_role.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <utility>

namespace atl::core {

EvalRole::EvalRole(Hooks hooks, double patience_s, double settle_every_s)
    : hooks_(std::move(hooks)), patience_s_(patience_s), settle_every_s_(settle_every_s) {}

void EvalRole::at_eval_step(int64_t step, const at::Tensor& global) {
  settle(/*force=*/true);
  if (!kept_.empty() && kept_.back().step >= step) return;  // already kept (e.g. step 0 twice)
  // A step is evaluated by the lead when it gets there; the others keep it until they know.
  if (kept_.empty() && hooks_.is_lead()) {
    if (!hooks_.recorded(step)) hooks_.evaluate(step, global);
    return;
  }
  kept_.push_back({step, hooks_.keep ? hooks_.keep(global) : global.clone(), hooks_.now_s()});
}

void EvalRole::settle(bool force) {
  if (kept_.empty()) return;
  const double now = hooks_.now_s();
  if (!force && now - last_settle_s_ < settle_every_s_) return;
  last_settle_s_ = now;
  // Oldest first: once one is evaluated here, the later ones are too (this island's
  // records keep step order).
  size_t done = 0;
  for (; done < kept_.size(); ++done) {
    Kept& k = kept_[done];
    if (hooks_.recorded(k.step)) continue;
    if (!hooks_.is_lead() && now - k.since_s < patience_s_) break;
    hooks_.evaluate(k.step, k.global);
  }
  kept_.erase(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(done));
}

void EvalRole::drain() {
  while (!kept_.empty()) {
    settle(/*force=*/true);
    if (kept_.empty()) break;
    const double wake = std::min(kept_.front().since_s + patience_s_, hooks_.now_s() + 0.2);
    hooks_.wait(wake);
  }
}

}  // namespace atl::core
