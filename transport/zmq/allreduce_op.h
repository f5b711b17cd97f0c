// One all-reduce, broadcast or allgather over the data plane: collectives::attempt (the rendezvous,
// hand-over and data phase written once for every networked transport: transport/collectives/
// attempt.h) run over ZmqWire, one attempt per membership epoch.
//
// Attempts. The first attempt runs among the members of the epoch the op starts in. When
// the membership moves to a new epoch, an unfinished op abandons its attempt and starts a
// new one from the original input (an all-reduce writes its result into a buffer of its own
// and leaves the caller's input untouched until it completes; all members derive the same
// member set from the epoch, so they agree). An
// island that finds itself outside the membership completes with kMembershipChanged and its
// own input. Messages of a newer epoch are kept until this op reaches that epoch; older ones
// are dropped as stale. A data phase that exceeds its timeout (slack * (latency + bytes /
// bandwidth) + 1 s, doubled after each expiry) reports the peer it waits for to
// ControlPlane::suspect; the coordinator decides, and its new epoch restarts the op among
// the survivors. Lost messages on a live link are the link's business (peer_links.h
// retransmits).
//
// Hand-over. A member that finished keeps its result (take_retained(); ZmqGroup's I/O thread
// keeps it and answers a peer's HELLO for it with serve_result()).
//
// Thread model: an op is built on the island thread (it copies what it needs from the
// caller) and from then on is touched only by the group's I/O thread. Completion
// (transport/completion.h) is the one object both threads share; it is thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "compression/pipeline.h"
#include "transport/collectives/attempt.h"
#include "transport/completion.h"
#include "transport/zmq/op.h"
#include "transport/zmq/zmq_wire.h"

namespace atl::transport::dataplane {

// One collective, matched across members by its group and its sequence number in it.
class AllreduceOp final {
 public:
  // Runs on the island thread. `result` ([n] float32, contents unspecified) receives the
  // result, which is copied into `buffer` at completion and then retained; the codec is
  // copied.
  AllreduceOp(uint64_t seq, at::Tensor buffer, at::Tensor result, const compression::Pipeline& codec,
              double weight, at::Tensor transmitted, int64_t chunk_bytes,
              std::shared_ptr<Completion> completion);
  // An allgather of `bytes` into `*out` (Group::allgather), with the same attempts, restarts
  // and hand-over (its result is kept packed as fp32 words: collectives::pack_gathered).
  AllreduceOp(uint64_t seq, std::vector<uint8_t> bytes, std::vector<std::vector<uint8_t>>* out,
              int64_t chunk_bytes, std::shared_ptr<Completion> completion);
  // A broadcast of the root's `buffer` (Group::broadcast), with the same attempts, restarts
  // and hand-over. A receiver receives into `result` ([n] float32) and copies it into `buffer`
  // at completion; the root passes none.
  AllreduceOp(uint64_t seq, int root, at::Tensor buffer, at::Tensor result, const compression::Pipeline& codec,
              int64_t chunk_bytes, std::shared_ptr<Completion> completion);

  uint64_t seq() const { return req_.seq; }
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
  void start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) { attempt(ctx, epoch, members); }
  // The membership moved on: an unfinished op restarts or completes (see above).
  void on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members);
  // A message for this sequence number (any epoch). Invalid ones are dropped via ctx.drops().
  void on_message(OpContext& ctx, Inbound& m);
  void on_timer(OpContext& ctx, Clock::time_point now);
  Clock::time_point next_timer() const { return deadline_; }
  // After completion: what to keep for restarted peers (null when nothing is kept).
  std::unique_ptr<Retained> take_retained() { return std::move(retained_); }
  // The group is going away: completes with `status` if still running.
  void abandon(const Status& status) {
    if (!done_) finish({status, {}, 0});
  }

 private:
  // What the three constructors share.
  AllreduceOp(uint64_t seq, const compression::Pipeline& codec, int64_t chunk_bytes,
              std::shared_ptr<Completion> completion);
  void attempt(OpContext& ctx, uint64_t epoch, const std::vector<int>& members);
  // Runs the attempt as far as its messages allow; completes the op when it ends.
  void step(OpContext& ctx);
  void complete(OpContext& ctx, CollectiveResult result);
  void finish(CollectiveResult result) {
    done_ = true;
    completion_->finish(std::move(result));
  }

  collectives::Request req_;  // req_.seq: this op's sequence number
  std::vector<uint8_t> gather_in_;
  compression::Pipeline codec_;
  int64_t chunk_bytes_;
  uint32_t group_ = 0;
  std::vector<int> ids_;
  std::shared_ptr<Completion> completion_;
  bool done_ = false;

  // The current attempt.
  uint64_t epoch_ = 0;
  std::unique_ptr<ZmqWire> wire_;
  collectives::Program program_;
  CollectiveResult result_;
  std::vector<Inbound> future_;    // messages of newer epochs
  Clock::time_point data_start_{}, deadline_ = Clock::time_point::max();
  Clock::duration timeout_{};

  std::unique_ptr<Retained> retained_;
};

// Sends a finished collective's result to `peer` (collectives::hand_over: RESULT_INFO, then
// raw fp32 RESULT pieces), named by the peer's (group, seq, epoch).
void serve_result(OpContext& ctx, uint64_t seq, uint64_t epoch, Retained& r, int peer, uint32_t group = 0);

}  // namespace atl::transport::dataplane
