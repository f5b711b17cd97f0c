#include "src/run/run_totals.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "src/core/records.h"

namespace atl::run {

bool RunTotals::add(const std::string& json, std::string* routed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (routed != nullptr) routed->clear();
  const auto event = core::json_find_string(json, "event");
  if (!event) return true;
  if (*event == "path_eval") {
    auto num = [&](const char* key) { return core::json_find_number(json, key); };
    core::EvalResult r;
    r.path = static_cast<int>(num("path").value_or(-1));
    r.paths = static_cast<int>(num("paths").value_or(0));
    r.loss = num("val_loss").value_or(NAN);
    r.count = static_cast<int64_t>(num("tokens").value_or(0));
    r.sequences = static_cast<int64_t>(num("sequences").value_or(0));
    r.train_sequences = static_cast<int64_t>(num("train_sequences").value_or(0));
    const int64_t step = static_cast<int64_t>(num("step").value_or(-1));
    if (evals_.evaluated(step, r.path)) return false;  // a second record of the step's path
    std::optional<core::EvalResult> all = evals_.add_path(step, r);
    if (all && routed != nullptr) {
      *routed = core::eval_record(-1, step, *all, false, static_cast<uint64_t>(num("bytes_sent_total").value_or(0)),
                                  core::RecordTime{num("wall_time_s").value_or(0), NAN});
    }
  } else if (*event == "eval") {
    return evals_.add(static_cast<int64_t>(core::json_find_number(json, "step").value_or(-1)),
                      core::json_find_number(json, "val_loss").value_or(NAN),
                      core::json_find_number(json, "val_accuracy").value_or(-1));
  } else if (*event == "round") {
    if (auto r = core::json_find_number(json, "round")) rounds_ = std::max(rounds_, static_cast<int64_t>(*r));
  } else if (*event == "island_end") {
    ++finished_;
    bytes_sent_ += static_cast<uint64_t>(core::json_find_number(json, "bytes_sent").value_or(0));
    bytes_recv_ += static_cast<uint64_t>(core::json_find_number(json, "bytes_recv").value_or(0));
    raw_sent_ += static_cast<uint64_t>(core::json_find_number(json, "raw_sent").value_or(0));
    steps_ = std::max(steps_, static_cast<int64_t>(core::json_find_number(json, "steps").value_or(0)));
  }
  return true;
}

bool RunTotals::evaluated(int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  return evals_.evaluated(step);
}

int RunTotals::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void RunTotals::add_summary(core::JsonObject& s, int64_t final_step, bool classifier) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The islands' global model: the final eval is the one at the last step an island finished.
  if (final_step < 0 && finished_ > 0) final_step = steps_;
  s.add("steps", steps_).add("rounds", rounds_).add("islands_finished", finished_);
  evals_.add_fields(s, final_step, classifier);
  s.add("bytes_sent_total", bytes_sent_)
      .add("bytes_recv_total", bytes_recv_)
      .add("compression_ratio",
           bytes_sent_ > 0 ? static_cast<double>(raw_sent_) / static_cast<double>(bytes_sent_) : 1.0);
}

}  // namespace atl::run
