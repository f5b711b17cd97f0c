// Named state (src/base/named_state.h): what algorithms and server roles save and load by
// name, and the rule that a hand-over is a named subset of the checkpoint state.
#include "src/base/named_state.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "compression/pipeline.h"
#include "tests/algorithms/options_util.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl::algorithms {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const c10::Error& e) {
    return e.what_without_backtrace();
  }
  return "";
}

TEST(NamedState, EntriesKeepTheirOrderAndAreReadByNameAndKind) {
  NamedState s;
  s.add("round", int64_t{7}).add_real("now", 2.5).add("anchor", torch::arange(3)).add("unused", at::Tensor());
  ASSERT_EQ(s.entries().size(), 4u);
  EXPECT_EQ(s.entries()[0].name, "round");
  EXPECT_EQ(s.entries()[3].name, "unused");
  EXPECT_EQ(s.integer("round"), 7);
  EXPECT_EQ(s.real("now"), 2.5);
  EXPECT_TRUE(s.tensor("anchor").equal(torch::arange(3)));
  EXPECT_FALSE(s.tensor("unused").defined());
  EXPECT_TRUE(s.has("now"));
  EXPECT_FALSE(s.has("later"));
  // A subset, in the order asked for.
  const NamedState sub = s.only({"anchor", "round"});
  ASSERT_EQ(sub.entries().size(), 2u);
  EXPECT_EQ(sub.entries()[0].name, "anchor");
  EXPECT_EQ(sub.integer("round"), 7);
}

TEST(NamedState, AMissingOrMistypedEntryIsAnErrorNamingIt) {
  NamedState s;
  s.add("round", int64_t{1}).add("anchor", torch::zeros({2}));
  EXPECT_NE(error_of([&] { s.integer("outer.steps"); }).find("state has no integer 'outer.steps'"), std::string::npos);
  EXPECT_NE(error_of([&] { s.tensor("round"); }).find("state entry 'round' is not a tensor"), std::string::npos);
  EXPECT_NE(error_of([&] { s.real("anchor"); }).find("state entry 'anchor' is not a real"), std::string::npos);
  EXPECT_NE(error_of([&] { s.add("round", int64_t{2}); }).find("'round' added twice"), std::string::npos);
  EXPECT_NE(error_of([&] { s.only({"round", "error"}); }).find("no entry 'error'"), std::string::npos);
}

TEST(NamedState, ALoaderRefusesAStateWithoutItsEntriesNamingTheEntry) {
  auto ddp = make_algorithm(testing::options_of("ddp"), 0);
  IslandContext ctx;
  NamedState other;
  other.add("rounds", int64_t{3});  // a name of another layout
  EXPECT_NE(error_of([&] { ddp->load(ctx, other); }).find("'round'"), std::string::npos);
}

// For every algorithm that hands state to a joiner: each entry of export_state() is an entry
// of state() with the same kind and value, at a boundary after a few rounds.
TEST(NamedState, EveryHandOverIsANamedSubsetOfTheCheckpointState) {
  struct Case {
    std::string name;
    AlgorithmOptions options;
  };
  std::vector<Case> cases;
  for (const char* name : {"diloco", "streaming_diloco", "demo", "sparseloco"}) {
    cases.push_back({name, testing::options_of(name, {{"inner_steps", 2},
                                                      {"fragments", 1},
                                                      {"overlap_steps", 0},
                                                      {"topk", 4},
                                                      {"chunk", 8}})});
  }
  AlgorithmOptions adam = cases[0].options;  // Adam's second moment is defined too
  adam.get<DilocoOptions>().outer.kind = OuterKind::kAdam;
  cases.push_back({"diloco with adam", adam});
  const auto targets = testing::random_targets(2, 24, 5);
  const at::Tensor theta0 = at::zeros({24});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    int checked = 0;
    testing::HarnessHooks hooks;
    hooks.at_end = [&](int, const Algorithm& a) {
      const NamedState handover = a.export_state();
      const NamedState state = a.state();
      EXPECT_FALSE(handover.empty());
      EXPECT_TRUE(handover.has("round"));
      for (const NamedState::Entry& e : handover.entries()) {
        ASSERT_TRUE(state.has(e.name)) << e.name;
        const NamedState::Entry& s = state.only({e.name}).entries()[0];
        EXPECT_EQ(s.kind, e.kind) << e.name;
        EXPECT_EQ(s.integer, e.integer) << e.name;
        EXPECT_EQ(s.real, e.real) << e.name;
        ASSERT_EQ(s.tensor.defined(), e.tensor.defined()) << e.name;
        if (e.tensor.defined()) {
          EXPECT_TRUE(s.tensor.equal(e.tensor)) << e.name;
        }
      }
      ++checked;
    };
    testing::run_quadratic(c.options, testing::sgd_train(0.1, 6), targets, theta0, {}, nullptr, {}, hooks);
    EXPECT_EQ(checked, 2);
  }
}

}  // namespace
}  // namespace atl::algorithms
