// GroupIo: the I/O thread of one ZmqGroup and everything it owns: the ZeroMQ context and
// sockets (PeerLinks), the running collectives (AllreduceOp), messages kept for collectives
// not yet issued here, finished all-reduce results kept for restarted peers, the cached
// membership and the bandwidth estimate. See zmq_group.h for the overall contract.
//
// Loop: take newly issued ops (in sequence order) and start them in the current
// membership; poll the sockets (at most poll_ms, less when a timer is due); hand each
// accepted message to its op by (group, sequence number), keep it if that op is not issued
// yet, or answer it from a kept result; re-read the membership every poll_ms (at once after a
// message from a newer epoch) and tell every op when the epoch moves; run the link and op
// timers; forward suspicions to the ControlPlane.
//
// Groups. The group of every island (0) and each sub-group (ZmqGroup::subgroup, named by its
// key) number their collectives on their own; every piece of bookkeeping below is per
// (group, seq), so one group's collectives, kept messages and kept results never meet
// another's. A sub-group's ops run among the live members of its islands.
//
// Thread-safety: submit(), view(), endpoint(), counters() and dropped() may be called from
// any thread; everything else runs on the I/O thread.
#pragma once

#include <zmq.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "transport/control_plane.h"
#include "transport/tensor_pool.h"
#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/buffer_pool.h"
#include "transport/zmq/peer_links.h"
#include "transport/zmq/zmq_group.h"

namespace atl::transport::dataplane {

class GroupIo final : public OpContext {
 public:
  // Binds the ROUTER and starts the thread. Throws std::invalid_argument when there is no
  // endpoint to bind, zmq::error_t when binding fails.
  GroupIo(ControlPlane& control, const ZmqGroupOptions& options);
  // Delivers what is queued (up to linger_ms), stops and joins the thread; ops still
  // running complete with kUnavailable.
  ~GroupIo() override;

  // Hands an op to the I/O thread; the ops of one group must be submitted in sequence order.
  void submit(std::unique_ptr<AllreduceOp> op);
  MembershipView view() const;
  std::string endpoint() const { return endpoint_; }
  ByteCounters counters() const { return links_->counters(); }
  uint64_t dropped() const { return drops_.total(); }

  // OpContext (I/O thread).
  int self() const override { return self_; }
  const ZmqGroupOptions& options() const override { return options_; }
  void send(int peer, Outbound msg) override { links_->send(peer, std::move(msg)); }
  void suspect(int peer) override;
  void refresh_membership() override { refresh_due_ = true; }
  double bandwidth() const override { return bandwidth_; }
  void observe_throughput(double bytes, double seconds) override;
  DropLog& drops() override { return drops_; }
  std::shared_ptr<Bytes> payload_buffer(size_t size) override { return pool_->bytes(size); }
  void recycle(at::Tensor t) override { tensors_.give(std::move(t)); }
  // Thread-safe: the island thread takes all-reduces' result tensors from here.
  TensorPool& tensors() { return tensors_; }

 private:
  void run();
  void start_new_ops();
  void dispatch(Inbound& m);
  void refresh();
  void reap();
  void answer_absent(const Header& hello);

  ControlPlane& control_;
  const ZmqGroupOptions options_;
  const int self_;
  DropLog drops_;
  std::shared_ptr<BufferPool> pool_;
  TensorPool tensors_{2};
  zmq::context_t ctx_;
  std::unique_ptr<PeerLinks> links_;
  std::string endpoint_;
  int wake_fd_ = -1;

  // Shared with other threads.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<AllreduceOp>> submitted_;  // guarded by mu_
  bool stop_ = false;                                    // guarded by mu_
  Membership membership_;                                // guarded by mu_ (written by the I/O thread)

  // I/O thread only.
  using Cid = std::pair<uint32_t, uint64_t>;    // a collective: (group, seq)
  struct Sequence {                             // the collectives of one group
    std::vector<int> ids;                       // a sub-group's islands (empty: every island)
    uint64_t first = 0;                         // the first seq this island issues
    uint64_t issued_below = 0;                  // every seq below was submitted
    uint64_t done_below = 0;                    // every seq below has completed
    std::set<uint64_t> done_above;              // completed seqs >= done_below
  };
  std::map<uint32_t, Sequence> groups_;         // by group; 0 = every island
  std::map<Cid, std::unique_ptr<AllreduceOp>> ops_;
  std::map<Cid, std::unique_ptr<Retained>> retained_;
  std::set<std::tuple<Cid, int, uint64_t>> served_;  // (collective, peer, epoch)
  std::map<std::pair<int, uint32_t>, uint64_t> peer_done_below_;  // by (peer, group)
  std::map<Cid, std::vector<Inbound>> stash_;   // messages for collectives not issued yet
  int64_t stash_bytes_ = 0;
  double bandwidth_;                            // bytes/s
  bool observed_ = false;
  bool refresh_due_ = false;
  Clock::time_point next_refresh_{};

  std::thread thread_;
};

}  // namespace atl::transport::dataplane
