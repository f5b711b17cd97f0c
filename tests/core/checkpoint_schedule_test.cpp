// When an island's checkpoints fall (core::CheckpointSchedule, the rule of both modes):
// step cuts at multiples of checkpoint.every where the algorithm can checkpoint, server-round
// and virtual-time cuts up to the position of the next server call, after a resume or a
// hand-over from the next multiple on.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "src/core/checkpoint_gathering.h"

namespace atl::core {
namespace {

class Cuts final : public algorithms::Algorithm {
 public:
  std::string name() const override { return "cuts"; }
  void setup(algorithms::IslandContext&) override {}
  at::Tensor global_params() const override { return {}; }
  bool can_checkpoint() const override { return can; }
  algorithms::CheckpointCut checkpoint_cut() const override { return cut; }
  double checkpoint_position(int64_t step) const override {
    return cut == algorithms::CheckpointCut::kStep ? static_cast<double>(step) : position;
  }
  bool can = true;
  algorithms::CheckpointCut cut = algorithms::CheckpointCut::kStep;
  double position = -1;
};

using V = std::vector<int64_t>;

TEST(CheckpointSchedule, StepCutsAtMultiplesWhereTheAlgorithmCan) {
  Cuts a;
  CheckpointSchedule s(4);
  EXPECT_EQ(s.take_due(a, 3, 20), V{});
  EXPECT_EQ(s.take_due(a, 4, 20), V{4});
  a.can = false;  // an exchange in flight: the due cut moves to the next boundary that can
  EXPECT_EQ(s.take_due(a, 8, 20), V{});
  a.can = true;
  EXPECT_EQ(s.take_due(a, 9, 20), V{9});
  EXPECT_EQ(s.take_due(a, 11, 20), V{});
  EXPECT_EQ(s.take_due(a, 12, 20), V{12});
  EXPECT_EQ(s.take_due(a, 20, 20), V{}) << "never at the last step";
  CheckpointSchedule off(0);
  EXPECT_EQ(off.take_due(a, 4, 20), V{});
}

// A cut asked by a signal, off the multiples: taken once at its step (or at the next boundary
// that can cut), one file when it falls on a multiple; the multiples go on.
TEST(CheckpointSchedule, AnAddedCutIsTakenOnceBesideTheMultiples) {
  Cuts a;
  CheckpointSchedule s(10);
  s.add_cut(13);
  EXPECT_EQ(s.take_due(a, 10, 40), V{10});
  EXPECT_EQ(s.take_due(a, 12, 40), V{});
  EXPECT_EQ(s.take_due(a, 13, 40), V{13});
  EXPECT_EQ(s.extra(), 0);
  EXPECT_EQ(s.take_due(a, 14, 40), V{});
  EXPECT_EQ(s.take_due(a, 20, 40), V{20});
  s.add_cut(30);
  EXPECT_EQ(s.take_due(a, 30, 40), V{30}) << "a multiple and the added cut: one file";
  s.add_cut(33);
  a.can = false;
  EXPECT_EQ(s.take_due(a, 33, 40), V{});
  a.can = true;
  EXPECT_EQ(s.take_due(a, 34, 40), V{34});
  EXPECT_EQ(s.take_due(a, 35, 40), V{});
  a.cut = algorithms::CheckpointCut::kServerRound;  // server cuts take no added cut
  CheckpointSchedule server(0);
  server.add_cut(5);
  a.position = 9;
  EXPECT_EQ(server.take_due(a, 9, 40), V{});
}

TEST(CheckpointSchedule, ResumesAndHandOversStartAtTheNextMultiple) {
  Cuts a;
  CheckpointSchedule resumed(5, 10);
  EXPECT_EQ(resumed.take_due(a, 10, 40), V{});
  EXPECT_EQ(resumed.take_due(a, 15, 40), V{15});
  resumed.restart_after(23);
  EXPECT_EQ(resumed.due(), 25);
  EXPECT_EQ(resumed.take_due(a, 24, 40), V{});
  EXPECT_EQ(resumed.take_due(a, 25, 40), V{25});
}

TEST(CheckpointSchedule, ServerCutsTakeEveryMultipleUpToTheNextCall) {
  Cuts a;
  a.cut = algorithms::CheckpointCut::kServerRound;
  CheckpointSchedule s(2);
  a.position = -1;  // not at a pull
  EXPECT_EQ(s.take_due(a, 3, 100), V{});
  a.position = 5;  // the round pulled next: cuts 2 and 4 are due here
  EXPECT_EQ(s.take_due(a, 3, 100), (V{2, 4}));
  EXPECT_EQ(s.take_due(a, 4, 100), V{});
  a.position = 6;
  EXPECT_EQ(s.take_due(a, 5, 100), V{6});
  // virtual time: positions in seconds over a nominal step of 0.5 s
  a.cut = algorithms::CheckpointCut::kServerTime;
  CheckpointSchedule t(3, 0, 0.5);
  a.position = 1.4;  // nominal step 2.8 -> 2: nothing due
  EXPECT_EQ(t.take_due(a, 1, 100), V{});
  a.position = 3.5;  // nominal step 7: cuts 3 and 6
  EXPECT_EQ(t.take_due(a, 2, 100), (V{3, 6}));
}

}  // namespace
}  // namespace atl::core
