// The ZeroMQ data plane's wire format: the header every peer-to-peer message starts with, its
// frozen type ids, the two small bodies (HELLO, RESULT_INFO) and the drop log. The message
// flow is described in transport/zmq/zmq_group.h; the layout in docs/data_plane.md.
//
// A data message is one ZeroMQ multipart message: a fixed 92-byte little-endian header frame,
// then (when payload_len > 0) one payload frame:
//
//   magic "ATLD" | version u8 = 4 | type u8 | flags u8 | reserved u8 = 0 | sender i32
//   | step u32 | epoch u64 | seq u64 | link_seq u64 | done_below u64 | chunk u32 | piece u32
//   | pieces u32 | payload_len u32 | offset u64 | total u64 | group u32
//   | checksum u64 = XXH3_64bits_withSeed(header[0, 84), 84, XXH3_64bits(payload, payload_len))
//
// The payload of a data piece is a compression frame (compression/frame.h); with kSplit, the
// byte range [offset, offset + payload_len) of one frame of `total` bytes; with kRaw (the
// empty pipeline: lossless fp32), the piece's elements as little-endian fp32, no frame around
// them. Every piece is checksummed here, so a damaged piece is caught before it is
// acknowledged; for a raw piece this checksum is the only one (version 2 added kRaw and
// seeds the header's hash with the payload's; version 4 added `group`: a collective is named
// by (group, seq), group 0 being every island and any other a sub-group's key).
//
// Ids of MsgType are frozen: never renumbered, only appended; a new field or a changed layout
// means a new version. Pure functions; thread-safe; parse never reads outside its input.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::transport::dataplane {

constexpr uint8_t kMagic[4] = {'A', 'T', 'L', 'D'};
constexpr uint8_t kVersion = 4;
constexpr size_t kHeaderBytes = 92;
constexpr size_t kChecksumOffset = 84;
constexpr int32_t kMaxIslandId = (1 << 20) - 1;
constexpr uint32_t kMaxPayloadBytes = 0x7fffffffu;
constexpr uint32_t kMaxMembers = 4096;

// Frozen wire ids.
enum class MsgType : uint8_t {
  kHello = 1,       // all-reduce rendezvous for (seq, epoch): body HelloBody
  kAbsent = 2,      // reply to HELLO: "I never issue this seq" (joined later); no body
  kRing = 3,        // ring piece: step t, chunk, piece k of pieces; payload = one frame
  kDirect = 4,      // lossy all-reduce piece: step = phase (0 contribution, 1 mean), chunk
  kBroadcast = 5,   // broadcast piece from the root
  kResultInfo = 6,  // a finished all-reduce's outcome, to a peer that restarted it
  kResult = 7,      // piece of that finished result (fp32 frames)
  kAck = 8,         // link acknowledgement: link_seq = last message received in order
  kGather = 9,      // allgather: a member's bytes (collectives::Tag::kGather)
};
constexpr uint8_t kMaxMsgType = 9;
const char* msg_type_name(MsgType type);

// Header flag bits (all others reserved, must be 0; at most one of them set).
constexpr uint8_t kFlagSplit = 1;  // payload is a byte range of one frame (offset/total)
constexpr uint8_t kFlagRaw = 2;    // payload is raw little-endian fp32 (RING, BROADCAST, RESULT)

struct Header {
  MsgType type = MsgType::kAck;
  uint8_t flags = 0;
  int32_t sender = -1;      // island id
  uint32_t step = 0;        // ring step / direct phase
  uint64_t epoch = 0;       // membership epoch of the sender's attempt
  uint64_t seq = 0;         // collective sequence number in its group
  uint64_t link_seq = 0;    // per-link message number (1, 2, ...); ACK: cumulative
  uint64_t done_below = 0;  // the sender has completed every collective of `group` with seq below it
  uint32_t chunk = 0;       // chunk index (ring / direct)
  uint32_t piece = 0;       // piece index within the transfer
  uint32_t pieces = 0;      // piece count of the transfer
  uint32_t payload_len = 0;
  uint64_t offset = 0;      // split: byte offset in the frame; RESULT piece: first element; else 0
  uint64_t total = 0;       // split: frame bytes; RESULT piece: result elements; else payload bytes
  uint32_t group = 0;       // 0: the group of every island; else the sub-group's key (Group::subgroup)
};

// Writes the 92 header bytes (checksum over them and `payload`) into `out`.
void encode_header(const Header& h, const uint8_t* payload, uint8_t out[kHeaderBytes]);
// The same with the payload's checksum_payload() already known (the header changes per
// transmission, the payload's hash does not).
void encode_header_hashed(const Header& h, uint64_t payload_hash, uint8_t out[kHeaderBytes]);
// Validates and parses a header frame and its payload (nullptr/0 when there is none).
// kCorrupt naming the field for: wrong size, magic, version, type, flags, reserved byte,
// sender out of range, payload length disagreeing with the payload frame, a piece index not
// below the piece count, a split range outside `total`, a raw piece of another type or not a
// whole number of fp32 values, a body of the wrong size for its type, or a bad checksum.
Status parse_header(const uint8_t* bytes, size_t size, const uint8_t* payload,
                    size_t payload_size, Header* h);

// Checksum of a message: XXH3-64 of header[0, 84) seeded with the payload's XXH3-64, so that
// a payload is hashed once however often its header is rewritten (link_seq, done_below).
uint64_t message_checksum(const uint8_t* header84, uint64_t payload_hash);
uint64_t checksum_payload(const uint8_t* payload, size_t payload_len);
// memcpy(dst, src, n) that returns checksum_payload(dst, n), hashing each block while it is
// still in cache: a sender's copy and hash of a payload in one pass over memory.
uint64_t copy_and_checksum(uint8_t* dst, const uint8_t* src, size_t n);

// HELLO body: what every member must agree on before data moves (40 bytes).
constexpr uint8_t kHelloAllreduce = 1, kHelloAllgather = 3;
struct HelloBody {
  uint8_t kind = kHelloAllreduce;  // kHelloAllreduce or kHelloAllgather
  uint64_t numel = 0;        // buffer elements (allgather: this member's bytes)
  double weight = 1;         // this member's weight, finite and > 0
  uint64_t codec = 0;        // fingerprint of the pipeline (hash of an empty frame)
  uint64_t piece_elems = 0;  // ring piece length (from chunk_bytes and the codec)
};
constexpr size_t kHelloBytes = 40;
std::vector<uint8_t> encode_hello(const HelloBody& b);
Status parse_hello(const uint8_t* p, size_t n, HelloBody* b);

// RESULT_INFO body: status u8 | pad[3] | count u32 | weight_sum f64 | numel u64 | ids i32...
struct ResultInfoBody {
  StatusCode status = StatusCode::kOk;
  double weight_sum = 0;
  uint64_t numel = 0;
  std::vector<int> contributors;
};
std::vector<uint8_t> encode_result_info(const ResultInfoBody& b);
Status parse_result_info(const uint8_t* p, size_t n, ResultInfoBody* b);
// Bytes of the RESULT_INFO body that starts at p[0, n) (from its count field), or 0 when
// fewer than 24 bytes are there or the count is out of range. For bodies followed by more
// (the star all-reduce's result: transport/zmq/star_reducer.h).
size_t result_info_size(const uint8_t* p, size_t n);

// Counts rejected messages by reason and logs the first of each reason once (ATOLL_WARN);
// later ones are counted only (ATOLL_DEBUG). Thread-safe.
class DropLog {
 public:
  void drop(const std::string& reason, const std::string& detail);
  uint64_t total() const { return total_.load(); }

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> counts_;
  std::atomic<uint64_t> total_{0};
};

}  // namespace atl::transport::dataplane
