#include "tests/transport/static_control_plane.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>

#include "compression/frame.h"
#include "src/base/log.h"

namespace atl::transport {

struct StaticCluster::Shared {
  StaticClusterOptions options;
  Membership membership;
  std::mutex mu;
  std::condition_variable cv;  // a push happened, or a store key was set
  std::map<std::string, std::vector<uint8_t>> store;
};

StaticCluster::StaticCluster(StaticClusterOptions options) : shared_(std::make_shared<Shared>()) {
  std::sort(options.peers.begin(), options.peers.end(), [](const Peer& a, const Peer& b) { return a.id < b.id; });
  for (size_t i = 0; i < options.peers.size(); ++i) {
    if (options.peers[i].id < 0 || (i > 0 && options.peers[i].id == options.peers[i - 1].id)) {
      throw std::invalid_argument("StaticCluster: peer ids must be unique and >= 0");
    }
  }
  shared_->membership.members = options.peers;
  shared_->options = std::move(options);
}

std::unique_ptr<ControlPlane> StaticCluster::plane(int self) const {
  const auto& members = shared_->membership.members;
  if (std::none_of(members.begin(), members.end(), [self](const Peer& p) { return p.id == self; })) {
    throw std::out_of_range("StaticCluster: island " + std::to_string(self) + " is not in the peer list");
  }
  return std::unique_ptr<ControlPlane>(new StaticControlPlane(shared_, self));
}

Membership StaticControlPlane::membership() const { return shared_->membership; }

Membership StaticControlPlane::wait_for_change(uint64_t epoch, Deadline deadline) {
  if (epoch != shared_->membership.epoch) return shared_->membership;
  std::unique_lock<std::mutex> lock(shared_->mu);
  wait_until(shared_->cv, lock, deadline, [] { return false; });
  return shared_->membership;
}

void StaticControlPlane::suspect(int peer) {
  ATOLL_WARN("island " << self_ << " suspects island " << peer << "; a static cluster never changes");
}

Status StaticControlPlane::push(uint64_t tag, std::vector<uint8_t> frame, double weight) {
  const StaticClusterOptions& o = shared_->options;
  if (o.server == nullptr) return Status(StatusCode::kUnavailable, "push: this static cluster has no server role");
  compression::FrameView view;
  if (Status st = compression::parse_frame(frame.data(), frame.size(), &view); !st.is_ok()) return st;
  if (view.header.elements > static_cast<uint64_t>(o.max_push_elements)) {
    return corrupt("push: frame of " + std::to_string(view.header.elements) + " elements above max_push_elements");
  }
  at::Tensor payload = at::empty({static_cast<int64_t>(view.header.elements)}, at::kFloat);
  if (Status st = o.pipeline.decode(frame.data(), frame.size(), payload); !st.is_ok()) return st;
  std::lock_guard<std::mutex> lock(shared_->mu);
  o.server->on_push(self_, tag, payload, weight);
  shared_->cv.notify_all();
  return Status::ok();
}

StatusOr<std::vector<uint8_t>> StaticControlPlane::pull(uint64_t tag, Deadline deadline) {
  const StaticClusterOptions& o = shared_->options;
  if (o.server == nullptr) return Status(StatusCode::kUnavailable, "pull: this static cluster has no server role");
  std::unique_lock<std::mutex> lock(shared_->mu);
  std::optional<at::Tensor> answer;  // re-asked after every push (the cv), until the deadline
  auto answered = [&] { return (answer = o.server->on_pull(self_, tag)).has_value(); };
  if (!wait_until(shared_->cv, lock, deadline, answered)) {
    return Status(StatusCode::kTimeout, "pull: no server answer for tag " + std::to_string(tag));
  }
  std::vector<uint8_t> frame;
  o.pipeline.encode(answer->to(at::kFloat).contiguous().view({-1}), frame);
  return frame;
}

Status StaticControlPlane::store_set(const std::string& key, std::vector<uint8_t> value) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->store[key] = std::move(value);
  shared_->cv.notify_all();
  return Status::ok();
}

StatusOr<std::vector<uint8_t>> StaticControlPlane::store_get(const std::string& key, Deadline deadline) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  if (!wait_until(shared_->cv, lock, deadline, [&] { return shared_->store.count(key) > 0; })) {
    return Status(StatusCode::kTimeout, "store_get: key '" + key + "' not set before the deadline");
  }
  return shared_->store.at(key);
}

void StaticControlPlane::record(const std::string& json) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (shared_->options.record_sink) shared_->options.record_sink(json);
}

}  // namespace atl::transport
