#include "transport/zmq/broadcast_op.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "transport/collectives/schedules.h"

namespace atl::transport::dataplane {

BroadcastOp::BroadcastOp(uint64_t seq, int root, at::Tensor buffer, const compression::Pipeline& codec,
                         int64_t chunk_bytes, std::shared_ptr<Completion> completion)
    : Op(seq, std::move(completion)), root_(root), buffer_(std::move(buffer)), codec_(codec),
      chunk_bytes_(chunk_bytes) {}

void BroadcastOp::start(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  members_ = members;
  if (std::find(members.begin(), members.end(), root_) == members.end()) {
    finish({Status(StatusCode::kPeerLost, "broadcast root " + std::to_string(root_) + " is not a member"), {}, 0});
    return;
  }
  // A receiver takes the root's messages whatever their epoch: its wire knows only the root.
  wire_ = std::make_unique<ZmqWire>(group_, seq_, epoch, chunk_bytes_, std::vector<int>{root_}, nullptr);
  wire_->bind(ctx);
  program_ = collectives::broadcast(*wire_, {members, root_, buffer_, &codec_, piece_elements(codec_, chunk_bytes_)});
  step(ctx);
}

void BroadcastOp::on_membership(OpContext& ctx, uint64_t epoch, const std::vector<int>& members) {
  if (done() || ctx.self() == root_) return;
  if (std::find(members.begin(), members.end(), root_) == members.end()) {
    finish({Status(StatusCode::kPeerLost, "broadcast root " + std::to_string(root_) + " left in epoch " +
                                              std::to_string(epoch)),
            {}, 0});
  }
}

void BroadcastOp::on_message(OpContext& ctx, Inbound& m) {
  if (done() || !wire_) return;
  const Header& h = m.header;
  if (h.type != MsgType::kBroadcast || h.sender != root_ || ctx.self() == root_) {
    ctx.drops().drop("invalid broadcast piece", std::string(msg_type_name(h.type)) + " from island " +
                                                    std::to_string(h.sender) + " for broadcast #" +
                                                    std::to_string(seq_) + " from island " + std::to_string(root_));
    return;
  }
  wire_->bind(ctx);
  wire_->deliver(m);
  step(ctx);
}

void BroadcastOp::step(OpContext& ctx) {
  try {
    while (!program_.done() && wire_->can_resume()) program_.resume();
  } catch (const collectives::CorruptFrame& e) {
    finish({Status(StatusCode::kCorrupt, e.what()), {}, 0});
    return;
  }
  if (program_.done()) finish({Status::ok(), members_, static_cast<double>(members_.size())});
}

}  // namespace atl::transport::dataplane
