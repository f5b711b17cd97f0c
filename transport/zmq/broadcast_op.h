// broadcast(root, buffer) over the data plane: a star from the root, like the in-process
// reference. The root encodes its buffer once (seed 0) and sends it to every other member
// of its current membership: lossless codecs as piece frames, lossy ones as one split frame
// (transfer.h), so receivers decode exactly what the in-process transfer would. The root's
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
#include "transport/zmq/op.h"
#include "transport/zmq/transfer.h"

namespace atl::transport::dataplane {

class BroadcastOp final : public Op {
 public:
  BroadcastOp(uint64_t seq, int root, at::Tensor buffer, const compression::Pipeline& codec,
              int64_t chunk_bytes, std::shared_ptr<Completion> completion);

  void start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) override;
  void on_message(OpContext& ctx, Inbound& m) override;

 private:
  void complete_ok();

  int root_;
  at::Tensor buffer_;
  compression::Pipeline codec_;
  int64_t chunk_bytes_;
  std::vector<int> members_;
  PiecesIn pieces_;             // lossless
  SplitIn split_;               // lossy
};

}  // namespace atl::transport::dataplane
