#include "transport/zmq/broadcast_op.h"

#include <ATen/ATen.h>

#include <algorithm>

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
  const int64_t n = buffer_.numel();
  if (ctx.self() != root_) {
    if (codec_.lossless()) pieces_.reset(n);
    else split_.reset(codec_.max_encoded_size(n));
    return;
  }
  std::vector<int> others;
  for (int p : members) {
    if (p != root_) others.push_back(p);
  }
  if (!others.empty()) {
    Header h;
    h.type = MsgType::kBroadcast;
    h.sender = root_;
    h.epoch = epoch;
    h.seq = seq_;
    if (codec_.lossless()) {
      send_pieces(ctx, others, h, buffer_, codec_, piece_elements(codec_, chunk_bytes_), 0);
    } else {
      auto frame = ctx.frame_buffer();
      codec_.encode(buffer_, *frame, 0);
      send_split(ctx, others, h, std::move(frame), chunk_bytes_, static_cast<uint64_t>(n) * 4);
    }
  }
  complete_ok();
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
  if (done()) return;
  const Header& h = m.header;
  auto drop = [&](const std::string& why) {
    ctx.drops().drop("invalid broadcast piece", why + " (collective #" + std::to_string(seq_) +
                                                    " from island " + std::to_string(h.sender) + ")");
  };
  if (h.type != MsgType::kBroadcast) return drop(std::string(msg_type_name(h.type)) + " for a broadcast");
  if (h.sender != root_ || ctx.self() == root_) return drop("not from the root");
  Status st;
  if (codec_.lossless()) {
    auto range = pieces_.accept(h);
    if (!range.is_ok()) return drop(range.status().message());
    at::Tensor dst = buffer_.narrow(0, range->first, range->second - range->first);
    st = decode_piece(codec_, m, dst);
  } else {
    st = split_.accept(h, m.data());
    if (!st.is_ok()) return drop(st.message());
    if (!split_.complete()) return;
    st = codec_.decode(split_.frame().data(), split_.frame().size(), buffer_);
    split_.release();
  }
  if (!st.is_ok()) {
    finish({Status(StatusCode::kCorrupt, "broadcast from island " + std::to_string(root_) +
                                             " did not decode: " + st.message()),
            {}, 0});
    return;
  }
  if (codec_.lossless() ? pieces_.complete() : true) complete_ok();
}

void BroadcastOp::complete_ok() {
  finish({Status::ok(), members_, static_cast<double>(members_.size())});
}

}  // namespace atl::transport::dataplane
