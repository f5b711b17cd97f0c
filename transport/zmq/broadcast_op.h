// broadcast(root, buffer) over the data plane: collectives::broadcast
// (transport/collectives/schedules.h) over ZmqWire, the schedule every transport runs. The
// root sends its buffer to every other member of its current membership: lossless codecs in
// pieces of the agreed length, lossy ones as one frame (split into byte ranges on the wire),
// so receivers decode exactly what the in-process transfer would. The root's
// own buffer is left as it is and its handle completes once everything is queued on the
// links (which deliver it reliably while the peers live). A receiver completes when the
// whole buffer has arrived; it accepts the root's pieces whatever their epoch.
//
// No rendezvous and no restart: a receiver whose root leaves the membership completes with
// kPeerLost and no contributors (its buffer may then be partly overwritten). Result:
// contributors = the members at issue, weight_sum = their count.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "compression/pipeline.h"
#include "transport/collectives/program.h"
#include "transport/zmq/zmq_wire.h"
#include "transport/zmq/op.h"

namespace atl::transport::dataplane {

class BroadcastOp final : public Op {
 public:
  BroadcastOp(uint64_t seq, int root, at::Tensor buffer, const compression::Pipeline& codec,
              int64_t chunk_bytes, std::shared_ptr<Completion> completion);

  void start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_message(OpContext& ctx, Inbound& m) override;

 private:
  void step(OpContext& ctx);

  int root_;
  at::Tensor buffer_;
  compression::Pipeline codec_;
  int64_t chunk_bytes_;
  std::vector<int> members_;
  std::unique_ptr<ZmqWire> wire_;
  collectives::Program program_;
};

}  // namespace atl::transport::dataplane
