// When an island's checkpoints fall (core::CheckpointSchedule, the rule of both modes):
// step cuts at multiples of checkpoint.every where the algorithm can checkpoint, server-round
// and virtual-time cuts up to the position of the next server call, after a resume or a
// hand-over from the next multiple on. And how the islands gather at a cut
// (core::CheckpointGathering, the one gathering of both modes): done when every island taking
// part and due has marked it, oldest first; skipped when one taking part is not due.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
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

// An island that learns of an asked cut after it has passed it: the boundary where the others
// take it (the first from the cut on where the algorithm could cut), which it can only mark as
// not written by it; none passed yet: it takes the cut as they do.
TEST(CheckpointSchedule, ALateAskedCutNamesTheBoundaryTheOthersTakeItAt) {
  Cuts a;
  CheckpointSchedule s(100, 10);  // resumed after step 10
  for (int64_t step = 11; step <= 23; ++step) {
    a.can = step != 14 && step != 15 && step < 21;  // exchanges in flight over 14-15 and 21-23
    EXPECT_EQ(s.take_due(a, step, 1000), V{});
  }
  EXPECT_EQ(s.add_cut(14), 16) << "the others cut at 16, which this island passed";
  EXPECT_EQ(s.add_cut(13), 13);
  EXPECT_EQ(s.add_cut(5), 5) << "before this island's first boundary: the cut itself";
  EXPECT_EQ(s.extra(), 0);
  EXPECT_EQ(s.add_cut(21), 0) << "no boundary that could cut since 21: taken as the others do";
  a.can = true;
  EXPECT_EQ(s.take_due(a, 24, 1000), V{24});
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

using Done = std::vector<CheckpointGathering::Cut>;
V steps(const Done& cuts) {
  V v;
  for (const auto& c : cuts) v.push_back(c.step);
  return v;
}

TEST(CheckpointGathering, ACutIsDoneWhenEveryIslandTakingPartHasMarkedIt) {
  CheckpointGathering g;
  EXPECT_TRUE(g.mark(0, 10));
  EXPECT_TRUE(g.mark(2, 10));
  EXPECT_EQ(steps(g.complete({0, 1, 2})), V{});  // island 1 is waited for
  EXPECT_FALSE(g.done(10));
  EXPECT_EQ(steps(g.complete({})), V{});  // nobody takes part: nothing is cut
  // Island 1 died: the others' marks complete it.
  const Done done = g.complete({0, 2});
  ASSERT_EQ(steps(done), V{10});
  EXPECT_EQ(done[0].skipped, "");
  EXPECT_TRUE(done[0].failures.empty());
  EXPECT_TRUE(g.done(10));
  EXPECT_TRUE(g.done(9));
  // A mark of a cut done already is ignored: the island goes on.
  EXPECT_FALSE(g.mark(1, 10));
  EXPECT_EQ(steps(g.complete({0, 1, 2})), V{});
}

TEST(CheckpointGathering, CutsAreDoneOldestFirstWithTheirFailures) {
  CheckpointGathering g;
  g.mark(0, 20);
  g.mark(1, 20, "disk full");
  g.mark(1, 20);  // said again (a retried store set): the failure stays
  g.mark(0, 10);
  EXPECT_EQ(steps(g.complete({0, 1})), V{});  // 10 waits for island 1, and 20 behind it
  g.mark(1, 10);
  const Done done = g.complete({0, 1});
  ASSERT_EQ(steps(done), (V{10, 20}));
  EXPECT_TRUE(done[0].failures.empty());
  EXPECT_EQ(done[1].failures, (std::map<int, std::string>{{1, "disk full"}}));
}

TEST(CheckpointGathering, AnIslandNotDueSkipsTheCutAndTheSkipHookIsAsked) {
  std::map<int, int64_t> due{{0, 10}, {1, 15}, {2, 10}};  // island 1 was handed over at step 12
  std::string why_not;
  CheckpointGathering g(0, {[&](int i, int64_t cut) { return due.at(i) <= cut; },
                            [&](int64_t) { return why_not; }});
  g.mark(0, 10);
  EXPECT_EQ(steps(g.complete({0, 1, 2})), V{});  // island 2 is due: waited for
  g.mark(2, 10);
  Done done = g.complete({0, 1, 2});
  ASSERT_EQ(steps(done), V{10});
  EXPECT_EQ(done[0].skipped, "island 1 was handed over after it");
  // Every island at the cut, but the mode says no.
  why_not = "a push in flight";
  for (int i : {0, 1, 2}) g.mark(i, 20);
  done = g.complete({0, 1, 2});
  ASSERT_EQ(steps(done), V{20});
  EXPECT_EQ(done[0].skipped, "a push in flight");
  why_not.clear();
  for (int i : {0, 1, 2}) g.mark(i, 30);
  done = g.complete({0, 1, 2});
  ASSERT_EQ(steps(done), V{30});
  EXPECT_EQ(done[0].skipped, "");
}

TEST(CheckpointGathering, AResumedOrGivenUpCutIsDoneAndLaterMarksOfItIgnored) {
  CheckpointGathering resumed(40);  // a run resumed from step 40
  EXPECT_FALSE(resumed.mark(0, 40));
  EXPECT_TRUE(resumed.done(40));
  EXPECT_FALSE(resumed.done(50));
  CheckpointGathering g;
  g.mark(0, 30);  // marked before a restarted coordinator picked the run up
  g.give_up(30);
  EXPECT_TRUE(g.done(30));
  EXPECT_FALSE(g.mark(1, 30));
  EXPECT_TRUE(g.mark(1, 40));
  EXPECT_EQ(steps(g.complete({1})), V{40});  // the given-up cut's marks are not cut again
}

}  // namespace
}  // namespace atl::core
