#include "src/core/checkpoint_gathering.h"

#include <cmath>

#include "src/base/log.h"

namespace atl::core {

CheckpointGathering::CheckpointGathering(int islands, int64_t every, int64_t resumed_step, double cut_unit_s,
                                         Hooks hooks)
    : cut_unit_s_(cut_unit_s),
      hooks_(std::move(hooks)),
      done_(resumed_step),
      arrived_at_(static_cast<size_t>(islands), 0),
      gone_(static_cast<size_t>(islands), 0),
      due_(static_cast<size_t>(islands), CheckpointSchedule(every, resumed_step, cut_unit_s)) {}

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
  if (step < total && a.can_checkpoint()) {
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

// The islands the checkpoint of `step` waits for: alive, thread not done, and due at it (a
// joiner that came in at `step` itself is due only at the next one).
int CheckpointGathering::expected_at(int64_t step) const {
  int expected = 0;
  for (size_t j = 0; j < gone_.size(); ++j)
    expected += hooks_.alive(static_cast<int>(j)) && !gone_[j] && (arrived_at_[j] || due_[j].due() <= step);
  return expected;
}

// Every expected island is there: write (unless skipped), release them.
void CheckpointGathering::complete(int64_t step) {
  std::string skip;
  for (size_t j = 0; j < gone_.size() && skip.empty(); ++j) {
    const int i = static_cast<int>(j);
    if (hooks_.joining(i) || !(arrived_at_[j] || !hooks_.alive(i) || gone_[j])) skip = "an island is joining";
  }
  if (skip.empty() && hooks_.skip) skip = hooks_.skip(step);
  if (skip.empty()) hooks_.write(step);
  else ATOLL_DEBUG("checkpoint of step " << step << " skipped: " << skip);
  arrived_at_.assign(arrived_at_.size(), 0);
  done_ = step;
}

void CheckpointGathering::arrive(int i, int64_t step) {
  if (step <= done_) return;  // already taken (or skipped) without this island
  if (step_ != step) {
    step_ = step;
    arrived_ = 0;
  }
  arrived_at_[static_cast<size_t>(i)] = 1;
  if (++arrived_ < expected_at(step)) {
    hooks_.block(i, [this, step] { return done_ >= step; }, "the others to reach the checkpoint of " + std::to_string(step));
    return;
  }
  complete(step);
  hooks_.yield(i);  // the next to run is the one a resumed run starts with
}

void CheckpointGathering::left(int i, bool done) {
  if (done) gone_[static_cast<size_t>(i)] = 1;
  if (step_ > done_ && arrived_ > 0 && arrived_ >= expected_at(step_)) complete(step_);
}

void CheckpointGathering::joined_after(int i, int64_t step) { due_[static_cast<size_t>(i)].restart_after(step); }

void CheckpointGathering::at_boundary(int i, const algorithms::Algorithm& a, int64_t step, int64_t total) {
  for (int64_t cut : due_[static_cast<size_t>(i)].take_due(a, step, total)) arrive(i, cut);
}

}  // namespace atl::core
