#include "transport/inproc/scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

namespace atl::transport {
namespace {

TEST(Scheduler, RunsOneParticipantAtATimeInDeterministicOrder) {
  Scheduler s(3);
  std::vector<int> trace;
  std::atomic<int> running{0};
  int max_running = 0;
  s.run([&](int id) {
    for (int step = 0; step < 3; ++step) {
      max_running = std::max(max_running, ++running);
      trace.push_back(id * 10 + step);
      --running;
      s.set_time(id, step + 1 + 0.1 * id);
      s.yield(id);
    }
  });
  EXPECT_EQ(max_running, 1);
  // smallest (time, id) first: round-robin by virtual time
  std::vector<int> expected = {0, 10, 20, 1, 11, 21, 2, 12, 22};
  EXPECT_EQ(trace, expected);
}

TEST(Scheduler, BlockUntilHandsTheTurnOver) {
  Scheduler s(2);
  bool flag = false;
  std::vector<std::string> trace;
  s.run([&](int id) {
    if (id == 0) {
      trace.push_back("0 waits");
      s.block_until(0, [&] { return flag; }, "flag");
      trace.push_back("0 resumes");
    } else {
      trace.push_back("1 sets");
      flag = true;
    }
  });
  EXPECT_EQ(trace, (std::vector<std::string>{"0 waits", "1 sets", "0 resumes"}));
}

// A timed wait (the simulator's deadlines): the waiter resumes at wake_at() once nobody that
// can run is earlier on the clock, its clock moved there; earlier participants go first, and
// ready() before that time resumes it without moving its clock. wake_at() is read anew.
TEST(Scheduler, TimedWaitWakesAtItsTimeAfterEveryoneEarlier) {
  Scheduler s(2);
  std::vector<std::string> trace;
  bool flag = false;
  double deadline = 5;
  bool first = true, second = true;
  s.run([&](int id) {
    if (id == 0) {
      first = s.block_until(0, [&] { return flag; }, "flag", [&] { return deadline; });
      trace.push_back("0 woken at " + std::to_string(static_cast<int>(s.time(0))));
      deadline = 9;
      second = s.block_until(0, [&] { return flag; }, "flag", [&] { return deadline; });
      trace.push_back("0 ready at " + std::to_string(static_cast<int>(s.time(0))));
    } else {
      s.advance(1, 3);
      s.yield(1);
      trace.push_back("1 at 3");
      deadline = 4;  // read anew: island 1 at 7 is later, so 0 wakes at 4 before it
      s.advance(1, 7);
      s.yield(1);
      trace.push_back("1 at 7");
      flag = true;  // ready before 9: 0 resumes at its own time
    }
  });
  EXPECT_FALSE(first);
  EXPECT_TRUE(second);
  EXPECT_EQ(trace, (std::vector<std::string>{"1 at 3", "0 woken at 4", "1 at 7", "0 ready at 4"}));
}

TEST(Scheduler, DetectsDeadlockAndNamesTheWait) {
  Scheduler s(2);
  try {
    s.run([&](int id) { s.block_until(id, [] { return false; }, "never #" + std::to_string(id)); });
    FAIL() << "expected a deadlock error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("never #1"), std::string::npos);
  }
}

TEST(Scheduler, PropagatesTheFirstExceptionAndUnblocksOthers) {
  Scheduler s(3);
  EXPECT_THROW(
      s.run([&](int id) {
        if (id == 2) throw std::invalid_argument("island 2 failed");
        s.block_until(id, [] { return false; }, "forever");
      }),
      std::invalid_argument);
}

}  // namespace
}  // namespace atl::transport
