// GlooGroup: the Group of a real run over gloo's TCP transport (trusted, fast networks),
// with the rendezvous store and the membership served by the coordinator (ControlPlane).
//
// Meshes (mesh.h). The islands of one membership epoch are connected by one gloo context
// (a TCP pair between every two members), built at the first collective of the epoch
// through the coordinator's store under "<store_prefix>e<epoch>/g<generation>/". When the
// membership changes, the next collective builds a new mesh among the members of the new
// epoch; when a mesh breaks (a pair fails, a wait is interrupted) it is rebuilt as the next
// generation of the same epoch, or for the new epoch if the coordinator has moved on.
//
// Collectives (GlooWire, mesh.h). Matched across members by a per-group sequence number, in
// issue order, exactly like InprocGroup, and bitwise its results for the same inputs:
// lossless codecs run the ring of transport/ring.h over gloo unbound-buffer send/recv,
// lossy codecs the reduce-scatter to chunk owners + all-gather of re-encoded means. They
// run one at a time, in order, on the group's worker thread. push/pull go to the server
// role through the control plane (ServerLink, as ZmqGroup).
//
// Failures. A peer that dies closes its connections (the kernel does, even for kill -9):
// gloo reports the broken pair at once and the mesh is rebuilt. A peer that vanishes
// silently (host down, partition) is noticed by the watchdog thread: a data phase that
// outlives slack * (latency + expected bytes / bandwidth) + 1 s (doubling after each
// expiry) reports the peer it waits for to ControlPlane::suspect, and once the coordinator
// drops that peer from the membership (heartbeats) the wait is interrupted. A member that
// abandons a mesh marks it closed in the store, and a wait that makes no progress is
// interrupted when its mesh is so marked (gloo does not report a connection closed in the
// middle of a message it is sending or receiving). Either way the
// collective then restarts among the survivors from the caller's original input, in a new
// mesh: every survivor states at the rendezvous which collective it runs next, a survivor
// that had already finished the collective hands its result to those that had not (so all
// survivors end with the same values and contributors), and the others run it again. The
// result then names the survivors as contributors with status kPeerLost (ok when no member
// of the first attempt was lost). An island that finds itself outside the membership
// completes with kMembershipChanged and its own input. Rendezvous waits are bounded by the
// membership, not by a timer (a member still computing is waited for as long as its
// heartbeats say it is alive); gloo's own timeout (connect_timeout) bounds connecting the
// pairs of a new mesh. So a dead peer never hangs the group: the round completes with the
// survivors, as with ZmqGroup.
//
// Sub-groups (subgroup()). A sub-group is a GlooGroup of its own over the same gloo device
// and control plane: its meshes connect its live members only (store keys under
// "<store_prefix>k<key>/", the key in every slot), it numbers its collectives from 0, and it
// has its own worker and watchdog threads, so its collectives run concurrently with the
// parent's and other sub-groups' and it restarts and hands over results on its own, as above.
// Its first collective is number GlooGroupOptions::first_seqs[key] (0 unless this island
// joined late). Its bytes are counted in the parent's bytes().
//
// Thread model. A GlooGroup belongs to one island thread (like every Group). It owns a
// worker thread (meshes and collectives: encoding, decoding, fp32 arithmetic) and a
// watchdog thread (membership and timeouts); gloo's device owns its event-loop thread.
// Collective calls queue the work and return at once; Handle::wait blocks. The destructor
// interrupts the running collective, completes the queued ones with kUnavailable and joins
// its threads.
//
// Security: none. gloo's TCP transport is neither encrypted nor authenticated; use it only
// on a trusted network (transport.kind: zmq with curve otherwise).
//
// Errors: invalid arguments throw (c10::Error), as in InprocGroup; WAN outcomes are
// CollectiveResult statuses; a device that cannot be created (bad host) throws
// gloo::Exception from the constructor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "transport/control_plane.h"
#include "transport/group.h"
#include "transport/server_link.h"
#include "transport/tensor_pool.h"

namespace gloo::transport {
class Device;
}

namespace atl::transport {

namespace gloo_mesh {
class Mesh;
class Waits;
struct Counters;
}  // namespace gloo_mesh

struct GlooGroupOptions {
  std::string host = "127.0.0.1";   // address this island's gloo pairs listen on (ports are ephemeral)
  std::string store_prefix = "gloo/";  // rendezvous keys in the coordinator's store
  int64_t chunk_bytes = 1 << 20;    // ring: fp32 bytes per message (same on all members)
  double bandwidth_mbps = 1000;     // assumed link bandwidth, for the data-phase timeout
  double timeout_slack = 4.0;       // timeout = slack * (latency + bytes / bandwidth) + 1 s
  double latency_ms = 50;           // one-way latency guess used in timeouts
  int64_t connect_timeout_ms = 30000;  // gloo's timeout for connecting the pairs of a new mesh
  int poll_ms = 50;                 // membership re-read period of the watchdog
  int store_wait_ms = 1000;         // longest wait of one store request (rendezvous; the epoch is
                                    // re-checked between requests): several round trips
  uint64_t first_seq = 0;           // sequence number of this group's first collective (an island
                                    // that joins late does not take part in earlier ones)
  std::map<uint32_t, uint64_t> first_seqs;  // the same for the sub-groups by key (absent: 0)
  // A run resumed from a checkpoint: the result of the collective in flight at the cut
  // (NetGroup::resume_in_flight).
  std::optional<CollectiveResult> in_flight;
};

class GlooGroup final : public NetGroup {
 public:
  // Creates the gloo TCP device and starts the worker and watchdog threads. `control` must
  // outlive the group. Ignores SIGPIPE process-wide (gloo writes to sockets with writev, and
  // a peer that died must not kill this process).
  GlooGroup(ControlPlane& control, GlooGroupOptions options = {});
  ~GlooGroup() override;
  GlooGroup(const GlooGroup&) = delete;
  GlooGroup& operator=(const GlooGroup&) = delete;

  MembershipView view() const override;
  std::unique_ptr<Handle> allreduce_mean(at::Tensor buffer, const compression::Pipeline& codec,
                                         double weight = 1.0, at::Tensor transmitted = {}) override;
  std::unique_ptr<Handle> broadcast(int root, at::Tensor buffer,
                                    const compression::Pipeline& codec) override;
  // Queued like the other collectives; restarts among the survivors and hands a finished
  // result to members that did not finish it, as all-reduces do.
  std::unique_ptr<Handle> allgather(std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out) override;
  // See "Sub-groups" above.
  std::unique_ptr<Group> subgroup(uint32_t key, std::vector<int> ids) override;
  // push / pull (ServerLink) and next_seqs (a real run's checkpoint saves them, and the
  // resumed group starts there): NetGroup (server_link.h), as ZmqGroup.
  // Collective messages (payloads plus gloo's 48-byte preambles and ready notifications)
  // and push/pull frames.
  ByteCounters bytes() const override;

  // Meshes built so far (the first one included). Thread-safe; for logs and tests.
  uint64_t meshes_built() const;

 private:
  struct Op;
  struct Retained;

  // Sub-group `key` of `parent`'s islands `ids`.
  GlooGroup(const GlooGroup& parent, uint32_t key, std::vector<int> ids);

  std::unique_ptr<Handle> enqueue(std::unique_ptr<Op> op);
  void work();    // worker thread
  void watch();   // watchdog thread
  void run(Op& op);
  Status ensure_mesh(const Op& op);
  void serve_donations();
  void complete(Op& op, CollectiveResult result);
  void set_suspect_deadline(std::optional<Clock::duration> timeout);

  const GlooGroupOptions options_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::unique_ptr<gloo_mesh::Waits> waits_;
  std::shared_ptr<gloo_mesh::Counters> counters_;  // shared with the sub-groups

  // Worker thread only.
  std::unique_ptr<gloo_mesh::Mesh> mesh_;
  bool mesh_broken_ = false;
  std::optional<uint64_t> built_epoch_;  // (epoch, generation) of the last mesh attempted
  uint64_t built_generation_ = 0;
  bool donations_served_ = false;
  std::unique_ptr<Retained> retained_;   // the last finished collective's result
  TensorPool pool_{2};                   // recycled result tensors

  mutable std::mutex mu_;  // guards the queue, stop_, the suspect deadline, meshes_built_, closed_key_
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Op>> queue_;
  std::atomic<bool> stop_{false};
  Clock::time_point suspect_at_ = Clock::time_point::max();
  Clock::duration suspect_timeout_{};
  uint64_t meshes_built_ = 0;
  std::string closed_key_;  // the current mesh's Mesh::closed_key() (watchdog)

  std::thread worker_, watchdog_;
};

}  // namespace atl::transport
