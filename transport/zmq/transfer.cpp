#include "transport/zmq/transfer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

namespace atl::transport::dataplane {

int64_t piece_elements(const compression::Pipeline& codec, int64_t chunk_bytes) {
  int64_t p = std::max<int64_t>(1, chunk_bytes / 4);
  p = std::min<int64_t>(p, compression::kMaxElements);
  for (;;) {
    const int64_t size = static_cast<int64_t>(codec.max_encoded_size(p));
    if (size <= chunk_bytes || p == 1) return p;
    p = std::max<int64_t>(1, p - std::max<int64_t>(1, (size - chunk_bytes + 3) / 4));
  }
}

void send_split(OpContext& ctx, const std::vector<int>& to, Header h,
                std::shared_ptr<const Bytes> frame, int64_t chunk_bytes, uint64_t raw_bytes) {
  const size_t total = frame->size();
  const size_t step = static_cast<size_t>(std::max<int64_t>(1, chunk_bytes));
  const uint32_t pieces = static_cast<uint32_t>(std::max<size_t>(1, (total + step - 1) / step));
  h.flags = kFlagSplit;
  h.pieces = pieces;
  h.total = total;
  for (int peer : to) {
    for (uint32_t k = 0; k < pieces; ++k) {
      h.piece = k;
      h.offset = k * step;
      const size_t len = std::min(step, total - static_cast<size_t>(h.offset));
      // raw_sent: the frame's fp32 size, attributed to its first piece.
      ctx.send(peer, Outbound{h, frame, static_cast<size_t>(h.offset), len, k == 0 ? raw_bytes : 0});
    }
  }
}

void SplitIn::reset(size_t max_total) {
  max_total_ = max_total;
  pieces_ = 0;
  received_ = 0;
  seen_.clear();
  Bytes().swap(frame_);
}

Status SplitIn::accept(const Header& h, const uint8_t* payload) {
  if (!(h.flags & kFlagSplit)) return corrupt("a whole frame where a split frame was expected");
  if (h.total == 0 || h.total > max_total_) return corrupt("split frame larger than the codec allows");
  if (pieces_ == 0) {
    if (h.pieces > h.total) return corrupt("piece count out of range");
    pieces_ = h.pieces;
    seen_.assign(pieces_, false);
    frame_.assign(h.total, 0);
  }
  if (h.pieces != pieces_ || h.total != frame_.size()) return corrupt("split frame geometry disagrees");
  if (seen_[h.piece]) return corrupt("duplicate piece");
  seen_[h.piece] = true;
  ++received_;
  if (h.payload_len) std::memcpy(frame_.data() + h.offset, payload, h.payload_len);
  return Status::ok();
}

}  // namespace atl::transport::dataplane
