// The pieces every data-plane collective is built from: what an operation may ask of the
// I/O thread that runs it (OpContext), and the operation interface itself (Op). The
// concrete operation is AllreduceOp (allreduce_op.h: all-reduce, broadcast, allgather);
// ZmqGroup (zmq_group.h) runs it.
//
// Thread model: an Op is built on the island thread (it copies what it needs from the
// caller) and from then on is touched only by the group's I/O thread. Completion
// (transport/completion.h) is the one object both threads share; it is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/collectives/attempt.h"
#include "transport/completion.h"
#include "transport/group.h"
#include "transport/zmq/data_wire.h"
#include "transport/zmq/peer_links.h"

namespace atl::transport::dataplane {

// Settings an operation reads (copied from ZmqGroupOptions).
struct Tuning {
  int64_t chunk_bytes = 1 << 20;  // bytes per wire message payload
  double latency_s = 0.05;        // expected one-way latency
  double timeout_slack = 4.0;     // timeout = slack * (latency + bytes / bandwidth) + 1 s
  bool retain_results = true;     // keep a finished all-reduce's result for restarted peers
};

// Services of the I/O thread, for the operation it is running. Never called concurrently.
class OpContext {
 public:
  virtual ~OpContext() = default;
  virtual int self() const = 0;
  virtual const Tuning& tuning() const = 0;
  virtual void send(int peer, Outbound msg) = 0;
  // The data plane saw `peer` stop delivering; forwarded to ControlPlane::suspect.
  virtual void suspect(int peer) = 0;
  // A message from a newer membership epoch arrived: read the membership again soon.
  virtual void refresh_membership() = 0;
  virtual double bandwidth() const = 0;  // bytes/s: the EWMA of observed throughput
  virtual void observe_throughput(double bytes, double seconds) = 0;
  virtual DropLog& drops() = 0;
  // A buffer of exactly `size` bytes with unspecified contents (recycled after its last send;
  // see buffer_pool.h).
  virtual std::shared_ptr<Bytes> payload_buffer(size_t size) { return std::make_shared<Bytes>(size); }
  // A tensor the operation no longer needs, for reuse.
  virtual void recycle(at::Tensor t) {}
};

// A final piece of an all-reduce's result that ZmqWire::keep kept as it arrived instead of
// copying it into the result tensor: the raw fp32 values of elements [first, first + n).
struct KeptPiece {
  int64_t first = 0;
  std::shared_ptr<const Inbound> message;  // shared with the sends that forward it
};
// dst = `result` ([n] float32) with the pieces' values over it, copying each element once
// (dst may be result itself). The pieces are sorted; they must not overlap.
void assemble(const at::Tensor& result, std::vector<KeptPiece>& pieces, const at::Tensor& dst);

// A finished collective's outcome, kept to answer peers that restart it (AllreduceOp).
// `pieces` hold values not yet in kept.values; settle() places them (before a hand-over),
// into a copy while zero-copy sends may still read kept.values (ZmqWire::send).
struct Retained {
  collectives::Kept kept;
  std::vector<KeptPiece> pieces;
  void settle() {
    if (pieces.empty()) return;
    if (kept.values.use_count() > 1) kept.values = kept.values.clone();
    assemble(kept.values, pieces, kept.values);
    pieces.clear();
  }
};

// One collective, matched across members by its group and its sequence number in it.
class Op {
 public:
  Op(uint64_t seq, std::shared_ptr<Completion> completion)
      : seq_(seq), completion_(std::move(completion)) {}
  virtual ~Op() = default;

  uint64_t seq() const { return seq_; }
  // Its group (Header::group: 0 = every island, else a sub-group's key) and, for a
  // sub-group, its islands (ascending). Set before the op is submitted.
  void set_group(uint32_t group, std::vector<int> ids) {
    group_ = group;
    ids_ = std::move(ids);
  }
  uint32_t group() const { return group_; }
  const std::vector<int>& ids() const { return ids_; }
  bool done() const { return done_; }

  // Runs the first attempt among `members` (ascending ids) of membership `epoch`.
  virtual void start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) = 0;
  // The membership moved on; an operation that depends on it restarts or completes.
  virtual void on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) = 0;
  // A message for this sequence number (any epoch). Invalid ones are dropped via ctx.drops().
  virtual void on_message(OpContext& ctx, Inbound& m) = 0;
  virtual void on_timer(OpContext& ctx, Clock::time_point now) {}
  virtual Clock::time_point next_timer() const { return Clock::time_point::max(); }
  // After completion: what to keep for restarted peers (empty for most operations).
  virtual std::unique_ptr<Retained> take_retained() { return nullptr; }
  // The group is going away: completes with `status` if still running.
  void abandon(const Status& status) {
    if (!done_) finish({status, {}, 0});
  }

 protected:
  void finish(CollectiveResult result) {
    done_ = true;
    completion_->finish(std::move(result));
  }

  const uint64_t seq_;
  uint32_t group_ = 0;
  std::vector<int> ids_;

 private:
  std::shared_ptr<Completion> completion_;
  bool done_ = false;
};

}  // namespace atl::transport::dataplane
