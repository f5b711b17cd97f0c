// The ZeroMQ data plane's wire format: the header every peer-to-peer message starts with, its
// frozen type ids and the drop log (the HELLO and RESULT_INFO bodies: collectives/attempt.h).
// The message flow is described in transport/zmq/zmq_group.h; the layout in docs/data_plane.md.
//
// A data message is one ZeroMQ multipart message: a fixed 92-byte little-endian header frame,
// then (when payload_len > 0) one payload frame:
//
//   magic "ATLD" | version u8 = 5 | type u8 | flags u8 | reserved u8 = 0 | sender i32
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
// by (group, seq), group 0 being every island and any other a sub-group's key; version 5
// hands a finished result over as RESULT pieces named like BROADCAST pieces, written once
// for every transport in transport/collectives/attempt.h).
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
#include "transport/collectives/attempt.h"

namespace atl::transport::dataplane {

constexpr uint8_t kMagic[4] = {'A', 'T', 'L', 'D'};
constexpr uint8_t kVersion = 5;
constexpr size_t kHeaderBytes = 92;
constexpr size_t kChecksumOffset = 84;
constexpr uint32_t kMaxPayloadBytes = 0x7fffffffu;

// Frozen wire ids.
enum class MsgType : uint8_t {
  kHello = 1,       // rendezvous for (group, seq, epoch): body collectives::Hello
  kAbsent = 2,      // reply to HELLO: "I never issue this seq" (joined later); no body
  kRing = 3,        // ring piece: step t, chunk, piece k of pieces; payload = one frame
  kDirect = 4,      // lossy all-reduce piece: step = phase (0 contribution, 1 mean), chunk
  kBroadcast = 5,   // broadcast piece from the root
  kResultInfo = 6,  // a finished collective's outcome, to a peer that restarted it
  kResult = 7,      // piece k of that finished result (raw fp32, like a BROADCAST piece)
  kAck = 8,         // link acknowledgement: link_seq = last message received in order
  kGather = 9,      // allgather: a member's bytes (collectives::Tag::kGather)
};
constexpr uint8_t kMaxMsgType = 9;
// The messages a collective's program sends carry its tag as their type.
static_assert(static_cast<uint8_t>(MsgType::kHello) == static_cast<uint8_t>(collectives::Tag::kHello) &&
              static_cast<uint8_t>(MsgType::kAbsent) == static_cast<uint8_t>(collectives::Tag::kAbsent) &&
              static_cast<uint8_t>(MsgType::kRing) == static_cast<uint8_t>(collectives::Tag::kRing) &&
              static_cast<uint8_t>(MsgType::kDirect) == static_cast<uint8_t>(collectives::Tag::kDirect) &&
              static_cast<uint8_t>(MsgType::kBroadcast) == static_cast<uint8_t>(collectives::Tag::kBroadcast) &&
              static_cast<uint8_t>(MsgType::kResultInfo) == static_cast<uint8_t>(collectives::Tag::kResultInfo) &&
              static_cast<uint8_t>(MsgType::kResult) == static_cast<uint8_t>(collectives::Tag::kResult) &&
              static_cast<uint8_t>(MsgType::kGather) == static_cast<uint8_t>(collectives::Tag::kGather));
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
// `payload_hash` (optional): the payload's checksum_payload(), verified, for a receiver that
// forwards the same bytes (ZmqWire::send) and need not hash them again.
Status parse_header(const uint8_t* bytes, size_t size, const uint8_t* payload,
                    size_t payload_size, Header* h, uint64_t* payload_hash = nullptr);

// The payload's part of a message's checksum: XXH3-64 (src/base/hash.h; copy_and_xxh3_64
// computes it while copying).
uint64_t checksum_payload(const uint8_t* payload, size_t payload_len);

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
