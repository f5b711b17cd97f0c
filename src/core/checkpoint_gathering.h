// The simulator's checkpoint gathering (docs/checkpoints.md "Resuming"): where each island
// arrives at a due checkpoint and waits, and when the last expected one has arrived. At each
// cut of its CheckpointSchedule each live island arrives and waits; the last to arrive (every
// exchange is posted and complete by then) writes, then everyone goes on in the scheduler's order, as
// a resumed run starts. An island killed while the others wait, or whose thread is done,
// completes the gathering instead of arriving. A checkpoint is skipped (not written; the run
// goes on alike) while a joiner is between its join time and its first step, or when the
// simulator says so (async_local_sgd: a push in flight across the cut).
//
// Threads: called by the island holding the scheduler's turn (one at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace atl::core {

// When one island's checkpoints fall (docs/checkpoints.md), the rule of both modes: at every
// checkpoint.every-th step boundary where the algorithm can checkpoint, or, for algorithms
// cut at server interactions, at each multiple of checkpoint.every rounds (fedavg) or nominal
// steps of virtual time (async_local_sgd) that the island's next pull or push reaches. How the
// islands then gather at a cut is the mode's own: CheckpointGathering below in the
// simulator, the coordinator's store marks in real runs (src/run/island_process.cpp).
class CheckpointSchedule {
 public:
  // `every`: checkpoint.every (0: none); `after_step`: the step the island starts after (a
  // resumed checkpoint's, a hand-over's; 0 for a fresh start): the first cut due is the next
  // multiple; `cut_unit_s`: the virtual seconds of a nominal step (CheckpointCut::kServerTime).
  explicit CheckpointSchedule(int64_t every = 0, int64_t after_step = 0, double cut_unit_s = 1.0)
      : every_(every), cut_unit_s_(cut_unit_s), due_(next_after(after_step)) {}

  // The cuts due at the boundary after `step` (of `total`; a server-cut algorithm also before
  // each server call), oldest first: each is taken from the schedule.
  std::vector<int64_t> take_due(const algorithms::Algorithm& algorithm, int64_t step, int64_t total);
  // A hand-over at `step`: the next cut due is the next multiple after it.
  void restart_after(int64_t step) { due_ = next_after(step); }
  // One more cut, off the multiples, at the boundary after `step` (or the first one after it
  // where the algorithm can cut, as for the scheduled cuts): a real run's checkpoint asked by
  // a signal (docs/checkpoints.md "A checkpoint on a signal"). CheckpointCut::kStep only.
  void add_cut(int64_t step) { extra_ = step; }
  int64_t extra() const { return extra_; }
  // The first cut still due (0 with checkpoints off).
  int64_t due() const { return due_; }

 private:
  int64_t next_after(int64_t step) const { return every_ > 0 ? (step / every_ + 1) * every_ : 0; }
  int64_t every_;
  double cut_unit_s_;
  int64_t due_;  // the first cut still due
  int64_t extra_ = 0;  // add_cut's, until taken (0: none)
};

class CheckpointGathering {
 public:
  struct Hooks {
    std::function<bool(int island)> alive;    // a live member
    std::function<bool(int island)> joining;  // between its join time and its first step
    // Non-empty: why the checkpoint of `cut` cannot be written (besides a joiner).
    std::function<std::string(int64_t cut)> skip;
    std::function<void(int64_t cut)> write;
    // The scheduler: island waits until ready(); island lets earlier ones go first.
    std::function<void(int island, const std::function<bool()>& ready, const std::string& what)> block;
    std::function<void(int island)> yield;
  };
  // `every`: checkpoint.every (0: none); `resumed_step`: the step of the checkpoint a resumed
  // run started from (0: a fresh run); `cut_unit_s`: the virtual seconds of a nominal step
  // of the fastest island (CheckpointCut::kServerTime positions).
  CheckpointGathering(int islands, int64_t every, int64_t resumed_step, double cut_unit_s, Hooks hooks);

  // Island `i` at its boundary after `step` (of `total`; a server-cut algorithm also before
  // each server call): arrives at every checkpoint due there, and waits for the others.
  void at_boundary(int i, const algorithms::Algorithm& algorithm, int64_t step, int64_t total);
  // Island `i` died (done: its thread finished too, it is waited for no more): it may
  // complete a gathering that waited only for it.
  void left(int i, bool done);
  // A resumed island that had finished before the checkpoint: never waited for.
  void finished_before(int i) { gone_[static_cast<size_t>(i)] = 1; }
  // A joiner handed over at `step`: due at the next multiple after it.
  void joined_after(int i, int64_t step);
  // The virtual time of cut `cut` (CheckpointCut::kServerTime).
  double cut_time_s(int64_t cut) const { return static_cast<double>(cut) * cut_unit_s_; }

 private:
  int expected_at(int64_t step) const;
  void complete(int64_t step);
  void arrive(int i, int64_t step);

  const double cut_unit_s_;
  Hooks hooks_;
  int64_t step_ = 0;  // the step being gathered
  int arrived_ = 0;
  int64_t done_ = 0;            // the newest checkpoint's step (written or skipped)
  std::vector<char> arrived_at_;  // islands at the gathered step
  std::vector<char> gone_;        // islands whose thread is done: waited for no more
  std::vector<CheckpointSchedule> due_;  // per island: its cuts still due
};

}  // namespace atl::core
