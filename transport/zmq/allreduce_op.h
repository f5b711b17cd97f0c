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
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <vector>

#include "compression/pipeline.h"
#include "transport/collectives/attempt.h"
#include "transport/zmq/op.h"
#include "transport/zmq/zmq_wire.h"

namespace atl::transport::dataplane {

class AllreduceOp final : public Op {
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
  // and hand-over; a receiver's buffer needs no backup (the result overwrites it whole).
  AllreduceOp(uint64_t seq, int root, at::Tensor buffer, const compression::Pipeline& codec, int64_t chunk_bytes,
              std::shared_ptr<Completion> completion);

  void start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_message(OpContext& ctx, Inbound& m) override;
  void on_timer(OpContext& ctx, Clock::time_point now) override;
  Clock::time_point next_timer() const override { return deadline_; }
  std::unique_ptr<Retained> take_retained() override { return std::move(retained_); }

 private:
  void attempt(OpContext& ctx, uint64_t epoch, const std::vector<int>& members);
  // Runs the attempt as far as its messages allow; completes the op when it ends.
  void step(OpContext& ctx);
  void complete(OpContext& ctx, CollectiveResult result);

  collectives::Request req_;
  std::vector<uint8_t> gather_in_;
  compression::Pipeline codec_;
  int64_t chunk_bytes_;

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

// The packing of an allgather's result for the hand-over (collectives/attempt.h).
using collectives::pack_gathered;
using collectives::unpack_gathered;

}  // namespace atl::transport::dataplane
