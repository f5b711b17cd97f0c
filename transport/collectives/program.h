// Program: one member's part of one collective, written once as straight-line code (a C++20
// coroutine) and run by whichever transport moves its messages (docs/collectives.md).
//
// A schedule (schedules.h) is a coroutine that posts sends and receives on a Wire (wire.h)
// and `co_await`s the receives it needs. Awaiting asks the wire whether the message is
// there (Wire::ready). What happens when it is not depends on the wire, not on the schedule:
//   - a blocking wire (gloo) waits inside ready() and always answers yes, so the program
//     runs to its end in one resume();
//   - an event-driven wire (ZeroMQ's I/O thread) answers no; the program suspends and its
//     driver resumes it when a message arrives;
//   - the in-process hub resumes every member's program in turn, delivering the messages
//     sent in one round at the end of that round (one network phase on the virtual clock).
// So the three transports run the same additions in the same order: bitwise agreement is by
// construction, not by tests alone.
//
// Errors: an exception thrown inside the program (a wire that broke, a frame that does not
// decode) is kept and rethrown by resume().
//
// Thread model: a Program is resumed by one thread at a time (its driver's).
#pragma once

#include <coroutine>
#include <exception>
#include <utility>

namespace atl::transport::collectives {

class [[nodiscard]] Program {
 public:
  struct promise_type {
    std::exception_ptr error;
    Program get_return_object() { return Program(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { error = std::current_exception(); }
  };

  Program() = default;
  Program(Program&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  Program& operator=(Program&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() { reset(); }

  // Runs the program until it waits for a message the wire does not have yet, or ends.
  // Returns done(). Rethrows what the program threw.
  bool resume() {
    if (!h_ || h_.done()) return true;
    h_.resume();
    if (h_.done() && h_.promise().error) std::rethrow_exception(std::exchange(h_.promise().error, nullptr));
    return h_.done();
  }
  bool done() const { return !h_ || h_.done(); }
  // Runs it to the end (for blocking wires, whose awaits never suspend).
  void run() {
    while (!resume()) {
    }
  }

 private:
  explicit Program(std::coroutine_handle<promise_type> h) : h_(h) {}
  void reset() {
    if (h_) h_.destroy();
    h_ = {};
  }
  std::coroutine_handle<promise_type> h_;
};

}  // namespace atl::transport::collectives
