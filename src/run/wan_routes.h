// Pieces of a real run's island process that `atoll launch --emulate-wan` needs
// (docs/wan-emulation.md):
//   - PeerRoutes: the island's ControlPlane with each peer's data endpoint replaced by the
//     address this island must dial to reach it (the relay of the link island -> peer);
//   - WatchedGroup: the island's Group, measuring how long the island is blocked in
//     communication (round records' sync_s) and failing waits of an island dropped from
//     the run (a partition longer than the heartbeat timeout).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "transport/control_plane.h"
#include "transport/group.h"

namespace atl::run {

// Forwards everything to `inner`, except that membership views list `routes[id]` as the
// endpoint of every peer `id` that has a route (others, and this island itself, unchanged).
// Thread-safe as `inner` is; `inner` must outlive it.
class PeerRoutes final : public transport::ControlPlane {
 public:
  PeerRoutes(transport::ControlPlane& inner, std::map<int, std::string> routes)
      : inner_(inner), routes_(std::move(routes)) {}

  int self() const override { return inner_.self(); }
  transport::Membership membership() const override { return route(inner_.membership()); }
  transport::Membership wait_for_change(uint64_t epoch, transport::Deadline deadline) override {
    return route(inner_.wait_for_change(epoch, deadline));
  }
  void suspect(int peer) override { inner_.suspect(peer); }
  Status push(uint64_t tag, std::vector<uint8_t> frame, double weight) override {
    return inner_.push(tag, std::move(frame), weight);
  }
  StatusOr<std::vector<uint8_t>> pull(uint64_t tag, transport::Deadline deadline) override {
    return inner_.pull(tag, deadline);
  }
  Status store_set(const std::string& key, std::vector<uint8_t> value) override {
    return inner_.store_set(key, std::move(value));
  }
  StatusOr<std::vector<uint8_t>> store_get(const std::string& key, transport::Deadline deadline) override {
    return inner_.store_get(key, deadline);
  }
  void record(const std::string& json) override { inner_.record(json); }

 private:
  transport::Membership route(transport::Membership m) const;

  transport::ControlPlane& inner_;
  const std::map<int, std::string> routes_;
};

// The island's Group as its process sees it. Forwards everything to `inner`, and:
//   - adds up the wall time the caller spends inside the collective calls and in
//     Handle::wait: the communication this island waited for (with overlap, only the part
//     not hidden behind compute); round records report it as sync_s;
//   - abandons a wait once `dropped()` returns an error: the wait then returns that status
//     with no contributors (the algorithm decides; DiLoCo stops the island). The island
//     process uses it for an island the coordinator declared dead while it was cut off: the
//     others went on without it, and it cannot resume their rounds (only a restarted
//     process is handed the state, src/run/handover.h), so it must fail rather than wait
//     for peers that will never answer.
// Owned by the island thread, like the Group it wraps; its handles must not outlive it.
class WatchedGroup final : public transport::Group {
 public:
  WatchedGroup(transport::Group& inner, std::function<Status()> dropped)
      : inner_(inner), dropped_(std::move(dropped)) {}
  // A sub-group's (subgroup()): its blocked time counts in `root`'s, which outlives it.
  WatchedGroup(std::unique_ptr<transport::Group> inner, std::function<Status()> dropped, WatchedGroup* root = nullptr)
      : owned_(std::move(inner)), inner_(*owned_), dropped_(std::move(dropped)), root_(root) {}

  transport::MembershipView view() const override { return inner_.view(); }
  std::unique_ptr<transport::Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                                    double weight, at::Tensor transmitted) override;
  std::unique_ptr<transport::Handle> broadcast(int root, at::Tensor buffer,
                                               const compression::Pipeline& codec) override;
  std::unique_ptr<transport::Handle> allgather(std::vector<uint8_t> bytes,
                                               std::vector<std::vector<uint8_t>>* out) override;
  // The inner group's sub-group, watched the same way; the time blocked in it counts here
  // (a modular model's modules, a sharded exchange's shard 0).
  std::unique_ptr<transport::Group> subgroup(uint32_t key, std::vector<int> ids) override;
  std::unique_ptr<transport::Handle> push(uint64_t tag, at::Tensor buffer, const compression::Pipeline& codec,
                                          double weight, at::Tensor transmitted) override;
  std::unique_ptr<transport::Handle> pull(uint64_t tag, at::Tensor out,
                                          const compression::Pipeline& codec) override;
  // The inner group's (a run resumed from a checkpoint: the exchange in flight at the cut).
  std::unique_ptr<transport::Handle> resume_in_flight() override {
    auto handle = inner_.resume_in_flight();
    return handle ? watched(transport::Clock::now(), std::move(handle)) : nullptr;
  }
  // The inner group's counters plus those of earlier lives of the island (set_bytes_base) and
  // of the island's other ranks' shard planes (add_bytes_of).
  transport::ByteCounters bytes() const override {
    transport::ByteCounters b = inner_.bytes();
    b += base_;
    if (also_) b += *also_;
    return b;
  }
  // A run resumed from a checkpoint continues the counters it had there.
  void set_bytes_base(transport::ByteCounters base) { base_ = base; }
  // Counters kept elsewhere that count as this island's (src/run/island_ranks.h RankShard).
  void add_bytes_of(const transport::ByteCounters* also) { also_ = also; }

  // Seconds spent blocked since the previous call (or the start), sub-groups' included.
  double take_blocked_s();
  // Time blocked elsewhere that counts as this island's (a sharded exchange's whole wait).
  void add_blocked_s(double s) { blocked() += s; }

 private:
  class WatchedHandle;
  std::unique_ptr<transport::Handle> watched(transport::Clock::time_point start,
                                             std::unique_ptr<transport::Handle> handle);

  std::unique_ptr<transport::Group> owned_;  // a sub-group: the inner one it wraps
  transport::Group& inner_;
  std::function<Status()> dropped_;
  WatchedGroup* root_ = nullptr;  // a sub-group's: where its blocked time counts
  double blocked_s_ = 0;
  double& blocked() { return root_ ? root_->blocked_s_ : blocked_s_; }
  transport::ByteCounters base_{};
  const transport::ByteCounters* also_ = nullptr;
};

}  // namespace atl::run
