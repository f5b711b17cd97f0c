// Checkpoint cuts of both modes (docs/checkpoints.md): when each island's cuts fall
// (CheckpointSchedule) and how the islands gather at one (CheckpointGathering).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace atl::core {

// When one island's checkpoints fall (docs/checkpoints.md), the rule of both modes: at every
// checkpoint.every-th step boundary where the algorithm can checkpoint, or, for algorithms
// cut at server interactions, at each multiple of checkpoint.every rounds (fedavg) or nominal
// steps of virtual time (async_local_sgd) that the island's next pull or push reaches. The
// islands then gather at a cut through CheckpointGathering below. Each island holds its own.
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
  // A hand-over at `step`: the next cut due is the next multiple after it (and the boundaries
  // remembered before it are no longer this island's).
  void restart_after(int64_t step) {
    due_ = next_after(step);
    cuttable_.clear();
    seen_from_ = -1;
  }
  // One more cut, off the multiples, at the boundary after `step` or the first one after it
  // where the algorithm can cut (as for the scheduled cuts): a real run's checkpoint asked by a
  // signal (docs/checkpoints.md "A checkpoint on a signal"). CheckpointCut::kStep only.
  // Returns 0 when it is taken so. An island that learns of the cut late may have passed that
  // boundary already: then it returns that boundary's step, where the other islands cut and
  // this one can only mark the cut as not written by it (`step` itself when this island did
  // not see every boundary since: it started after it).
  int64_t add_cut(int64_t step);
  int64_t extra() const { return extra_; }
  // The first cut still due (0 with checkpoints off).
  int64_t due() const { return due_; }

 private:
  int64_t next_after(int64_t step) const { return every_ > 0 ? (step / every_ + 1) * every_ : 0; }
  int64_t every_;
  double cut_unit_s_;
  int64_t due_;  // the first cut still due
  int64_t extra_ = 0;  // add_cut's, until taken (0: none)
  // The recent boundaries where a step cut could be taken (ascending, at most kRemembered),
  // complete from seen_from_ on (-1: no boundary seen yet).
  static constexpr size_t kRemembered = 4096;
  std::deque<int64_t> cuttable_;
  int64_t seen_from_ = -1;
};

// Which islands have reached each checkpoint cut, and when a cut is done: the gathering of
// both modes (docs/checkpoints.md "Gathering"). An island that reaches a cut marks it (saying
// why its own part was not written, if it was not) and waits until the cut is done. A cut is
// done, oldest first, once every island that takes part and is due at it has marked it; it is
// then written — the mode's run-level part: the simulator's file of the whole simulated run, a
// real run's coordinator file — or skipped: when an island that takes part is not due at it
// (it was handed over after the cut: its state is no checkpoint's), or when the mode's skip
// hook says why not.
//
// The modes supply who takes part (the simulator's running islands, a real run's members in
// collectives), how a mark arrives (a call on the island's scheduler thread in the simulator;
// the coordinator's store in a real run, checkpoint_mark_key) and how the waiting islands are
// released (the scheduler; the coordinator's done key).
//
// Not thread-safe: the simulator calls it holding the scheduler's turn, the coordinator under
// its marks mutex.
class CheckpointGathering {
 public:
  struct Hooks {
    // Whether island `i`, taking part and not marked, is due at `cut` (waited for) or not
    // (the cut is skipped). Unset: every island is due.
    std::function<bool(int i, int64_t cut)> due;
    // Non-empty: why the cut of `cut` cannot be written, although every island is at it.
    std::function<std::string(int64_t cut)> skip;
  };
  // A cut that is done.
  struct Cut {
    int64_t step = 0;
    std::string skipped;                   // non-empty: not written, and why
    std::map<int, std::string> failures;  // islands whose own part was not written, and why
  };
  // `done`: the newest cut already done (a resumed run's step; -1: none); marks up to it are
  // ignored.
  explicit CheckpointGathering(int64_t done = -1, Hooks hooks = {}) : hooks_(std::move(hooks)), done_(done) {}

  // Island `i` reached `cut`; `failure`: why its own part was not written ("": it was; a
  // repeated mark keeps a failure said before). False when the cut is done already (the mark
  // is ignored: the island goes on).
  bool mark(int i, int64_t cut, std::string failure = {});
  // The cuts done now that `taking_part` (ascending) are the islands taking part, oldest first:
  // to be written (or logged as skipped) by the caller, in order. None while nobody takes part.
  std::vector<Cut> complete(const std::vector<int>& taking_part);
  // A cut given up (one a restarted coordinator had not finished): done, unwritten.
  void give_up(int64_t cut);
  bool done(int64_t cut) const { return cut <= done_; }

 private:
  Hooks hooks_;
  int64_t done_;
  std::map<int64_t, std::map<int, std::string>> marks_;  // cut -> island -> its failure
};

}  // namespace atl::core
