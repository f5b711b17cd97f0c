// The result of one asynchronous collective, set once by the transport's own thread and
// waited for by the island (Completion), and the Handle that waits on it (CompletionHandle).
// Shared by the networked groups (ZmqGroup, GlooGroup).
//
// Thread-safe: finish() from any thread, done()/wait() from any other.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "transport/group.h"

namespace atl::transport {

class Completion {
 public:
  // Publishes the result and wakes waiters. Later calls are ignored.
  void finish(CollectiveResult result) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) return;
      done_ = true;
      result_ = std::move(result);
    }
    cv_.notify_all();
  }
  bool done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  // The result once finished; kTimeout (the collective keeps running) if `deadline` passes.
  CollectiveResult wait(Deadline deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!wait_until(cv_, lock, deadline, [this] { return done_; })) {
      return {Status(StatusCode::kTimeout, "the collective did not complete before the deadline"), {}, 0};
    }
    return result_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  CollectiveResult result_;
};

class CompletionHandle final : public Handle {
 public:
  explicit CompletionHandle(std::shared_ptr<Completion> c) : c_(std::move(c)) {}
  bool done() const override { return c_->done(); }
  CollectiveResult wait(Deadline deadline) override { return c_->wait(deadline); }

 private:
  std::shared_ptr<Completion> c_;
};

}  // namespace atl::transport
