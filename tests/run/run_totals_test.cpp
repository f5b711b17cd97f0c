// RunTotals: the coordinator's summary of a real run from its records (src/run/run_totals.h).
#include "src/run/run_totals.h"

#include <gtest/gtest.h>

#include <string>

#include "src/core/json.h"

namespace atl::run {
namespace {

std::string eval(int64_t step, double loss, int island) {
  return core::JsonObject().add("event", "eval").add("step", step).add("val_loss", loss).add("island", island).str();
}
std::string island_end(int island, int64_t steps) {
  return core::JsonObject()
      .add("event", "island_end")
      .add("island", island)
      .add("steps", steps)
      .add("bytes_sent", uint64_t{100})
      .add("bytes_recv", uint64_t{100})
      .add("raw_sent", uint64_t{200})
      .str();
}
std::string summary(const RunTotals& t, int64_t final_step = -1) {
  core::JsonObject s;
  t.add_summary(s, final_step, false);
  return s.str();
}

// The lead died after recording step 20 but before marking it: the next island evaluated it
// again. The second record is refused; a step that arrives late (out of order) does not
// replace the latest eval.
TEST(RunTotals, KeepsTheFirstEvalOfAStepAndTheLatestByStep) {
  RunTotals t;
  EXPECT_TRUE(t.add(eval(0, 5.0, 0)));
  EXPECT_TRUE(t.add(eval(20, 3.0, 0)));
  EXPECT_FALSE(t.add(eval(20, 3.0, 1)));
  EXPECT_TRUE(t.add(eval(40, 2.0, 1)));
  EXPECT_TRUE(t.add(eval(30, 2.5, 2)));  // kept by another island, recorded after 40
  EXPECT_TRUE(t.evaluated(30));
  EXPECT_FALSE(t.evaluated(10));
  EXPECT_TRUE(t.add(island_end(1, 40)));
  EXPECT_TRUE(t.add(island_end(2, 40)));
  const std::string s = summary(t);
  EXPECT_EQ(core::json_find_number(s, "final_val_loss"), 2.0) << s;
  EXPECT_EQ(core::json_find_number(s, "last_eval_step"), 40) << s;
  EXPECT_EQ(core::json_find_number(s, "best_val_loss"), 2.0) << s;
  EXPECT_EQ(core::json_find_number(s, "islands_finished"), 2) << s;
  EXPECT_EQ(core::json_find_number(s, "compression_ratio"), 2.0) << s;
}

// A summary never presents a stale eval as final: the last eval is not at the step the run
// ended on (or nobody finished), so final_val_loss is null and last_* say where it was.
TEST(RunTotals, AStaleEvalIsNotFinal) {
  RunTotals t;
  t.add(eval(0, 5.5, 0));
  t.add(eval(25, 4.0, 0));
  EXPECT_NE(summary(t).find("\"final_val_loss\":null"), std::string::npos) << summary(t);  // nobody finished
  t.add(island_end(1, 100));
  const std::string s = summary(t);
  EXPECT_NE(s.find("\"final_val_loss\":null"), std::string::npos) << s;
  EXPECT_EQ(core::json_find_number(s, "last_val_loss"), 4.0) << s;
  EXPECT_EQ(core::json_find_number(s, "last_eval_step"), 25) << s;
  // The server role: its final step is given; an eval there is final.
  t.add(eval(60, 3.0, -1));
  EXPECT_EQ(core::json_find_number(summary(t, 60), "final_val_loss"), 3.0);
  EXPECT_NE(summary(t, 80).find("\"final_val_loss\":null"), std::string::npos);
}

}  // namespace
}  // namespace atl::run
