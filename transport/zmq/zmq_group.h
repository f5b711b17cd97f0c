// ZmqGroup: the Group of a real run over ZeroMQ's peer-to-peer data plane.
//
// Sockets (peer_links.h). Each island binds one ROUTER at its data endpoint (from the
// membership, or ZmqGroupOptions::bind) and connects one DEALER to each peer it sends to;
// data flows DEALER -> ROUTER and acknowledgements flow back on the same connection. Every
// message carries the versioned header of data_wire.h; links are reliable and credit-based
// (at most max_in_flight unacknowledged messages per peer, retransmission after a timeout
// derived from the bytes in flight and the bandwidth). Malformed, foreign, stale or
// duplicate messages are logged once per kind and dropped; nothing a peer sends can crash
// the island.
//
// Collectives (allreduce_op.h). Matched across members by a per-group
// sequence number, in issue order, exactly like InprocGroup; several may be in flight.
// Sub-groups (subgroup()) share the group's sockets and I/O thread; their messages carry
// the sub-group's key (data_wire.h: group) and its own sequence numbers, and each keeps its
// own restart and hand-over state (group_io.h). The results are bitwise those of InprocHub
// for the same inputs: both run the schedules of transport/collectives/schedules.h. A
// collective that loses a member restarts among the survivors from its original inputs when
// the ControlPlane announces the new epoch (transport/collectives/attempt.h), and completes
// with the survivors as contributors and kPeerLost.
// push/pull go to the server role through ControlPlane::push/pull. With options.star,
// all-reduces go through the coordinator instead (StarClient, star_client.h: the same results
// as InprocHub::set_star), still numbered in the same sequence as broadcasts.
//
// Thread model. The ZmqGroup belongs to one island thread (like every Group). It owns one
// background I/O thread that owns every socket and runs every collective's state machine:
// encoding, decoding and the fp32 arithmetic happen there. Collective calls return at once
// (an all-reduce computes into a tensor of its own: the buffer stays the input a restart
// needs until it completes); Handle::wait blocks on a condition variable. push/pull run on
// the calling thread (they block until the control plane answers). The destructor stops the
// I/O thread after delivering what is queued (up to linger_ms) and joins it; collectives
// still running then complete with kUnavailable.
//
// Security: with options.curve every data connection is CurveZMQ (encrypted; a sender
// authenticates the receiver by its membership key, and a receiver admits only members'
// keys). Without it the data plane is plain TCP and anyone who can reach the port can
// send (malformed input is still dropped).
//
// Errors: invalid arguments throw (c10::Error), as in InprocGroup; WAN outcomes are
// CollectiveResult statuses; socket setup errors (endpoint in use) throw zmq::error_t.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "transport/control_plane.h"
#include "transport/group.h"
#include "transport/server_link.h"

namespace atl::transport {

namespace dataplane {
class GroupIo;
}  // namespace dataplane
class StarClient;

struct ZmqGroupOptions {
  std::string bind;               // endpoint to bind ("" = this island's membership endpoint)
  int64_t chunk_bytes = 1 << 20;  // most payload bytes in one wire message (same on all members)
  int max_in_flight = 8;          // unacknowledged wire messages per peer (credits)
  double bandwidth_mbps = 1000;   // assumed link bandwidth until throughput has been observed
  double timeout_slack = 4.0;     // timeout = slack * (latency + bytes / bandwidth) + 1 s
  double latency_ms = 50;         // one-way latency guess used in timeouts
  double bandwidth_ewma = 0.3;    // weight of a new throughput sample in the bandwidth EWMA
  int linger_ms = 2000;           // on destruction: wait this long for queued messages to be delivered
  int poll_ms = 20;               // membership re-read period (and the I/O loop's longest sleep)
  uint64_t first_seq = 0;         // sequence number of this group's first collective (an island
                                  // that joins late: earlier ones are answered ABSENT)
  std::map<uint32_t, uint64_t> first_seqs;  // the same for the sub-groups by key (absent: 0)
  // A run resumed from a checkpoint: the result of the collective in flight at the cut
  // (NetGroup::resume_in_flight).
  std::optional<CollectiveResult> in_flight;
  bool retain_results = true;     // keep a copy of each finished all-reduce for peers that restart it
  int max_retained = 4;           // most finished results kept at once (oldest dropped first)
  int64_t max_stash_bytes = int64_t{2} << 30;  // payload kept for collectives not issued here yet
  bool curve = false;             // CurveZMQ on the data sockets: encrypted, members' keys only
  std::string curve_public_key;   // with curve: this island's Z85 pair (curve::load_keypair);
  std::string curve_secret_key;   // peers' keys come from the membership (Peer::public_key)
  bool star = false;              // all-reduce through the coordinator (transport.collective: star;
                                  // star_client.h), not peer to peer; broadcasts stay peer to peer
};

class ZmqGroup final : public NetGroup {
 public:
  // Binds the data socket and starts the I/O thread. `control` must outlive the group.
  ZmqGroup(ControlPlane& control, ZmqGroupOptions options = {});
  ~ZmqGroup() override;
  ZmqGroup(const ZmqGroup&) = delete;
  ZmqGroup& operator=(const ZmqGroup&) = delete;

  MembershipView view() const override;
  std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                         double weight = 1.0, at::Tensor transmitted = {}) override;
  std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer,
                                    const compression::Pipeline& codec) override;
  // Peer to peer (also with options.star), with the all-reduce's attempts, restarts and
  // hand-over of a finished result (allreduce_op.h).
  std::unique_ptr<Handle> allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) override;
  // Group::subgroup over this group's data plane and control plane (its all-reduces run peer
  // to peer also with options.star). Its first collective is number options.first_seqs[key]
  // (0 unless this island joined late), or the next one after those of an earlier sub-group
  // with this key.
  std::unique_ptr<Group> subgroup(uint32_t key, std::vector<int> ids) override;
  // push / pull / next_seq / next_seqs: NetGroup (server_link.h).
  ByteCounters bytes() const override;

  // The data endpoint as bound (a "*" port resolved). Thread-safe.
  std::string endpoint() const;
  // Messages dropped as invalid, stale or unexpected so far. Thread-safe.
  uint64_t dropped() const;

 private:
  // Sub-group `key` of `parent`'s islands `ids`.
  ZmqGroup(const ZmqGroup& parent, uint32_t key, std::vector<int> ids);
  // Issues the next collective: an AllreduceOp(next seq, args..., chunk_bytes, completion).
  template <typename... Args>
  std::unique_ptr<Handle> submit(Args&&... args);

  ZmqGroupOptions options_;
  std::shared_ptr<dataplane::GroupIo> io_;  // shared with the sub-groups
  std::unique_ptr<StarClient> star_;  // options.star only; stopped before io_
};

}  // namespace atl::transport
