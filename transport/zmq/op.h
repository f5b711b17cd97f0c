// What a data-plane collective (AllreduceOp, allreduce_op.h: all-reduce, broadcast,
// allgather) may ask of the I/O thread that runs it (OpContext), and the pieces of a
// finished result it keeps (KeptPiece, Retained). GroupIo (group_io.h) is the OpContext.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "transport/collectives/attempt.h"
#include "transport/zmq/data_wire.h"
#include "transport/zmq/peer_links.h"
#include "transport/zmq/zmq_group.h"

namespace atl::transport::dataplane {

// Services of the I/O thread, for the operation it is running. Never called concurrently.
class OpContext {
 public:
  virtual ~OpContext() = default;
  virtual int self() const = 0;
  // The group's settings (an operation reads chunk_bytes, latency_ms, timeout_slack and
  // retain_results).
  virtual const ZmqGroupOptions& options() const = 0;
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

}  // namespace atl::transport::dataplane
