// An island's link to the rest of a real run: membership (who is alive, where their data
// sockets are, per epoch), the server role, the rendezvous store and the metrics sink.
//
// The data planes (transport/zmq/zmq_group.h, transport/gloo/gloo_group.h) take one of these
// and never talk to the coordinator themselves. Implementations:
//   - ZmqControlClient (transport/zmq/control_client.h): the coordinator over ZeroMQ;
//   - StaticControlPlane (tests/transport/static_control_plane.h): a fixed peer list and no
//     coordinator, for data-plane tests and benchmarks with real sockets.
//
// Thread-safe: used by the island's main thread and the transport's own threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "transport/group.h"

namespace atl::transport {

struct Peer {
  int id = -1;
  std::string endpoint;     // data-plane endpoint, e.g. "tcp://127.0.0.1:29511"
  std::string public_key;   // Z85 CURVE public key; "" without curve
  bool operator==(const Peer&) const = default;
};

struct Membership {
  uint64_t epoch = 0;       // bumps on every join/leave/failure
  std::vector<Peer> members;  // live islands, ascending id
};

// One island's part in a membership change, as the coordinator reports it
// (CoordinatorOptions::on_membership).
struct MemberChange {
  int island = -1;
  std::string change;  // "joined"; "rejoined" (a new process of a live member); "left"; "failed"
                       // (declared dead); "ready" (published its data endpoint: it takes part
                       // in collectives from this epoch on)
  std::string why;     // "failed": what the failure detector saw; "" otherwise
};

// "island 2 failed (no heartbeat for 900 ms); island 3 left": for logs.
inline std::string describe(const std::vector<MemberChange>& changes) {
  std::string s;
  for (const MemberChange& c : changes) {
    s += (s.empty() ? "" : "; ") + ("island " + std::to_string(c.island) + " " + c.change);
    if (!c.why.empty()) s += " (" + c.why + ")";
  }
  return s;
}

// Whether a member takes part in collectives: only once it has published its data endpoint.
// An island that rejoins a running run is a member without one (heartbeats, store) until it
// has received the state hand-over (docs/protocol.md "Rejoining a running run").
inline bool in_collectives(const Peer& p) { return !p.endpoint.empty(); }
// The islands of `m` that take part in collectives, ascending, among `ids` (ascending;
// empty: all of them).
inline std::vector<int> collective_members(const Membership& m, const std::vector<int>& ids = {}) {
  std::vector<int> live;
  for (const Peer& p : m.members) {
    if (in_collectives(p)) live.push_back(p.id);
  }
  return within(std::move(live), ids);
}

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  virtual int self() const = 0;
  virtual Membership membership() const = 0;
  // Blocks until the epoch differs from `epoch` or the deadline passes; returns the
  // latest view either way.
  virtual Membership wait_for_change(uint64_t epoch, Deadline deadline) = 0;
  // The data plane saw `peer` stop answering; the coordinator confirms (heartbeats) and
  // bumps the epoch, or not.
  virtual void suspect(int peer) = 0;

  // Server role (transport/outer_server.h), hosted by the coordinator. `frame` is an
  // encoded compression frame.
  virtual Status push(uint64_t tag, std::vector<uint8_t> frame, double weight) = 0;
  virtual StatusOr<std::vector<uint8_t>> pull(uint64_t tag, Deadline deadline) = 0;

  // Rendezvous key-value store (Gloo's store). Keys are scoped by the caller (they include
  // the epoch); get waits for the key to be set.
  virtual Status store_set(const std::string& key, std::vector<uint8_t> value) = 0;
  virtual StatusOr<std::vector<uint8_t>> store_get(const std::string& key, Deadline deadline) = 0;

  // One metrics record (a JSON object) for the run's metrics.jsonl.
  virtual void record(const std::string& json) = 0;
};

}  // namespace atl::transport
