#include "transport/zmq/transfer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "transport/ring.h"

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

uint32_t piece_count(int64_t n, int64_t piece_elems) {
  return static_cast<uint32_t>(std::max<int64_t>(1, (n + piece_elems - 1) / piece_elems));
}

bool raw_pieces(const compression::Pipeline& codec) { return codec.stages().empty(); }

namespace {

// One piece's payload and its checksum_payload(), hashed while it is in cache: its values
// copied as raw fp32 (a copy, not a view of `values`: the buffer changes while the message
// may still wait for a retransmission), or one frame.
std::pair<std::shared_ptr<Bytes>, uint64_t> piece_payload(OpContext& ctx, const at::Tensor& values,
                                                          const compression::Pipeline& codec, uint64_t seed) {
  if (!raw_pieces(codec)) {
    auto frame = ctx.frame_buffer();
    codec.encode(values, *frame, seed);
    const uint64_t hash = checksum_payload(frame->data(), frame->size());
    return {std::move(frame), hash};
  }
  const size_t bytes = static_cast<size_t>(values.numel()) * sizeof(float);
  auto raw = ctx.payload_buffer(bytes);
  const uint64_t hash =
      copy_and_checksum(raw->data(), reinterpret_cast<const uint8_t*>(bytes ? values.data_ptr<float>() : nullptr), bytes);
  return {std::move(raw), hash};
}

Status raw_size_check(const Inbound& m, int64_t n) {
  if (m.size() != static_cast<size_t>(n) * sizeof(float)) {
    return corrupt("raw piece of " + std::to_string(m.size()) + " bytes for " + std::to_string(n) + " values");
  }
  return Status::ok();
}

Status form_check(const compression::Pipeline& codec, const Header& h) {
  const bool raw = (h.flags & kFlagRaw) != 0;
  if (raw == raw_pieces(codec)) return Status::ok();
  return corrupt(raw ? "a raw fp32 piece where frames of " + codec.describe() + " were expected"
                     : std::string("a frame where raw fp32 pieces were expected"));
}

}  // namespace

Status decode_piece(const compression::Pipeline& codec, const Inbound& m, at::Tensor& dst) {
  if (Status st = form_check(codec, m.header); !st.is_ok()) return st;
  if (!raw_pieces(codec)) return codec.decode(m.data(), m.size(), dst);
  if (Status st = raw_size_check(m, dst.numel()); !st.is_ok()) return st;
  if (m.size()) std::memcpy(dst.data_ptr<float>(), m.data(), m.size());
  return Status::ok();
}

void send_pieces(OpContext& ctx, const std::vector<int>& to, Header h, const at::Tensor& values,
                 const compression::Pipeline& codec, int64_t piece_elems, uint64_t seed) {
  const int64_t n = values.numel();
  const uint32_t pieces = piece_count(n, piece_elems);
  for (uint32_t k = 0; k < pieces; ++k) {
    auto [b, e] = ring::chunk_bounds(n, static_cast<int>(pieces), static_cast<int>(k));
    auto [frame, hash] = piece_payload(ctx, values.narrow(0, b, e - b), codec, seed);
    h.flags = raw_pieces(codec) ? kFlagRaw : 0;
    h.piece = k;
    h.pieces = pieces;
    h.offset = static_cast<uint64_t>(b);
    h.total = static_cast<uint64_t>(n);
    std::shared_ptr<const Bytes> shared = std::move(frame);
    for (int peer : to) {
      ctx.send(peer, Outbound{h, shared, 0, shared->size(), static_cast<uint64_t>(e - b) * 4, true, hash});
    }
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

void PiecesIn::reset(int64_t n, uint32_t pieces) {
  n_ = n;
  pieces_ = pieces;
  received_ = 0;
  seen_.assign(pieces, false);
}

StatusOr<std::pair<int64_t, int64_t>> PiecesIn::accept(const Header& h) {
  if (h.flags & kFlagSplit) return corrupt("a split piece where frames per piece were expected");
  if (h.total != static_cast<uint64_t>(n_)) return corrupt("piece of a transfer of another size");
  if (pieces_ == 0) {
    if (h.pieces == 0 || h.pieces > std::max<int64_t>(1, n_)) return corrupt("piece count out of range");
    pieces_ = h.pieces;
    seen_.assign(pieces_, false);
  }
  if (h.pieces != pieces_ || h.piece >= pieces_) return corrupt("piece count disagrees");
  if (seen_[h.piece]) return corrupt("duplicate piece");
  auto [b, e] = ring::chunk_bounds(n_, static_cast<int>(pieces_), static_cast<int>(h.piece));
  if (h.offset != static_cast<uint64_t>(b)) return corrupt("piece offset disagrees");
  seen_[h.piece] = true;
  ++received_;
  return std::make_pair(b, e);
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
