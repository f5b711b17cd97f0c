// How a frame larger than `chunk_bytes` crosses the data plane (lossy codecs: the whole
// range is encoded once, as the in-process reference does, or block scales and top-k would
// differ): one frame cut into byte ranges with kFlagSplit (header: offset = first byte,
// total = frame bytes), reassembled by SplitIn. And the piece length of the schedules'
// lossless transfers.
//
// Pure helpers plus a receive-side tracker; used by the I/O thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "compression/pipeline.h"
#include "src/base/status.h"
#include "transport/zmq/op.h"

namespace atl::transport::dataplane {

// Elements per piece such that one piece's frame is at most `chunk_bytes` bytes.
int64_t piece_elements(const compression::Pipeline& codec, int64_t chunk_bytes);
// One encoded frame, in byte ranges of at most `chunk_bytes`, to every peer in `to`.
// `raw_bytes`: the fp32 size the frame stands for (counted once per peer).
void send_split(OpContext& ctx, const std::vector<int>& to, Header h,
                std::shared_ptr<const Bytes> frame, int64_t chunk_bytes, uint64_t raw_bytes);

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
