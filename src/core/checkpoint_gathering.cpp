#include "src/core/checkpoint_gathering.h"

#include <algorithm>
#include <cmath>

namespace atl::core {

std::vector<int64_t> CheckpointSchedule::take_due(const algorithms::Algorithm& a, int64_t step, int64_t total) {
  std::vector<int64_t> cuts;
  if (every_ <= 0 && extra_ <= 0) return cuts;
  if (const auto kind = a.checkpoint_cut(); kind != algorithms::CheckpointCut::kStep) {
    if (every_ <= 0) return cuts;  // add_cut is for step cuts
    const double at = a.checkpoint_position(step);
    const auto position = static_cast<int64_t>(
        at < 0 ? -1 : kind == algorithms::CheckpointCut::kServerRound ? at : std::floor(at / cut_unit_s_ + 1e-9));
    for (; position >= 0 && position >= due_; due_ += every_) cuts.push_back(due_);
    return cuts;
  }
  if (seen_from_ < 0) seen_from_ = step;
  if (step < total && a.can_checkpoint()) {
    if (cuttable_.empty() || cuttable_.back() < step) cuttable_.push_back(step);
    if (cuttable_.size() > kRemembered) {
      seen_from_ = cuttable_.front() + 1;
      cuttable_.pop_front();
    }
    if (every_ > 0 && step >= due_) {
      due_ = next_after(step);
      cuts.push_back(step);
    }
    if (extra_ > 0 && step >= extra_) {
      if (cuts.empty()) cuts.push_back(step);  // one file for both when they fall together
      extra_ = 0;
    }
  }
  return cuts;
}

bool CheckpointGathering::mark(int i, int64_t cut, std::string failure) {
  if (done(cut)) return false;
  std::string& why = marks_[cut][i];
  if (why.empty()) why = std::move(failure);  // a repeated mark keeps the failure said first
  return true;
}

int64_t CheckpointSchedule::add_cut(int64_t step) {
  if (seen_from_ >= 0 && step < seen_from_) return step;  // before this island's boundaries
  const auto passed = std::lower_bound(cuttable_.begin(), cuttable_.end(), step);
  if (passed != cuttable_.end()) return *passed;
  extra_ = step;
  return 0;
}

void CheckpointGathering::give_up(int64_t cut) {
  done_ = std::max(done_, cut);
  marks_.erase(marks_.begin(), marks_.upper_bound(done_));
}

std::vector<CheckpointGathering::Cut> CheckpointGathering::complete(const std::vector<int>& taking_part) {
  std::vector<Cut> cuts;
  if (taking_part.empty()) return cuts;
  while (!marks_.empty()) {
    auto& [step, marked] = *marks_.begin();
    Cut cut{step, "", {}};
    for (int i : taking_part) {
      if (marked.count(i)) continue;
      if (!hooks_.due || hooks_.due(i, step)) return cuts;  // waited for
      if (cut.skipped.empty()) cut.skipped = "island " + std::to_string(i) + " was handed over after it";
    }
    if (cut.skipped.empty() && hooks_.skip) cut.skipped = hooks_.skip(step);
    for (auto& [i, why] : marked)
      if (!why.empty()) cut.failures[i] = std::move(why);
    done_ = std::max(done_, step);
    marks_.erase(marks_.begin());
    cuts.push_back(std::move(cut));
  }
  return cuts;
}

}  // namespace atl::core
