// Streaming DiLoCo (Douillard, Donchev et al., arXiv 2501.18512; docs/algorithms.md §2): the
// fragment layout and the sync schedule, exposed for tests. The algorithm itself is in
// streaming_diloco.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/options.h"

namespace atl::algorithms::streaming_diloco {

// A run of consecutive elements of the flat parameter buffer.
struct Run {
  int64_t offset = 0;
  int64_t numel = 0;
};

// The elements of each of `fragments` fragments, as ascending runs (adjacent ones merged).
// Transformer blocks 0..B-1 are dealt out by `mode`: strided puts block j in fragment
// j mod P; sequential gives fragment p the contiguous blocks [floor(pB/P), floor((p+1)B/P)).
// [impl choice, as Forgather] A range without a block goes to the first fragment when it
// precedes every block in the buffer (embeddings; a tied embedding/head tensor is stored
// there once) and to the last fragment otherwise (final norm, head).
// An empty `layout` stands for one range [0, numel) without a block.
// Throws atl::UserError when there are fewer blocks than fragments (a model without
// blocks can only be one fragment).
std::vector<std::vector<Run>> assign_fragments(const std::vector<ParamRange>& layout,
                                               int64_t numel, int fragments, FragmentMode mode);

// When fragments are sent and received. Fragment p has offset t_p = floor(p H / P) and is
// sent after inner step t when t >= H and (t - t_p) mod H == 0 (the paper's schedule: the
// first send of fragment 0 is at t = H, of fragment p at t_p + H); its averaged outer
// gradient is received tau steps later. A send whose receive would fall after the last
// step is not made (the last step's flush covers those steps instead).
class Schedule {
 public:
  // The rule the constructor enforces, as a problem of its key; empty when it holds.
  static std::optional<OptionProblem> check(int64_t inner_steps, int fragments,
                                            int64_t overlap_steps);
  // Throws atl::UserError unless 1 <= P <= H and tau < the smallest gap between two
  // consecutive fragment offsets (= H/P when P divides H), so that at most one fragment is
  // in flight at a time.
  Schedule(int64_t inner_steps, int fragments, int64_t overlap_steps, int64_t last_step);
  int64_t offset(int fragment) const { return offsets_[fragment]; }
  // The fragment sent after `step`, or -1.
  int sends_at(int64_t step) const;
  // The fragment received after `step`, or -1.
  int receives_at(int64_t step) const;
  int64_t last_step() const { return last_step_; }

 private:
  int fragment_at_offset(int64_t step) const;
  int64_t h_;
  int64_t tau_;
  int64_t last_step_;
  std::vector<int64_t> offsets_;
};

}  // namespace atl::algorithms::streaming_diloco
