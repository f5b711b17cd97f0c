// The data phase of one all-reduce attempt, once every participant has said HELLO and the
// weights are known. Two schedules, each bitwise equal to the in-process reference
// (transport/inproc/inproc_group.cpp) for the same inputs:
//
//   - ring (lossless codecs, ring_exchange.cpp): transport/ring.h's reduce-scatter then
//     all-gather, the receiver adding own_chunk.add_(incoming) and the owner dividing by the
//     divisor; pipelined piece by piece (piece k of step t+1 leaves as soon as piece k of
//     step t has arrived), which changes no sum's order.
//   - direct (lossy codecs, direct_exchange.cpp): every member encodes its chunk c once for
//     its owner (members[c]); the owner sums the decoded contributions in member order with
//     its own exact chunk in place, divides, encodes the mean once and sends it to all,
//     keeping decode(encode(mean)) itself.
//
// Used by AllreduceOp on the I/O thread only.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "compression/pipeline.h"
#include "transport/ring.h"
#include "transport/zmq/input_backup.h"
#include "transport/zmq/op.h"

namespace atl::transport::dataplane {

struct ExchangeSetup {
  uint64_t seq = 0;
  uint64_t epoch = 0;
  std::vector<int> members;   // participants, ascending ids (= ring order)
  int pos = 0;                // this island's index in `members`
  at::Tensor buffer;          // [n] float32: the (weighted) contribution in, the mean out
  InputBackup* backup = nullptr;  // saves a region of `buffer` before its first write
  at::Tensor transmitted;     // optional [n]: this member's contribution as others decode it
  const compression::Pipeline* codec = nullptr;
  double divisor = 1;         // W for uniform weights, else the sum of the weights
  int64_t piece_elems = 1;    // ring: elements per wire message
  int64_t chunk_bytes = 1;    // direct: bytes per wire message
};

class Exchange {
 public:
  virtual ~Exchange() = default;
  // Sends what needs no input from others (and fills `transmitted` where it is known).
  virtual void start(OpContext& ctx) = 0;
  // A RING/DIRECT message of this attempt. Invalid ones are dropped via ctx.drops(); a
  // valid piece that fails to decode sets failure().
  virtual void on_message(OpContext& ctx, Inbound& m) = 0;
  virtual bool done() const = 0;
  // Peers this member still waits for (for ControlPlane::suspect on a timeout).
  virtual std::vector<int> waiting_on() const = 0;
  const Status& failure() const { return failure_; }
  uint64_t bytes_in() const { return bytes_in_; }
  // Bytes this member expects to receive (for the timeout), from n and the codec.
  static double expected_bytes(const ExchangeSetup& s);

 protected:
  Status failure_;
  uint64_t bytes_in_ = 0;
};

std::unique_ptr<Exchange> make_ring_exchange(ExchangeSetup setup);
std::unique_ptr<Exchange> make_direct_exchange(ExchangeSetup setup);

// The lossy path's encode seed, exactly as the in-process reference computes it.
using ring::direct_seed;

}  // namespace atl::transport::dataplane
