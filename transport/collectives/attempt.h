// The restart-among-survivors protocol, written once for the networked groups (ZeroMQ and
// gloo; docs/collectives.md, "Restarts among survivors"): one attempt of one collective
// among the members of one membership view, as a Program (program.h) over a Wire (wire.h).
//
// A collective runs in attempts. The transport starts one per membership view (ZeroMQ: per
// epoch; gloo: per mesh) after restoring the caller's input; when the view changes before
// the attempt ends, it abandons the attempt and starts the next one. An attempt:
//
//   1. Rendezvous. This member sends what it issued (HELLO) to every other member and
//      awaits each one's answer: HELLO (it runs the collective too), ABSENT (it joined later
//      and never issues it), or RESULT_INFO (it finished the collective in an earlier attempt
//      and keeps the result, whose RESULT pieces follow). Answers a transport already knows
//      (gloo's rendezvous states) come in Attempt::known and are not asked for.
//   2. Hand-over. On a RESULT_INFO (the first to arrive), the attempt takes that member's
//      values, status and contributors instead of running the collective again. So every
//      member that completes a collective holds the same values and contributors, however
//      a failure fell.
//   3. Otherwise the participants (this member and those that said HELLO) must have issued
//      the same collective (kind, size, codec, piece length, root; else kInternal). An
//      all-reduce's weights set the divisor (uniform: W; else every buffer is pre-multiplied
//      by its weight and the sum divided by the weight sum). Then the data phase runs the
//      schedule of schedules.h among the participants (Wire::data_phase marks its start).
//
// Result: contributors = the participants of the attempt that produced the values; status
// ok, or kPeerLost naming the members of the first attempt that are not members of this one.
// A frame or answer that does not parse throws CorruptFrame (the transport completes the
// collective with kCorrupt).
//
// The other side of a hand-over, hand_over(), is run by the transport of a member that keeps
// a finished result (Kept): ZeroMQ's I/O thread when a HELLO arrives for a collective it has
// finished, gloo's worker for the members its rendezvous names.
//
// Wire bodies (little-endian; the ZeroMQ wire's HELLO / RESULT_INFO, docs/data_plane.md):
//   HELLO (40 bytes): kind u8 | 3 zero bytes | root i32 (broadcast; else 0) | numel u64
//                     | weight f64 | codec u64 | piece_elems u64
//   RESULT_INFO:      status u8 | 3 zero bytes | count u32 | weight_sum f64 | numel u64
//                     | contributor ids i32 x count, ascending
//   RESULT pieces:    the values as raw fp32 (a broadcast from the keeper with the empty
//                     pipeline, tag kResult); an allgather's result packed by pack_gathered.
//
// Thread model: as Program.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <vector>

#include "compression/pipeline.h"
#include "src/base/status.h"
#include "transport/collectives/program.h"
#include "transport/collectives/wire.h"
#include "transport/group.h"

namespace atl::transport::collectives {

constexpr uint8_t kHelloAllreduce = 1, kHelloBroadcast = 2, kHelloAllgather = 3;
constexpr size_t kHelloBytes = 40;
constexpr uint32_t kMaxMembers = 4096;  // contributors in a RESULT_INFO (the membership's limit)
constexpr int32_t kMaxIslandId = (1 << 20) - 1;

// What a member issued.
struct Hello {
  uint8_t kind = kHelloAllreduce;  // kHelloAllreduce, kHelloBroadcast or kHelloAllgather
  uint64_t numel = 0;        // buffer elements (allgather: this member's bytes)
  double weight = 1;         // this member's weight, finite and > 0
  uint64_t codec = 0;        // codec_fingerprint() of the pipeline
  uint64_t piece_elems = 0;  // elements per data message (> 0)
  int32_t root = -1;         // broadcast: the root island
};
std::vector<uint8_t> encode_hello(const Hello& h);
// kCorrupt for a wrong size, unknown kind, padding set, weight not finite and > 0, piece
// length 0, or a broadcast without a root.
Status parse_hello(const uint8_t* p, size_t n, Hello* h);

// A finished collective's outcome, ahead of its values.
struct ResultInfo {
  StatusCode status = StatusCode::kOk;
  double weight_sum = 0;
  uint64_t numel = 0;  // fp32 values that follow
  std::vector<int> contributors;
};
std::vector<uint8_t> encode_result_info(const ResultInfo& r);
Status parse_result_info(const uint8_t* p, size_t n, ResultInfo* r);
// Bytes of the RESULT_INFO body that starts at p[0, n) (from its count field), or 0 when
// fewer than 24 bytes are there or the count is out of range. For bodies followed by more.
size_t result_info_size(const uint8_t* p, size_t n);

// An allgather's result as fp32 words (count u64, sizes u64 x count, the bytes, zero-padded
// to a multiple of 4) for the hand-over, and back. unpack_gathered: kCorrupt when the words
// do not hold such a layout.
at::Tensor pack_gathered(const std::vector<std::vector<uint8_t>>& gathered);
Status unpack_gathered(const at::Tensor& words, std::vector<std::vector<uint8_t>>* gathered);

// One collective as the caller issued it. The transport keeps it across attempts.
struct Request {
  uint64_t seq = 0;
  Hello hello;                 // what this member announces
  at::Tensor buffer;           // all-reduce, broadcast: [n] float32, the input, then the result
  at::Tensor result;           // all-reduce, a broadcast's receivers: [n] float32 where the result
                               // goes instead, so that `buffer` stays the input until the transport
                               // copies the result there at completion (ZeroMQ and gloo: a
                               // collective that ends without a result leaves the caller its input)
  at::Tensor transmitted;      // all-reduce, optional [n]: this member's input as others decode it
  const compression::Pipeline* codec = nullptr;  // all-reduce, broadcast
  const std::vector<uint8_t>* gather_in = nullptr;          // allgather: this member's bytes
  std::vector<std::vector<uint8_t>>* gather_out = nullptr;  // allgather: the result
  std::vector<int> first_members;   // the members of the first attempt (for kPeerLost)
  int64_t result_piece_elems = 1;   // fp32 elements per RESULT piece (the same on every member)
  bool transmitted_filled = false;  // a data phase has filled `transmitted`
};

// One attempt's membership view.
struct Attempt {
  std::vector<int> members;  // ascending, containing this member
  // Answers known without asking: Tag::kAbsent (the member does not take part) or
  // Tag::kResultInfo (it keeps the finished result and sends it unasked).
  std::map<int, Tag> known;
  const char* where = "";    // the transport, for log lines
};

// Runs one attempt of `req` (see the file comment); `*out` holds the result once it ends.
Program attempt(Wire& wire, Request& req, Attempt a, CollectiveResult* out);

// A finished collective's result, kept for members that restart it.
struct Kept {
  CollectiveResult result;
  at::Tensor values;  // [n] float32: the values (an allgather's: pack_gathered)
};
// Sends `kept` to island `to`: RESULT_INFO, then the values in RESULT pieces of
// `piece_elems` fp32 elements.
Program hand_over(Wire& wire, const Kept& kept, int to, int64_t piece_elems);

}  // namespace atl::transport::collectives
