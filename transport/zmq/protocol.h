// The control protocol between islands (ZmqControlClient) and the coordinator: join,
// heartbeat, membership, suspicion, the server role's push/pull, the rendezvous store and
// metrics records. The byte layout, message flow and failure rules are docs/protocol.md.
//
// Every message is one ZeroMQ frame: a fixed 48-byte little-endian header, then a body whose
// layout depends on the type.
//
//   magic "ATLC" | version u8 = 2 | type u8 | flags u16 = 0 | island i32 | body length u32
//   | epoch u64 | request id u64 | session u64
//   | checksum u64 (xxhash64, seed 0, over header bytes [0, 40) and then the body) | body
//
// Ids of MsgType and ErrorCode are frozen: never renumber, only append; a new field or a
// changed layout means a new version. Every length on the wire is bounded (the k* limits
// below), so a parser never allocates more than the bytes it was given.
//
// Pure functions; thread-safe. parse() never reads outside its input and never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "src/base/status.h"
#include "transport/control_plane.h"

namespace atl::transport::proto {

constexpr uint8_t kMagic[4] = {'A', 'T', 'L', 'C'};
constexpr uint8_t kVersion = 3;  // 2: JOIN carries the run text; 3: ERROR run_ended
constexpr size_t kHeaderBytes = 48;
constexpr size_t kChecksumOffset = 40;

// Bounds. A message outside them is kCorrupt on parse and kInvalidArgument on encode.
constexpr int32_t kMaxIslandId = (1 << 20) - 1;       // island ids are 0..kMaxIslandId
constexpr size_t kMaxBodyBytes = (size_t{1} << 31) - 1;  // one PUSH/PULL_REPLY frame
constexpr size_t kMaxMembers = 4096;
constexpr size_t kMaxEndpointBytes = 256;
constexpr size_t kPublicKeyBytes = 40;                // Z85 of a 32-byte CURVE key ("" = none)
constexpr size_t kMaxStoreKeyBytes = 1024;
constexpr size_t kMaxStoreValueBytes = size_t{64} << 20;
constexpr size_t kMaxRecordBytes = size_t{1} << 20;
constexpr size_t kMaxErrorTextBytes = 1024;
constexpr size_t kMaxRunBytes = size_t{64} << 10;     // JOIN's run text
constexpr uint32_t kWaitForever = 0xFFFFFFFFu;        // wait_ms of PULL / STORE_GET

// Frozen wire ids.
enum class MsgType : uint8_t {
  kJoin = 1,        // island -> coordinator: endpoint, public key, run   reply JOIN_ACK | ERROR
  kJoinAck = 2,     // coordinator -> island: membership (header epoch)
  kHeartbeat = 3,   // island -> coordinator: empty; header epoch = the island's view
  kLeave = 4,       // island -> coordinator: empty; no reply
  kMembership = 5,  // coordinator -> island: membership (header epoch); no reply
  kSuspect = 6,     // island -> coordinator: peer id; no reply
  kPush = 7,        // island -> coordinator: tag, weight, frame           reply ACK | ERROR
  kPull = 8,        // island -> coordinator: tag, wait_ms                 reply PULL_REPLY | ERROR
  kPullReply = 9,   // coordinator -> island: tag, frame
  kStoreSet = 10,   // island -> coordinator: key, value                   reply ACK | ERROR
  kStoreGet = 11,   // island -> coordinator: key, wait_ms                 reply STORE_REPLY | ERROR
  kStoreReply = 12, // coordinator -> island: value
  kRecord = 13,     // island -> coordinator: one JSON object; no reply
  kError = 14,      // coordinator -> island: code, text (request id of the failed request)
  kAck = 15,        // coordinator -> island: empty (request id of the acknowledged request)
};
constexpr uint8_t kMaxMsgType = 15;
const char* msg_type_name(MsgType type);

// Frozen wire ids of ERROR.
enum class ErrorCode : uint8_t {
  kUnknownIsland = 1,  // the coordinator has no live island with this id: JOIN again
  kRejected = 2,       // JOIN refused (id out of range, key mismatch, another run)
  kTimeout = 3,        // PULL / STORE_GET waited wait_ms without an answer
  kCorrupt = 4,        // the PUSH frame did not decode with the coordinator's pipeline
  kNoServer = 5,       // PUSH / PULL but the coordinator hosts no server role
  kLimit = 6,          // a coordinator limit was reached (pending requests, store bytes)
  kSuperseded = 7,     // another process joined with this island id (newer session)
  kInternal = 8,       // the server role threw; see the coordinator's log
  kRunEnded = 9,       // unsolicited (request id 0), and the answer to JOIN and HEARTBEAT after
                       // it: the coordinator ended the run without this island (text: why)
};
constexpr uint8_t kMaxErrorCode = 9;
// The Status a client reports for an ERROR reply.
StatusCode error_status_code(ErrorCode code);

struct Header {
  MsgType type = MsgType::kHeartbeat;
  int32_t island = 0;       // island -> coordinator: sender; coordinator -> island: recipient
  uint64_t epoch = 0;       // membership epoch (the sender's view; MEMBERSHIP: the new one)
  uint64_t request_id = 0;  // set by the island on requests, echoed by the reply; 0 otherwise
  uint64_t session = 0;     // random per island process, fixed for its lifetime
};

// One message, all types in one struct: encode() reads and parse() fills only the fields of
// header.type (docs/protocol.md lists them). `bytes` views memory owned by someone else:
// the caller's buffer for encode, the parsed input for parse (valid while it lives).
struct Message {
  Header header{};
  std::string endpoint{};           // JOIN: the island's data-plane endpoint
  std::string public_key{};         // JOIN: Z85 CURVE public key or ""
  std::string run{};                // JOIN: the run the island belongs to (CoordinatorOptions::run)
  Membership membership{};          // JOIN_ACK, MEMBERSHIP (its epoch = header.epoch)
  int32_t peer = -1;                // SUSPECT
  uint64_t tag = 0;                 // PUSH, PULL, PULL_REPLY
  double weight = 1.0;              // PUSH: finite and > 0
  uint32_t wait_ms = 0;             // PULL, STORE_GET (kWaitForever = no limit)
  std::string key{};                // STORE_SET, STORE_GET
  std::span<const uint8_t> bytes{}; // PUSH/PULL_REPLY: frame; STORE_SET/STORE_REPLY: value;
                                    // RECORD: the JSON text
  ErrorCode error = ErrorCode::kInternal;  // ERROR
  std::string text{};               // ERROR: what went wrong
};

// Appends the encoded message to `out`. kInvalidArgument (nothing appended) when a field
// breaks a bound or a rule that parse() checks.
Status encode(const Message& message, std::vector<uint8_t>* out);
// Same, into a new buffer; throws std::invalid_argument where encode() returns an error (for
// messages built by atoll itself, where that is a bug).
std::vector<uint8_t> encode_or_throw(const Message& message);

// Validates and parses one message. kCorrupt, with a message naming the field, for a
// message that is truncated or has trailing bytes, a wrong magic, version or flags, an
// unknown type, a body length above kMaxBodyBytes, a bad checksum, or a body that breaks a
// bound or a rule. The checksum is checked before the body is read.
Status parse(const uint8_t* data, size_t size, Message* message);

// For tests and fuzzing: sets the header's body length to size - kHeaderBytes and recomputes
// the checksum, so that mutated messages reach the body checks. False (nothing changed) when
// size < kHeaderBytes or the body is longer than kMaxBodyBytes.
bool reseal(uint8_t* data, size_t size);

// A short description for log lines: "HEARTBEAT island 2 epoch 5 rid 0".
std::string describe(const Header& header);

}  // namespace atl::transport::proto
