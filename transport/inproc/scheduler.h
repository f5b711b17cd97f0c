// Cooperative scheduler for the simulator: N participants (islands), each on its own
// thread, but only ONE runs at a time. A participant gives up its turn only when it blocks
// (block_until) or yields; the next participant is chosen deterministically: the runnable
// one with the smallest (time, id). So a simulation is deterministic whatever the host's
// load, each island computes with all cores, and blocking collectives can be written as
// plain blocking code.
//
// Threads are joined by run(); none is detached. If a participant throws, the others are
// unblocked with SchedulerAborted and run() rethrows the first exception. If every
// unfinished participant is blocked, that is a deadlock: run() throws std::runtime_error
// naming what each one waits for.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace atl::transport {

struct SchedulerAborted : std::runtime_error {
  SchedulerAborted() : std::runtime_error("simulation aborted") {}
};

class Scheduler {
 public:
  explicit Scheduler(int participants);
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  int size() const { return static_cast<int>(slots_.size()); }

  // Runs body(id) for every participant, one at a time; returns when all have returned.
  void run(const std::function<void(int id)>& body);

  // --- called by participant `id` while it holds the turn ---
  // Gives up the turn until ready() is true. ready() is evaluated by whichever thread picks
  // the next participant, under the scheduler's lock: it must only read state that is
  // changed by participants holding the turn, and must not block. `what` names the wait
  // for deadlock reports.
  //
  // `wake_at` (optional; read like ready(), it may change while the participant waits;
  // infinity = none): a timed wait. The participant also resumes when no participant that
  // can run is earlier on the clock than wake_at() (ties: lowest id), its clock then moved to
  // it. Returns whether ready() held (false: woken by the time; the caller decides whether
  // to wait again).
  bool block_until(int id, const std::function<bool()>& ready, const std::string& what,
                   const std::function<double()>& wake_at = nullptr);
  // Lets participants with a smaller (time, id) run first.
  void yield(int id);
  // Sets the participant's priority key (e.g. virtual time). Smaller runs first.
  void set_time(int id, double time);
  double time(int id) const;
  // Whether the run was aborted (a participant threw, or a deadlock).
  bool aborted() const;
  // The participant holding the turn (-1 before run() and after the last one finished).
  int current() const;
  // Moves the participant's virtual time forward to `time` (never back). It keeps the turn:
  // computing needs no turn order. Before it does anything others can observe or that
  // depends on them (post to a collective, poll a handle, push/pull, read shared state), it
  // must yield() so that every participant that is earlier on the clock goes first; that
  // keeps the simulation causal while an island computes many steps without a switch.
  void advance(int id, double time);

 private:
  struct Slot {
    bool finished = false;
    std::function<bool()> ready;  // empty = runnable
    std::string what;
    double time = 0;
    std::function<double()> wake_at;  // a timed wait's wake-up time (empty: none)
    bool woken = false;  // its timed wait ended at wake_at (not by ready())
  };
  int pick_locked();              // next participant to run, or -1
  void wait_turn_locked(std::unique_lock<std::mutex>& lock, int id);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  int current_ = -1;
  bool aborted_ = false;
  std::string deadlock_;
  std::exception_ptr error_;
};

}  // namespace atl::transport
