// The collective schedules, written once for every transport (docs/collectives.md). Each is
// a Program (program.h) run by one member over a Wire (wire.h); the member's arguments are
// agreed beforehand (the networked groups' HELLO, or the in-process hub, which sees every
// member). Given the same inputs, every transport runs the same additions in the same order,
// so results agree bitwise.
//
//   - ring_allreduce (lossless codecs): W members in ring order, the buffer cut into W chunks
//     (ring.h). Reduce-scatter: at step t = 0..W-2 member r sends chunk (r - t) mod W to
//     r + 1, which adds it to its own (own.add_(incoming)); after it member r owns the sum of
//     chunk (r + 1) mod W and divides it by the divisor. All-gather: at step t member r
//     forwards chunk (r + 1 - t) mod W, which the receiver copies. Each chunk travels in
//     pieces of piece_elems elements; piece k of step t + 1 leaves as soon as piece k of
//     step t has been added or copied (pipelining changes no sum's order).
//   - direct_allreduce (lossy codecs): member r encodes chunk c once with
//     ring::direct_seed(seq, id_r, c, 0) for its owner members[c]; the owner sums the decoded
//     contributions in member order with its own exact chunk in place, divides, encodes the
//     mean once (seed direct_seed(seq, id_c, c, 1)) and sends it to all, keeping
//     decode(encode(mean)) itself. The same bytes as a ring; two quantisations instead of W.
//   - broadcast: the root's buffer to every other member: lossless codecs in pieces of
//     piece_elems (each its own frame, or raw fp32), lossy ones as one frame (seed 0).
//   - allgather: every member's bytes to every other member (sizes agreed beforehand).
//
// With a wire that takes raw fp32 (Wire::raw_fp32) the empty pipeline sends the buffer's
// own memory, and receives into it, with no frame and no copy. An all-reduce given `out`
// reads `buffer` and writes every element of `out` but those of the all-gather pieces the
// wire keeps (Wire::keep) (the networked groups keep the input for restarts that way, and
// `out` is the result they keep for the hand-over).
//
// Errors: a frame that does not decode throws CorruptFrame (the transport decides: drop the
// link, restart the collective); a program's own encoding that does not decode is a bug
// (TORCH_CHECK).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "compression/pipeline.h"
#include "transport/collectives/program.h"
#include "transport/collectives/wire.h"

namespace atl::transport::collectives {

// A peer's message did not decode.
class CorruptFrame : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AllreduceSetup {
  uint64_t seq = 0;              // the collective's sequence number (lossy encode seeds)
  std::vector<int> members;      // participants, ascending ids (= ring order)
  int pos = 0;                   // this member's index in `members`
  at::Tensor buffer;             // [n] float32: the (weighted) contribution in, the mean out
  at::Tensor out;                // optional [n] float32: where the mean goes instead; `buffer`
                                 // is then only read (a restart finds the input intact)
  at::Tensor transmitted;        // optional [n]: this member's contribution as others decode it
  const compression::Pipeline* codec = nullptr;
  double divisor = 1;            // W for uniform weights, else the sum of the weights
  int64_t piece_elems = INT64_MAX;  // ring: elements per message
};

// ring_allreduce for lossless codecs, direct_allreduce otherwise (see above).
Program allreduce(Wire& wire, AllreduceSetup s);
// Bytes a member expects to receive in an all-reduce (data-phase timeouts).
double expected_bytes(const AllreduceSetup& s);

struct BroadcastSetup {
  std::vector<int> members;      // participants, ascending ids; contains root
  int root = -1;
  at::Tensor buffer;             // [n] float32: the root's input, everyone's output
  const compression::Pipeline* codec = nullptr;
  int64_t piece_elems = INT64_MAX;  // lossless codecs: elements per message
  Tag tag = Tag::kBroadcast;     // kResult: the hand-over of a finished result (attempt.h)
};
Program broadcast(Wire& wire, BroadcastSetup s);

struct AllgatherSetup {
  std::vector<int> members;      // participants, ascending ids
  int pos = 0;                   // this member's index in `members`
  const std::vector<uint8_t>* mine = nullptr;    // this member's bytes
  std::vector<uint64_t> sizes;   // every member's byte count, by position
  std::vector<std::vector<uint8_t>>* out = nullptr;  // resized to W; out[q] = member q's bytes
};
Program allgather(Wire& wire, AllgatherSetup s);

// Peers agree on a pipeline iff they encode an empty buffer to the same bytes (the stage
// ids and parameters are in the frame header): the HELLOs compare this.
uint64_t codec_fingerprint(const compression::Pipeline& codec);

}  // namespace atl::transport::collectives
