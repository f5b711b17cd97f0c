// How a buffer crosses the data plane in wire messages of at most `chunk_bytes`:
//
//   - piece frames (a finished all-reduce's result handed to a restarted peer; the
//     collectives' own pieces are cut by transport/collectives/schedules.h): the n elements
//     are cut into `pieces` balanced ranges (ring::chunk_bounds(n, pieces, k)), each encoded
//     as its own frame. Header: offset = first element, total = n.
//     The empty pipeline (plain fp32) sends each range as raw fp32 instead (kFlagRaw): a
//     frame would only add its header and a second checksum over the same bytes, and raw
//     values can be added straight from the received message.
//   - split frames (lossy codecs: the whole range must be encoded once, as the in-process
//     reference does, or block scales and top-k would differ): one frame cut into byte
//     ranges with kFlagSplit. Header: offset = first byte, total = frame bytes.
//
// Pure helpers plus two small receive-side trackers; used by the I/O thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "compression/pipeline.h"
#include "src/base/status.h"
#include "transport/zmq/op.h"

namespace atl::transport::dataplane {

// Elements per piece such that one piece's frame is at most `chunk_bytes` bytes.
int64_t piece_elements(const compression::Pipeline& codec, int64_t chunk_bytes);
// True when `codec`'s pieces travel as raw fp32 (kFlagRaw): the empty pipeline.
bool raw_pieces(const compression::Pipeline& codec);
// max(1, ceil(n / piece_elems)): an empty transfer still travels as one (empty) piece.
uint32_t piece_count(int64_t n, int64_t piece_elems);

// Every piece of `values`, each encoded once and sent to every peer in `to`.
void send_pieces(OpContext& ctx, const std::vector<int>& to, Header h, const at::Tensor& values,
                 const compression::Pipeline& codec, int64_t piece_elems, uint64_t seed);
// A received piece (raw fp32 or one frame, as `codec` sends them) decoded into `dst`. kCorrupt
// when its form is not the one `codec` sends, its size disagrees with dst, or the frame fails.
Status decode_piece(const compression::Pipeline& codec, const Inbound& m, at::Tensor& dst);
// One encoded frame, in byte ranges of at most `chunk_bytes`, to every peer in `to`.
// `raw_bytes`: the fp32 size the frame stands for (counted once per peer).
void send_split(OpContext& ctx, const std::vector<int>& to, Header h,
                std::shared_ptr<const Bytes> frame, int64_t chunk_bytes, uint64_t raw_bytes);

// Receive side of piece frames for a transfer of n elements.
class PiecesIn {
 public:
  // `pieces`: the count both sides derived (0 = take it from the first piece).
  void reset(int64_t n, uint32_t pieces = 0);
  // Checks a piece header (not split, total == n, count, index not seen, offset) and marks
  // it received. Returns its element range [begin, end) or kCorrupt.
  StatusOr<std::pair<int64_t, int64_t>> accept(const Header& h);
  bool complete() const { return pieces_ > 0 && received_ == pieces_; }

 private:
  int64_t n_ = 0;
  uint32_t pieces_ = 0, received_ = 0;
  std::vector<bool> seen_;
};

// Receive side of one split frame of at most `max_total` bytes.
class SplitIn {
 public:
  void reset(size_t max_total);
  // Copies a piece into place after checking it (split flag, total, count, index unseen).
  Status accept(const Header& h, const uint8_t* payload);
  bool complete() const { return pieces_ > 0 && received_ == pieces_; }
  const Bytes& frame() const { return frame_; }
  void release() { Bytes().swap(frame_); }

 private:
  size_t max_total_ = 0;
  uint32_t pieces_ = 0, received_ = 0;
  std::vector<bool> seen_;
  Bytes frame_;
};

}  // namespace atl::transport::dataplane
