#include "transport/zmq/data_wire.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "src/base/hash.h"
#include "src/base/log.h"
#include "src/base/bytes.h"

namespace atl::transport::dataplane {

static_assert(kHeaderBytes == 92 && kChecksumOffset == 84, "data header layout changed");
static_assert(sizeof(double) == 8 && sizeof(int32_t) == 4);

namespace {

using bytes::get_at;
using bytes::put_at;

Status bad(const std::string& what) { return corrupt("data message: " + what); }

// The header's fields after its first 8 bytes, with their offsets (data_wire.h's layout):
// f(offset, field) for each, for encode (const Header) and parse alike.
template <typename H, typename F>
void each_field(H& h, F f) {
  f(8, h.sender); f(12, h.step); f(16, h.epoch); f(24, h.seq); f(32, h.link_seq); f(40, h.done_below);
  f(48, h.chunk); f(52, h.piece); f(56, h.pieces); f(60, h.payload_len); f(64, h.offset); f(72, h.total);
  f(80, h.group);
}

// Checksum of a message: XXH3-64 of header[0, 84) seeded with the payload's XXH3-64, so that
// a payload is hashed once however often its header is rewritten (link_seq, done_below).
uint64_t message_checksum(const uint8_t* header84, uint64_t payload_hash) {
  return xxh3_64(header84, kChecksumOffset, payload_hash);
}

}  // namespace

const char* msg_type_name(MsgType type) {
  switch (type) {
    case MsgType::kHello: return "HELLO";
    case MsgType::kAbsent: return "ABSENT";
    case MsgType::kRing: return "RING";
    case MsgType::kDirect: return "DIRECT";
    case MsgType::kBroadcast: return "BROADCAST";
    case MsgType::kResultInfo: return "RESULT_INFO";
    case MsgType::kResult: return "RESULT";
    case MsgType::kAck: return "ACK";
    case MsgType::kGather: return "GATHER";
  }
  return "?";
}

uint64_t checksum_payload(const uint8_t* payload, size_t payload_len) {
  return xxh3_64(payload, payload_len);
}

void encode_header(const Header& h, const uint8_t* payload, uint8_t out[kHeaderBytes]) {
  encode_header_hashed(h, checksum_payload(payload, h.payload_len), out);
}

void encode_header_hashed(const Header& h, uint64_t payload_hash, uint8_t out[kHeaderBytes]) {
  std::memcpy(out, kMagic, 4);
  out[4] = kVersion;
  out[5] = static_cast<uint8_t>(h.type);
  out[6] = h.flags;
  out[7] = 0;
  each_field(h, [&](size_t at, auto v) { put_at(out, at, v); });
  put_at<uint64_t>(out, kChecksumOffset, message_checksum(out, payload_hash));
}

Status parse_header(const uint8_t* b, size_t size, const uint8_t* payload, size_t payload_size,
                    Header* h, uint64_t* payload_hash) {
  if (size != kHeaderBytes) {
    return bad("header frame of " + std::to_string(size) + " bytes, want " + std::to_string(kHeaderBytes));
  }
  if (std::memcmp(b, kMagic, 4) != 0) return bad("wrong magic");
  if (b[4] != kVersion) return bad("unsupported version " + std::to_string(b[4]));
  if (b[5] == 0 || b[5] > kMaxMsgType) return bad("unknown type " + std::to_string(b[5]));
  if ((b[6] & ~(kFlagSplit | kFlagRaw)) != 0) return bad("reserved flag bits set");
  if (b[6] == (kFlagSplit | kFlagRaw)) return bad("both split and raw flags set");
  if (b[7] != 0) return bad("reserved byte set");
  h->type = static_cast<MsgType>(b[5]);
  h->flags = b[6];
  each_field(*h, [&]<typename T>(size_t at, T& v) { v = get_at<T>(b, at); });
  if (h->sender < 0 || h->sender > collectives::kMaxIslandId) return bad("sender id out of range");
  if (h->payload_len > kMaxPayloadBytes || h->payload_len != payload_size) {
    return bad("payload length " + std::to_string(h->payload_len) + " but a payload frame of " +
               std::to_string(payload_size) + " bytes");
  }
  if (h->pieces != 0 && h->piece >= h->pieces) return bad("piece index not below the piece count");
  if ((h->flags & kFlagSplit) && (h->offset > h->total || h->total - h->offset < h->payload_len)) {
    return bad("split piece outside its frame");
  }
  if (h->flags & kFlagRaw) {
    if (h->type != MsgType::kRing && h->type != MsgType::kBroadcast && h->type != MsgType::kResult) {
      return bad(std::string("raw fp32 payload on a ") + msg_type_name(h->type) + " message");
    }
    if (h->payload_len % 4 != 0) return bad("raw fp32 payload of " + std::to_string(h->payload_len) + " bytes");
  }
  switch (h->type) {
    case MsgType::kHello:
      if (h->payload_len != collectives::kHelloBytes) return bad("HELLO body size");
      break;
    case MsgType::kAbsent:
    case MsgType::kAck:
      if (h->payload_len != 0) return bad(std::string(msg_type_name(h->type)) + " with a payload");
      break;
    case MsgType::kRing:
    case MsgType::kDirect:
    case MsgType::kBroadcast:
    case MsgType::kResult:
    case MsgType::kGather:
      if (h->pieces == 0) return bad("data piece with a piece count of 0");
      break;
    case MsgType::kResultInfo:
      break;
  }
  const uint64_t hash = checksum_payload(payload, payload_size);
  if (get_at<uint64_t>(b, kChecksumOffset) != message_checksum(b, hash)) return bad("checksum mismatch");
  if (payload_hash) *payload_hash = hash;
  return Status::ok();
}

void DropLog::drop(const std::string& reason, const std::string& detail) {
  total_.fetch_add(1);
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = ++counts_[reason];
  }
  if (n == 1) {
    ATOLL_WARN("zmq data plane: dropped a message (" << reason << "): " << detail
                                                     << " [further drops of this kind are counted]");
  } else {
    ATOLL_DEBUG("zmq data plane: dropped a message (" << reason << ", #" << n << "): " << detail);
  }
}

}  // namespace atl::transport::dataplane
