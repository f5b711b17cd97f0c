// EvalRole: every eval step recorded exactly once while the lead role moves. A small run is
// kept in memory: which islands are live as each island sees it, the recorded steps (the
// store of a real run) and a clock that waits move forward.
#include "src/core/eval_role.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "algorithms/shared_tensors.h"

namespace atl::core {
namespace {

struct MiniRun {
  std::set<int> live = {0, 1, 2};
  std::map<int64_t, int> records;          // step -> eval records written
  std::vector<std::pair<int, int64_t>> log;  // (island, step) in record order
  std::map<int64_t, float> value;          // step -> the first element of the evaluated model
  double now = 0;
  std::function<void()> on_wait;           // what happens meanwhile when an island waits

  std::unique_ptr<EvalRole> role(int island, double patience_s = 30) {
    EvalRole::Hooks h;
    h.is_lead = [this, island] { return *live.begin() >= island; };
    h.recorded = [this](int64_t step) { return records.count(step) > 0; };
    h.evaluate = [this, island](int64_t step, const at::Tensor& g) {
      ++records[step];
      log.emplace_back(island, step);
      value[step] = g[0].item<float>();
    };
    h.now_s = [this] { return now; };
    h.wait = [this](double deadline) {
      now = std::max(now, deadline);
      if (on_wait) on_wait();
    };
    return std::make_unique<EvalRole>(std::move(h), patience_s);
  }
};

at::Tensor model(float v) { return at::full({4}, v); }

TEST(EvalRole, TheLeadEvaluatesAndTheOthersDropWhatItRecorded) {
  MiniRun run;
  auto r0 = run.role(0), r1 = run.role(1);
  r1->at_eval_step(10, model(10));  // island 1 is ahead: it keeps step 10
  EXPECT_EQ(r1->kept(), 1u);
  r0->at_eval_step(10, model(10));
  r1->at_eval_step(20, model(20));  // step 10 is recorded: dropped; 20 kept
  EXPECT_EQ(r1->kept(), 1u);
  r0->at_eval_step(20, model(20));
  r1->drain();
  EXPECT_EQ(r1->kept(), 0u);
  EXPECT_EQ(run.records, (std::map<int64_t, int>{{10, 1}, {20, 1}}));
  for (const auto& [island, step] : run.log) EXPECT_EQ(island, 0);
}

// The lead dies after step 10; island 1 reaches step 20 before it learns that, keeps it (a
// copy: the caller's tensor moves on), and evaluates it once it is the lead, before step 30.
TEST(EvalRole, AStepKeptWhileTheLeadDiedIsEvaluatedByTheNextLead) {
  MiniRun run;
  auto r0 = run.role(0), r1 = run.role(1), r2 = run.role(2);
  for (auto* r : {r0.get(), r1.get(), r2.get()}) r->at_eval_step(10, model(10));
  at::Tensor global = model(20);
  r1->at_eval_step(20, global);
  r2->at_eval_step(20, global);
  global.fill_(21);           // the island trains on; the kept copy must not change
  run.live.erase(0);          // declared dead
  r1->at_eval_step(30, model(30));
  r2->at_eval_step(30, model(30));
  r1->drain();
  r2->drain();
  EXPECT_EQ(run.records, (std::map<int64_t, int>{{10, 1}, {20, 1}, {30, 1}}));
  EXPECT_EQ(run.value[20], 20.0f);
  EXPECT_EQ(run.log, (std::vector<std::pair<int, int64_t>>{{0, 10}, {1, 20}, {1, 30}}));
}

// The simulator's islands keep a step's model through EvalRole::Hooks::keep into one
// SharedTensors: two islands that keep the same step hold one copy between them, which the
// caller's training does not change, and the next lead evaluates it.
TEST(EvalRole, KeptCopiesGoThroughTheKeepHook) {
  MiniRun run;
  algorithms::SharedTensors shared;
  int kept_calls = 0;
  auto with_keep = [&](int island) {
    EvalRole::Hooks h;  // as MiniRun::role's, with keep
    h.is_lead = [&run, island] { return *run.live.begin() >= island; };
    h.recorded = [&run](int64_t step) { return run.records.count(step) > 0; };
    h.evaluate = [&run, island](int64_t step, const at::Tensor& g) {
      ++run.records[step];
      run.log.emplace_back(island, step);
      run.value[step] = g[0].item<float>();
    };
    h.now_s = [&run] { return run.now; };
    h.wait = [&run](double deadline) { run.now = std::max(run.now, deadline); };
    h.keep = [&](const at::Tensor& g) {
      ++kept_calls;
      return shared.share(g.clone());
    };
    return std::make_unique<EvalRole>(std::move(h), 30.0);
  };
  auto r0 = with_keep(0), r1 = with_keep(1), r2 = with_keep(2);
  at::Tensor global1 = model(20), global2 = model(20);
  r1->at_eval_step(20, global1);
  r2->at_eval_step(20, global2);
  EXPECT_EQ(kept_calls, 2);
  EXPECT_EQ(shared.held(), 1u) << "the two islands' copies of step 20 are held once";
  global1.fill_(21);  // the islands train on
  global2.fill_(22);
  run.live.erase(0);  // the lead died before step 20
  r1->drain();
  r2->drain();
  EXPECT_EQ(run.records, (std::map<int64_t, int>{{20, 1}}));
  EXPECT_EQ(run.value[20], 20.0f);
  EXPECT_EQ(run.log, (std::vector<std::pair<int, int64_t>>{{1, 20}}));
}

// The final step: island 1 finishes while the lead is still live, and waits; the lead dies
// without evaluating, and island 1 evaluates the final step when it learns that.
TEST(EvalRole, DrainWaitsForTheLeadOrTakesOver) {
  MiniRun run;
  auto r1 = run.role(1);
  r1->at_eval_step(100, model(100));
  int waits = 0;
  run.on_wait = [&] {
    if (++waits == 3) run.live.erase(0);
  };
  r1->drain();
  EXPECT_EQ(waits, 3);
  EXPECT_EQ(run.records, (std::map<int64_t, int>{{100, 1}}));
  EXPECT_LT(run.now, 30.0) << "took over only after the patience";
}

// A lower island that is live but never evaluates the step (it rejoined after it): the
// keeper evaluates it itself after its patience.
TEST(EvalRole, AStepNobodyEvaluatesIsEvaluatedAfterThePatience) {
  MiniRun run;
  auto r1 = run.role(1, /*patience_s=*/5);
  r1->at_eval_step(40, model(40));
  r1->drain();
  EXPECT_EQ(run.records, (std::map<int64_t, int>{{40, 1}}));
  EXPECT_GE(run.now, 5.0);
}

}  // namespace
}  // namespace atl::core
