// Test support: a ControlPlane for a fixed peer list and no coordinator, for the data-plane
// tests and allreduce_bench, which run several islands as threads of one process. (Real runs
// always have a coordinator: transport/zmq/control_client.h.)
//
// Membership is the peer list at epoch 0 and never changes (suspect() is only logged). The
// server role, the rendezvous store and the metrics sink are in-process objects shared by
// every StaticControlPlane that one StaticCluster hands out.
//
// Thread-safe: planes of one cluster may be used from many threads at once. The server role
// is called one message at a time (under the cluster's lock). Planes keep the cluster's
// shared state alive, so they may outlive the StaticCluster object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compression/pipeline.h"
#include "transport/control_plane.h"
#include "transport/outer_server.h"

namespace atl::transport {

struct StaticClusterOptions {
  std::vector<Peer> peers;          // the membership; ids unique and >= 0 (sorted by id here)
  OuterServer* server = nullptr;    // not owned; outlives every plane. nullptr: push/pull fail
  compression::Pipeline pipeline;   // decodes pushed frames and encodes pull answers
  std::function<void(const std::string& json)> record_sink;  // nullptr: records dropped
  int64_t max_push_elements = int64_t{1} << 28;  // largest tensor a pushed frame may declare
};

class StaticCluster {
 public:
  // Throws std::invalid_argument for duplicate or negative ids.
  explicit StaticCluster(StaticClusterOptions options);
  // The control plane of island `self`; throws std::out_of_range when it is not a peer.
  std::unique_ptr<ControlPlane> plane(int self) const;

 private:
  friend class StaticControlPlane;
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

class StaticControlPlane final : public ControlPlane {
 public:
  int self() const override { return self_; }
  Membership membership() const override;
  // Returns at once when `epoch` is not 0; otherwise waits until the deadline (forever for
  // nullopt: the membership never changes).
  Membership wait_for_change(uint64_t epoch, Deadline deadline) override;
  void suspect(int peer) override;
  // kUnavailable without a server; kCorrupt when the frame does not decode.
  Status push(uint64_t tag, std::vector<uint8_t> frame, double weight) override;
  // Waits until the server answers `tag` (re-asked after every push) or the deadline.
  StatusOr<std::vector<uint8_t>> pull(uint64_t tag, Deadline deadline) override;
  Status store_set(const std::string& key, std::vector<uint8_t> value) override;
  StatusOr<std::vector<uint8_t>> store_get(const std::string& key, Deadline deadline) override;
  void record(const std::string& json) override;

 private:
  friend class StaticCluster;
  StaticControlPlane(std::shared_ptr<StaticCluster::Shared> shared, int self)
      : shared_(std::move(shared)), self_(self) {}
  std::shared_ptr<StaticCluster::Shared> shared_;
  int self_;
};

}  // namespace atl::transport
