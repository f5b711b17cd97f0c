#include "transport/completion.h"

namespace atl::transport {

void Completion::finish(CollectiveResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    result_ = std::move(result);
  }
  cv_.notify_all();
}

bool Completion::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

CollectiveResult Completion::wait(Deadline deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!wait_until(cv_, lock, deadline, [this] { return done_; })) {
    return {Status(StatusCode::kTimeout, "the collective did not complete before the deadline"), {}, 0};
  }
  return result_;
}

}  // namespace atl::transport
