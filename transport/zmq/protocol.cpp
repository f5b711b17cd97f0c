#include "transport/zmq/protocol.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "src/base/bytes.h"
#include "src/base/hash.h"

namespace atl::transport::proto {

static_assert(sizeof(MsgType) == 1 && sizeof(ErrorCode) == 1, "wire ids are one byte");
static_assert(sizeof(double) == 8, "IEEE-754 binary64 weights");
// magic 4 + version 1 + type 1 + flags 2 + island 4 + body length 4 + epoch 8 + request id 8
// + session 8 = 40 bytes covered by the checksum, then the 8-byte checksum.
static_assert(4 + 1 + 1 + 2 + 4 + 4 + 8 + 8 + 8 == kChecksumOffset, "header layout changed");
static_assert(kChecksumOffset + 8 == kHeaderBytes, "header layout changed");
static_assert(kMaxBodyBytes <= 0xFFFFFFFFu, "body length is a u32");
static_assert(kMaxRunBytes <= 0xFFFFFFFFu, "the run text's length is a u32");

const char* msg_type_name(MsgType type) {
  static constexpr const char* kNames[kMaxMsgType + 1] = {
      "?",    "JOIN",     "JOIN_ACK",  "HEARTBEAT", "LEAVE",       "MEMBERSHIP", "SUSPECT", "PUSH",
      "PULL", "PULL_REPLY", "STORE_SET", "STORE_GET", "STORE_REPLY", "RECORD",     "ERROR",   "ACK"};
  const auto i = static_cast<uint8_t>(type);
  return i <= kMaxMsgType ? kNames[i] : "?";
}

StatusCode error_status_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kUnknownIsland: return StatusCode::kUnavailable;
    case ErrorCode::kRejected: return StatusCode::kInvalidArgument;
    case ErrorCode::kTimeout: return StatusCode::kTimeout;
    case ErrorCode::kCorrupt: return StatusCode::kCorrupt;
    case ErrorCode::kNoServer: return StatusCode::kUnavailable;
    case ErrorCode::kLimit: return StatusCode::kUnavailable;
    case ErrorCode::kSuperseded: return StatusCode::kPeerLost;
    case ErrorCode::kInternal: return StatusCode::kInternal;
    case ErrorCode::kRunEnded: return StatusCode::kPeerLost;
  }
  return StatusCode::kInternal;
}

std::string describe(const Header& h) {
  return std::string(msg_type_name(h.type)) + " island " + std::to_string(h.island) + " epoch " +
         std::to_string(h.epoch) + " rid " + std::to_string(h.request_id);
}

namespace {

uint64_t checksum(const uint8_t* msg, size_t size) {
  return xxh64(msg, kChecksumOffset, msg + kHeaderBytes, size > kHeaderBytes ? size - kHeaderBytes : 0);
}

// ---- body fields ---------------------------------------------------------------------------
// body() below lists each type's fields once; a Reader parses them (bounds-checked, every
// read names its field, so an error says where the message went wrong), a Writer appends them.
class Reader {
 public:
  Reader(const uint8_t* p, size_t size) : r_(p, size, "body") {}
  size_t left() const { return r_.remaining(); }
  template <typename T>
  Status num(const char* field, T& v) {
    v = r_.num<T>(field);
    return status();
  }
  // A Len-prefixed string of at most `max` bytes.
  template <typename Len>
  Status str(const char* field, size_t max, std::string& s) {
    s = r_.str_as<Len>(field, max);
    return status();
  }
  Status rest(std::span<const uint8_t>& s) {
    const std::string_view v = r_.rest();
    s = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(v.data()), v.size());
    return Status::ok();
  }
  // Bounds the member count and sizes the list. Each member takes at least 7 bytes: no
  // reservation beyond what the body can hold.
  Status members(uint32_t count, std::vector<Peer>& m) {
    if (count > kMaxMembers) return corrupt("member count " + std::to_string(count) + " above the bound");
    if (count > left() / 7) return corrupt("member count " + std::to_string(count) + " exceeds the body");
    m.assign(count, Peer{});
    return Status::ok();
  }

 private:
  Status status() const { return r_.ok() ? Status::ok() : corrupt(r_.error()); }
  bytes::Reader r_;
};

struct Writer {
  bytes::Writer<std::vector<uint8_t>> w;
  size_t body_start;
  template <typename T>
  Status num(const char*, T v) {
    w.num(v);
    return Status::ok();
  }
  template <typename Len>  // check_body bounds the length
  Status str(const char*, size_t, const std::string& s) {
    w.str_as<Len>(s);
    return Status::ok();
  }
  Status rest(std::span<const uint8_t> s) {
    if (w.size() - body_start + s.size() > kMaxBodyBytes) return invalid_argument("encode: body above kMaxBodyBytes");
    w.raw(s.data(), s.size());
    return Status::ok();
  }
  Status members(uint32_t, const std::vector<Peer>&) { return Status::ok(); }  // the count says it all
};

static_assert(sizeof(Peer::id) == 4, "member ids are i32 on the wire");

// The body of m.header.type, field by field in wire order. IO = Reader with Message, or
// Writer with const Message.
template <typename IO, typename M>
Status body(IO& io, M& m) {
  switch (m.header.type) {
    case MsgType::kJoin:
      ATOLL_TRY(io.template str<uint16_t>("endpoint", kMaxEndpointBytes, m.endpoint));
      ATOLL_TRY(io.template str<uint8_t>("public key", kPublicKeyBytes, m.public_key));
      return io.template str<uint32_t>("run", kMaxRunBytes, m.run);
    case MsgType::kJoinAck:
    case MsgType::kMembership: {
      uint32_t count = static_cast<uint32_t>(m.membership.members.size());
      ATOLL_TRY(io.num("member count", count));
      ATOLL_TRY(io.members(count, m.membership.members));
      for (auto& p : m.membership.members) {
        ATOLL_TRY(io.num("member id", p.id));
        ATOLL_TRY(io.template str<uint16_t>("member endpoint", kMaxEndpointBytes, p.endpoint));
        ATOLL_TRY(io.template str<uint8_t>("member public key", kPublicKeyBytes, p.public_key));
      }
      return Status::ok();
    }
    case MsgType::kSuspect: return io.num("peer", m.peer);
    case MsgType::kPush:
      ATOLL_TRY(io.num("tag", m.tag));
      ATOLL_TRY(io.num("weight", m.weight));
      return io.rest(m.bytes);
    case MsgType::kPull:
      ATOLL_TRY(io.num("tag", m.tag));
      return io.num("wait_ms", m.wait_ms);
    case MsgType::kPullReply:
      ATOLL_TRY(io.num("tag", m.tag));
      return io.rest(m.bytes);
    case MsgType::kStoreSet:
      ATOLL_TRY(io.template str<uint16_t>("key", kMaxStoreKeyBytes, m.key));
      return io.rest(m.bytes);
    case MsgType::kStoreGet:
      ATOLL_TRY(io.template str<uint16_t>("key", kMaxStoreKeyBytes, m.key));
      return io.num("wait_ms", m.wait_ms);
    case MsgType::kStoreReply:
    case MsgType::kRecord: return io.rest(m.bytes);
    case MsgType::kError:
      ATOLL_TRY(io.num("error code", m.error));
      return io.template str<uint16_t>("error text", kMaxErrorTextBytes, m.text);
    case MsgType::kHeartbeat:
    case MsgType::kLeave:
    case MsgType::kAck: break;  // empty
  }
  return Status::ok();
}

// Rules shared by encode (kInvalidArgument) and parse (kCorrupt).
std::string check_public_key(const std::string& key) {
  if (!key.empty() && key.size() != kPublicKeyBytes) {
    return "public key is " + std::to_string(key.size()) + " characters, not 0 or 40 (Z85)";
  }
  return "";
}
std::string check_membership(const Membership& m) {
  if (m.members.size() > kMaxMembers) return "more than " + std::to_string(kMaxMembers) + " members";
  int last = -1;
  for (const Peer& p : m.members) {
    if (p.id < 0 || p.id > kMaxIslandId) return "member id " + std::to_string(p.id) + " out of range";
    if (p.id <= last) return "member ids not strictly ascending";
    if (p.endpoint.size() > kMaxEndpointBytes) return "member endpoint too long";
    if (std::string e = check_public_key(p.public_key); !e.empty()) return "member " + e;
    last = p.id;
  }
  return "";
}
std::string check_record(std::span<const uint8_t> json) {
  if (json.size() > kMaxRecordBytes) return "record above " + std::to_string(kMaxRecordBytes) + " bytes";
  if (json.size() < 2 || json.front() != '{' || json.back() != '}') return "record is not one JSON object";
  for (uint8_t c : json) {
    if (c == '\n' || c == '\r' || c == 0) return "record contains a line break or NUL";
  }
  return "";
}

// The body rule that an encoder must respect, "" when fine.
std::string check_body(const Message& m) {
  const Header& h = m.header;
  if (h.island < 0 || h.island > kMaxIslandId) return "island id " + std::to_string(h.island) + " out of range";
  switch (h.type) {
    case MsgType::kJoin:
      if (m.endpoint.size() > kMaxEndpointBytes) return "endpoint too long";
      if (m.run.size() > kMaxRunBytes) return "run text above " + std::to_string(kMaxRunBytes) + " bytes";
      return check_public_key(m.public_key);
    case MsgType::kJoinAck:
    case MsgType::kMembership: return check_membership(m.membership);
    case MsgType::kSuspect:
      if (m.peer < 0 || m.peer > kMaxIslandId) return "suspected peer id out of range";
      return "";
    case MsgType::kPush:
      if (!std::isfinite(m.weight) || m.weight <= 0) return "push weight must be finite and > 0";
      return "";
    case MsgType::kStoreSet:
      if (m.bytes.size() > kMaxStoreValueBytes) return "store value too large";
      [[fallthrough]];
    case MsgType::kStoreGet:
      if (m.key.empty() || m.key.size() > kMaxStoreKeyBytes) return "store key empty or too long";
      return "";
    case MsgType::kStoreReply:
      if (m.bytes.size() > kMaxStoreValueBytes) return "store value too large";
      return "";
    case MsgType::kRecord: return check_record(m.bytes);
    case MsgType::kError:
      if (static_cast<uint8_t>(m.error) < 1 || static_cast<uint8_t>(m.error) > kMaxErrorCode) {
        return "unknown error code";
      }
      if (m.text.size() > kMaxErrorTextBytes) return "error text too long";
      return "";
    default: return "";
  }
}

}  // namespace

Status encode(const Message& m, std::vector<uint8_t>* out) {
  const uint8_t type = static_cast<uint8_t>(m.header.type);
  if (type < 1 || type > kMaxMsgType) return invalid_argument("encode: unknown message type");
  if (std::string e = check_body(m); !e.empty()) {
    return invalid_argument(std::string("encode ") + msg_type_name(m.header.type) + ": " + e);
  }
  const Header& h = m.header;
  const size_t start = out->size();
  out->insert(out->end(), kMagic, kMagic + 4);
  bytes::Writer<std::vector<uint8_t>> head(*out);
  head.u8(kVersion);
  head.u8(type);
  head.u16(0);
  head.i32(h.island);
  head.u32(0);  // body length: reseal() below
  head.u64(h.epoch);
  head.u64(h.request_id);
  head.u64(h.session);
  head.u64(0);  // checksum: reseal() below
  Writer w{head, out->size()};
  if (Status st = body(w, m); !st.is_ok()) {
    out->resize(start);
    return st;
  }
  reseal(out->data() + start, out->size() - start);  // body length and checksum
  return Status::ok();
}

std::vector<uint8_t> encode_or_throw(const Message& m) {
  std::vector<uint8_t> out;
  if (Status st = encode(m, &out); !st.is_ok()) throw std::invalid_argument(st.message());
  return out;
}

Status parse(const uint8_t* data, size_t size, Message* m) {
  if (data == nullptr || size < kHeaderBytes) {
    return corrupt("truncated message: " + std::to_string(size) + " bytes, the header alone is " +
                   std::to_string(kHeaderBytes));
  }
  if (std::memcmp(data, kMagic, 4) != 0) return corrupt("bad magic: not an atoll control message");
  if (data[4] != kVersion) {
    return corrupt("unsupported control protocol version " + std::to_string(data[4]) +
                   " (this build speaks " + std::to_string(kVersion) + ")");
  }
  const uint8_t type = data[5];
  if (type < 1 || type > kMaxMsgType) return corrupt("unknown message type " + std::to_string(type));
  bytes::Reader r(data + 6, kHeaderBytes - 6, "header");  // size checked above: every read fits
  if (const uint16_t flags = r.u16(); flags != 0) {
    return corrupt("unknown flags " + std::to_string(flags));
  }
  Message out;
  out.header.type = static_cast<MsgType>(type);
  out.header.island = r.i32();
  const uint32_t body_len = r.u32();
  out.header.epoch = r.u64();
  out.header.request_id = r.u64();
  out.header.session = r.u64();
  uint64_t want = r.u64();
  if (body_len > kMaxBodyBytes) return corrupt("body length " + std::to_string(body_len) + " above the bound");
  if (size - kHeaderBytes != body_len) {
    return corrupt(std::string(size - kHeaderBytes < body_len ? "truncated" : "trailing bytes in") +
                   " message: header declares a " + std::to_string(body_len) + "-byte body, " +
                   std::to_string(size - kHeaderBytes) + " bytes follow");
  }
  if (checksum(data, size) != want) return corrupt("checksum mismatch: the message was damaged");
  Reader br(data + kHeaderBytes, body_len);
  ATOLL_TRY(body(br, out));
  if (out.header.type == MsgType::kJoinAck || out.header.type == MsgType::kMembership) {
    out.membership.epoch = out.header.epoch;
  }
  if (br.left() != 0) return corrupt("trailing bytes: " + std::to_string(br.left()) + " after the body");
  if (std::string e = check_body(out); !e.empty()) return corrupt(e);
  *m = std::move(out);
  return Status::ok();
}

bool reseal(uint8_t* data, size_t size) {
  if (data == nullptr || size < kHeaderBytes || size - kHeaderBytes > kMaxBodyBytes) return false;
  const uint32_t body = static_cast<uint32_t>(size - kHeaderBytes);
  bytes::put_at(data, 12, body);
  bytes::put_at(data, kChecksumOffset, checksum(data, size));
  return true;
}

}  // namespace atl::transport::proto
