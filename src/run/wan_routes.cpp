#include "src/run/wan_routes.h"

#include <ATen/core/Tensor.h>

#include "compression/pipeline.h"

namespace atl::run {

using transport::Clock;

transport::Membership PeerRoutes::route(transport::Membership m) const {
  for (transport::Peer& p : m.members) {
    auto it = routes_.find(p.id);
    // A member without an endpoint (waiting for its state hand-over) keeps none.
    if (it != routes_.end() && p.id != inner_.self() && transport::in_collectives(p)) p.endpoint = it->second;
  }
  return m;
}

namespace {

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

constexpr auto kWatchPeriod = std::chrono::milliseconds(200);  // how often a wait checks dropped()

}  // namespace

// A handle whose wait() adds the time it blocked to the group's count, and gives up when
// the group's island was dropped from the run.
class WatchedGroup::WatchedHandle final : public transport::Handle {
 public:
  WatchedHandle(std::unique_ptr<transport::Handle> inner, WatchedGroup& group)
      : inner_(std::move(inner)), group_(group) {}
  bool done() const override { return inner_->done(); }
  transport::CollectiveResult wait(transport::Deadline deadline) override {
    const auto t0 = Clock::now();
    transport::CollectiveResult r;
    for (;;) {
      const auto slice = Clock::now() + kWatchPeriod;
      const bool last = deadline && *deadline <= slice;
      r = inner_->wait(last ? *deadline : slice);
      if (r.status.code() != StatusCode::kTimeout || last) break;
      if (Status s = group_.dropped_ ? group_.dropped_() : Status::ok(); !s.is_ok()) {
        r = transport::CollectiveResult{s, {}, 0};
        break;
      }
    }
    group_.blocked() += seconds(t0, Clock::now());
    return r;
  }

 private:
  std::unique_ptr<transport::Handle> inner_;
  WatchedGroup& group_;
};

std::unique_ptr<transport::Handle> WatchedGroup::watched(Clock::time_point start,
                                                         std::unique_ptr<transport::Handle> handle) {
  blocked() += seconds(start, Clock::now());
  return std::make_unique<WatchedHandle>(std::move(handle), *this);
}

std::unique_ptr<transport::Handle> WatchedGroup::allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                                                double weight, at::Tensor transmitted) {
  const auto t0 = Clock::now();
  return watched(t0, inner_.allreduce_mean(std::move(buffer), codec, weight, std::move(transmitted)));
}

std::unique_ptr<transport::Handle> WatchedGroup::broadcast(int root, at::Tensor buffer,
                                                           const compression::Pipeline& codec) {
  const auto t0 = Clock::now();
  return watched(t0, inner_.broadcast(root, std::move(buffer), codec));
}

std::unique_ptr<transport::Handle> WatchedGroup::allgather(std::vector<uint8_t> bytes,
                                                           std::vector<std::vector<uint8_t>>* out) {
  const auto t0 = Clock::now();
  return watched(t0, inner_.allgather(std::move(bytes), out));
}

std::unique_ptr<transport::Group> WatchedGroup::subgroup(uint32_t key, std::vector<int> ids) {
  return std::make_unique<WatchedGroup>(inner_.subgroup(key, std::move(ids)), dropped_, root_ ? root_ : this);
}

std::unique_ptr<transport::Handle> WatchedGroup::push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec,
                                                      double weight, at::Tensor transmitted) {
  const auto t0 = Clock::now();
  return watched(t0, inner_.push(tag, std::move(buffer), codec, weight, std::move(transmitted)));
}

std::unique_ptr<transport::Handle> WatchedGroup::pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec) {
  const auto t0 = Clock::now();
  return watched(t0, inner_.pull(tag, std::move(out), codec));
}

double WatchedGroup::take_blocked_s() {
  const double s = blocked_s_;
  blocked_s_ = 0;
  return s;
}

}  // namespace atl::run
