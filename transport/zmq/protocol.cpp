#include "transport/zmq/protocol.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "src/base/hash.h"

namespace atl::transport::proto {

static_assert(std::endian::native == std::endian::little,
              "the control protocol is little-endian; a big-endian host needs byte swaps here");
static_assert(sizeof(MsgType) == 1 && sizeof(ErrorCode) == 1, "wire ids are one byte");
static_assert(sizeof(double) == 8, "IEEE-754 binary64 weights");
// magic 4 + version 1 + type 1 + flags 2 + island 4 + body length 4 + epoch 8 + request id 8
// + session 8 = 40 bytes covered by the checksum, then the 8-byte checksum.
static_assert(4 + 1 + 1 + 2 + 4 + 4 + 8 + 8 + 8 == kChecksumOffset, "header v1 layout changed");
static_assert(kChecksumOffset + 8 == kHeaderBytes, "header v1 layout changed");
static_assert(kMaxBodyBytes <= 0xFFFFFFFFu, "body length is a u32");

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
  }
  return StatusCode::kInternal;
}

std::string describe(const Header& h) {
  return std::string(msg_type_name(h.type)) + " island " + std::to_string(h.island) + " epoch " +
         std::to_string(h.epoch) + " rid " + std::to_string(h.request_id);
}

namespace {

// ---- writing -----------------------------------------------------------------------------
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host (static_assert above)
  out.insert(out.end(), b, b + sizeof(T));
}
// A u16/u8-prefixed string (check_body bounds its length).
template <typename Len>
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<Len>(out, static_cast<Len>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

uint64_t checksum(const uint8_t* msg, size_t size) {
  return xxh64(msg, kChecksumOffset, msg + kHeaderBytes, size > kHeaderBytes ? size - kHeaderBytes : 0);
}

// ---- bounds-checked reading --------------------------------------------------------------
// Every read names its field, so an error says where the message went wrong.
class Reader {
 public:
  Reader(const uint8_t* p, size_t size) : p_(p), size_(size) {}
  size_t left() const { return size_ - pos_; }
  Status need(size_t n, const char* field) const {
    if (left() >= n) return Status::ok();
    return corrupt(std::string("truncated body: field '") + field + "' needs " + std::to_string(n) +
                   " bytes, " + std::to_string(left()) + " left");
  }
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(size_t n) {
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  std::span<const uint8_t> rest() {
    std::span<const uint8_t> s(p_ + pos_, size_ - pos_);
    pos_ = size_;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
};

#define ATOLL_TRY(expr) \
  if (Status st_ = (expr); !st_.is_ok()) return st_

// Reads a u16/u8-prefixed string of at most `max` bytes.
template <typename Len>
Status read_str(Reader& r, const char* field, size_t max, std::string* out) {
  ATOLL_TRY(r.need(sizeof(Len), field));
  const size_t n = r.get<Len>();
  if (n > max) {
    return corrupt(std::string("field '") + field + "' is " + std::to_string(n) +
                   " bytes, above the bound " + std::to_string(max));
  }
  ATOLL_TRY(r.need(n, field));
  *out = r.str(n);
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

void put_membership(std::vector<uint8_t>& out, const Membership& m) {
  put<uint32_t>(out, static_cast<uint32_t>(m.members.size()));
  for (const Peer& p : m.members) {
    put<int32_t>(out, p.id);
    put_str<uint16_t>(out, p.endpoint);
    put_str<uint8_t>(out, p.public_key);
  }
}

Status read_membership(Reader& r, Membership* m) {
  ATOLL_TRY(r.need(4, "member count"));
  const uint32_t count = r.get<uint32_t>();
  if (count > kMaxMembers) return corrupt("member count " + std::to_string(count) + " above the bound");
  // Each member takes at least 7 bytes: no reservation beyond what the body can hold.
  if (count > r.left() / 7) return corrupt("member count " + std::to_string(count) + " exceeds the body");
  m->members.assign(count, Peer{});
  for (Peer& p : m->members) {
    ATOLL_TRY(r.need(4, "member id"));
    p.id = r.get<int32_t>();
    ATOLL_TRY(read_str<uint16_t>(r, "member endpoint", kMaxEndpointBytes, &p.endpoint));
    ATOLL_TRY(read_str<uint8_t>(r, "member public key", kPublicKeyBytes, &p.public_key));
  }
  return Status::ok();
}

Status parse_body(Reader& r, Message* m) {
  switch (m->header.type) {
    case MsgType::kJoin:
      ATOLL_TRY(read_str<uint16_t>(r, "endpoint", kMaxEndpointBytes, &m->endpoint));
      ATOLL_TRY(read_str<uint8_t>(r, "public key", kPublicKeyBytes, &m->public_key));
      break;
    case MsgType::kJoinAck:
    case MsgType::kMembership:
      ATOLL_TRY(read_membership(r, &m->membership));
      m->membership.epoch = m->header.epoch;
      break;
    case MsgType::kHeartbeat:
    case MsgType::kLeave:
    case MsgType::kAck: break;
    case MsgType::kSuspect:
      ATOLL_TRY(r.need(4, "peer"));
      m->peer = r.get<int32_t>();
      break;
    case MsgType::kPush:
      ATOLL_TRY(r.need(16, "tag and weight"));
      m->tag = r.get<uint64_t>();
      m->weight = r.get<double>();
      m->bytes = r.rest();
      break;
    case MsgType::kPull:
      ATOLL_TRY(r.need(12, "tag and wait_ms"));
      m->tag = r.get<uint64_t>();
      m->wait_ms = r.get<uint32_t>();
      break;
    case MsgType::kPullReply:
      ATOLL_TRY(r.need(8, "tag"));
      m->tag = r.get<uint64_t>();
      m->bytes = r.rest();
      break;
    case MsgType::kStoreSet:
      ATOLL_TRY(read_str<uint16_t>(r, "key", kMaxStoreKeyBytes, &m->key));
      m->bytes = r.rest();
      break;
    case MsgType::kStoreGet:
      ATOLL_TRY(read_str<uint16_t>(r, "key", kMaxStoreKeyBytes, &m->key));
      ATOLL_TRY(r.need(4, "wait_ms"));
      m->wait_ms = r.get<uint32_t>();
      break;
    case MsgType::kStoreReply:
    case MsgType::kRecord: m->bytes = r.rest(); break;
    case MsgType::kError:
      ATOLL_TRY(r.need(1, "error code"));
      m->error = static_cast<ErrorCode>(r.get<uint8_t>());
      ATOLL_TRY(read_str<uint16_t>(r, "error text", kMaxErrorTextBytes, &m->text));
      break;
  }
  if (r.left() != 0) return corrupt("trailing bytes: " + std::to_string(r.left()) + " after the body");
  if (std::string e = check_body(*m); !e.empty()) return corrupt(e);
  return Status::ok();
}

}  // namespace

Status encode(const Message& m, std::vector<uint8_t>* out) {
  const uint8_t type = static_cast<uint8_t>(m.header.type);
  if (type < 1 || type > kMaxMsgType) return invalid_argument("encode: unknown message type");
  if (std::string e = check_body(m); !e.empty()) {
    return invalid_argument(std::string("encode ") + msg_type_name(m.header.type) + ": " + e);
  }
  std::vector<uint8_t> body;
  const Header& h = m.header;
  switch (h.type) {
    case MsgType::kJoin:
      put_str<uint16_t>(body, m.endpoint);
      put_str<uint8_t>(body, m.public_key);
      break;
    case MsgType::kJoinAck:
    case MsgType::kMembership: put_membership(body, m.membership); break;
    case MsgType::kHeartbeat:
    case MsgType::kLeave:
    case MsgType::kAck: break;
    case MsgType::kSuspect: put<int32_t>(body, m.peer); break;
    case MsgType::kPush:
      put<uint64_t>(body, m.tag);
      put<double>(body, m.weight);
      break;
    case MsgType::kPull:
      put<uint64_t>(body, m.tag);
      put<uint32_t>(body, m.wait_ms);
      break;
    case MsgType::kPullReply: put<uint64_t>(body, m.tag); break;
    case MsgType::kStoreSet: put_str<uint16_t>(body, m.key); break;
    case MsgType::kStoreGet:
      put_str<uint16_t>(body, m.key);
      put<uint32_t>(body, m.wait_ms);
      break;
    case MsgType::kStoreReply:
    case MsgType::kRecord: break;
    case MsgType::kError:
      put<uint8_t>(body, static_cast<uint8_t>(m.error));
      put_str<uint16_t>(body, m.text);
      break;
  }
  // Types whose body ends with raw bytes: PUSH, PULL_REPLY, STORE_SET, STORE_REPLY, RECORD.
  const bool trailing_bytes = h.type == MsgType::kPush || h.type == MsgType::kPullReply ||
                              h.type == MsgType::kStoreSet || h.type == MsgType::kStoreReply ||
                              h.type == MsgType::kRecord;
  const size_t body_size = body.size() + (trailing_bytes ? m.bytes.size() : 0);
  if (body_size > kMaxBodyBytes) return invalid_argument("encode: body above kMaxBodyBytes");

  const size_t start = out->size();
  out->reserve(start + kHeaderBytes + body_size);
  out->insert(out->end(), kMagic, kMagic + 4);
  put<uint8_t>(*out, kVersion);
  put<uint8_t>(*out, type);
  put<uint16_t>(*out, 0);
  put<int32_t>(*out, h.island);
  put<uint32_t>(*out, static_cast<uint32_t>(body_size));
  put<uint64_t>(*out, h.epoch);
  put<uint64_t>(*out, h.request_id);
  put<uint64_t>(*out, h.session);
  put<uint64_t>(*out, 0);  // checksum, below
  out->insert(out->end(), body.begin(), body.end());
  if (trailing_bytes) out->insert(out->end(), m.bytes.begin(), m.bytes.end());
  const uint64_t sum = checksum(out->data() + start, out->size() - start);
  std::memcpy(out->data() + start + kChecksumOffset, &sum, 8);
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
  Reader r(data, size);
  r.str(6);
  if (const uint16_t flags = r.get<uint16_t>(); flags != 0) {
    return corrupt("unknown flags " + std::to_string(flags));
  }
  Message out;
  out.header.type = static_cast<MsgType>(type);
  out.header.island = r.get<int32_t>();
  const uint32_t body = r.get<uint32_t>();
  out.header.epoch = r.get<uint64_t>();
  out.header.request_id = r.get<uint64_t>();
  out.header.session = r.get<uint64_t>();
  uint64_t want = r.get<uint64_t>();
  if (body > kMaxBodyBytes) return corrupt("body length " + std::to_string(body) + " above the bound");
  if (size - kHeaderBytes != body) {
    return corrupt(std::string(size - kHeaderBytes < body ? "truncated" : "trailing bytes in") +
                   " message: header declares a " + std::to_string(body) + "-byte body, " +
                   std::to_string(size - kHeaderBytes) + " bytes follow");
  }
  if (checksum(data, size) != want) return corrupt("checksum mismatch: the message was damaged");
  Reader br(data + kHeaderBytes, body);
  ATOLL_TRY(parse_body(br, &out));
  *m = std::move(out);
  return Status::ok();
}

bool reseal(uint8_t* data, size_t size) {
  if (data == nullptr || size < kHeaderBytes || size - kHeaderBytes > kMaxBodyBytes) return false;
  const uint32_t body = static_cast<uint32_t>(size - kHeaderBytes);
  std::memcpy(data + 12, &body, 4);
  const uint64_t sum = checksum(data, size);
  std::memcpy(data + kChecksumOffset, &sum, 8);
  return true;
}

}  // namespace atl::transport::proto
