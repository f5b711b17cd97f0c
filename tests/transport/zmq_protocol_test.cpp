// The control protocol's encoder and parser: round trips of every type, the golden header
// layout, and that truncated, bit-flipped, hostile and random input is rejected cleanly.
#include <gtest/gtest.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <cmath>
#include <cstring>
#include <random>

#include "transport/zmq/protocol.h"

namespace atl::transport::proto {
namespace {

std::vector<int> ids_of(const Membership& m) {
  std::vector<int> out;
  for (const Peer& p : m.members) out.push_back(p.id);
  return out;
}

std::vector<uint8_t> frame_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + 1);
  return v;
}

// One representative message per type; `bytes` and `json` must outlive the messages.
std::vector<Message> samples(const std::vector<uint8_t>& bytes, const std::string& json) {
  std::vector<Message> out;
  auto add = [&](MsgType t) -> Message& {
    out.emplace_back();
    out.back().header = Header{t, 3, 17, 42, 0xDEADBEEFCAFEull};
    return out.back();
  };
  Membership m;
  m.epoch = 17;
  m.members = {{0, "tcp://10.0.0.1:29510", ""}, {3, "tcp://[::1]:29513", std::string(40, 'a')}};
  Message& join = add(MsgType::kJoin);
  join.endpoint = "tcp://10.0.0.3:29513";
  join.public_key = std::string(40, 'k');
  join.run = "algorithm.name: diloco\nrun.name: r\n";
  add(MsgType::kJoinAck).membership = m;
  add(MsgType::kHeartbeat);
  add(MsgType::kLeave);
  add(MsgType::kMembership).membership = m;
  add(MsgType::kSuspect).peer = 7;
  Message& push = add(MsgType::kPush);
  push.tag = 99;
  push.weight = 0.25;
  push.bytes = bytes;
  Message& pull = add(MsgType::kPull);
  pull.tag = 99;
  pull.wait_ms = kWaitForever;
  Message& reply = add(MsgType::kPullReply);
  reply.tag = 99;
  reply.bytes = bytes;
  Message& set = add(MsgType::kStoreSet);
  set.key = "gloo/epoch3/rank0";
  set.bytes = bytes;
  Message& get = add(MsgType::kStoreGet);
  get.key = "gloo/epoch3/rank0";
  get.wait_ms = 1500;
  add(MsgType::kStoreReply).bytes = bytes;
  add(MsgType::kRecord).bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(json.data()), json.size());
  Message& err = add(MsgType::kError);
  err.error = ErrorCode::kTimeout;
  err.text = "store key 'x' not set";
  add(MsgType::kAck);
  return out;
}

TEST(ZmqProtocol, EveryTypeRoundTrips) {
  const std::vector<uint8_t> bytes = frame_bytes(300);
  const std::string json = R"({"step":1,"loss":2.5})";
  const std::vector<Message> all = samples(bytes, json);
  ASSERT_EQ(all.size(), size_t{kMaxMsgType});
  for (const Message& m : all) {
    SCOPED_TRACE(msg_type_name(m.header.type));
    std::vector<uint8_t> wire;
    ASSERT_TRUE(encode(m, &wire).is_ok());
    Message back;
    Status st = parse(wire.data(), wire.size(), &back);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(back.header.type, m.header.type);
    EXPECT_EQ(back.header.island, 3);
    EXPECT_EQ(back.header.epoch, 17u);
    EXPECT_EQ(back.header.request_id, 42u);
    EXPECT_EQ(back.header.session, 0xDEADBEEFCAFEull);
    EXPECT_EQ(back.endpoint, m.endpoint);
    EXPECT_EQ(back.public_key, m.public_key);
    EXPECT_EQ(back.run, m.run);
    EXPECT_EQ(back.peer, m.peer);
    EXPECT_EQ(back.tag, m.tag);
    EXPECT_EQ(back.weight, m.weight);
    EXPECT_EQ(back.wait_ms, m.wait_ms);
    EXPECT_EQ(back.key, m.key);
    EXPECT_EQ(std::vector<uint8_t>(back.bytes.begin(), back.bytes.end()),
              std::vector<uint8_t>(m.bytes.begin(), m.bytes.end()));
    EXPECT_EQ(back.text, m.text);
    EXPECT_EQ(ids_of(back.membership), ids_of(m.membership));
    if (!m.membership.members.empty()) {
      EXPECT_EQ(back.membership.epoch, 17u);
      EXPECT_EQ(back.membership.members[1].endpoint, "tcp://[::1]:29513");
      EXPECT_EQ(back.membership.members[1].public_key, std::string(40, 'a'));
    }
  }
}

TEST(ZmqProtocol, GoldenHeaderLayout) {
  Message m;
  m.header = Header{MsgType::kStoreGet, 0x00010203, 0x1112131415161718ull, 0x2122232425262728ull,
                    0x3132333435363738ull};
  m.key = "ab";
  m.wait_ms = 0x41424344;
  const std::vector<uint8_t> w = encode_or_throw(m);
  const std::vector<uint8_t> want_head = {
      'A', 'T', 'L', 'C', 3, 11, 0, 0,                // magic, version, type STORE_GET, flags
      0x03, 0x02, 0x01, 0x00, 8, 0, 0, 0,             // island, body length
      0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,  // epoch
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // request id
      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31};  // session
  ASSERT_EQ(w.size(), kHeaderBytes + 8);
  EXPECT_EQ(std::vector<uint8_t>(w.begin(), w.begin() + 40), want_head);
  const std::vector<uint8_t> want_body = {2, 0, 'a', 'b', 0x44, 0x43, 0x42, 0x41};
  EXPECT_EQ(std::vector<uint8_t>(w.begin() + 48, w.end()), want_body);
  XXH64_state_t s;
  XXH64_reset(&s, 0);
  XXH64_update(&s, w.data(), 40);
  XXH64_update(&s, w.data() + 48, 8);
  uint64_t sum;
  std::memcpy(&sum, w.data() + 40, 8);
  EXPECT_EQ(sum, XXH64_digest(&s));
}

TEST(ZmqProtocol, EveryTruncationAndExtensionIsRejected) {
  const std::vector<uint8_t> bytes = frame_bytes(64);
  const std::string json = "{}";
  for (const Message& m : samples(bytes, json)) {
    const std::vector<uint8_t> w = encode_or_throw(m);
    for (size_t n = 0; n < w.size(); ++n) {
      Message out;
      EXPECT_EQ(parse(w.data(), n, &out).code(), StatusCode::kCorrupt) << msg_type_name(m.header.type) << " " << n;
    }
    std::vector<uint8_t> longer = w;
    longer.push_back(0);
    Message out;
    EXPECT_EQ(parse(longer.data(), longer.size(), &out).code(), StatusCode::kCorrupt);
  }
}

TEST(ZmqProtocol, EveryBitFlipIsRejected) {
  const std::vector<uint8_t> bytes = frame_bytes(16);
  const std::string json = R"({"a":1})";
  for (const Message& m : samples(bytes, json)) {
    std::vector<uint8_t> w = encode_or_throw(m);
    for (size_t bit = 0; bit < w.size() * 8; ++bit) {
      w[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
      Message out;
      EXPECT_FALSE(parse(w.data(), w.size(), &out).is_ok()) << msg_type_name(m.header.type) << " bit " << bit;
      w[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    }
  }
}

// A valid message whose body is replaced by `body`, with a correct checksum.
std::vector<uint8_t> with_body(MsgType type, const std::vector<uint8_t>& body) {
  Message m;
  m.header.type = MsgType::kAck;
  std::vector<uint8_t> w = encode_or_throw(m);
  w[5] = static_cast<uint8_t>(type);
  w.insert(w.end(), body.begin(), body.end());
  EXPECT_TRUE(reseal(w.data(), w.size()));
  return w;
}

TEST(ZmqProtocol, HostileFieldsAreBoundedAndNamed) {
  auto rejected = [](const std::vector<uint8_t>& w, const std::string& needle) {
    Message out;
    Status st = parse(w.data(), w.size(), &out);
    EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
  };
  rejected(with_body(MsgType::kMembership, {0xFF, 0xFF, 0xFF, 0xFF}), "member count");
  rejected(with_body(MsgType::kMembership, {2, 0, 0, 0, 0, 0, 0, 0}), "member count");
  rejected(with_body(MsgType::kJoin, {0xFF, 0xFF}), "endpoint");
  rejected(with_body(MsgType::kJoin, {1, 0, 'x', 5, 'k', 'k', 'k', 'k', 'k', 0, 0, 0, 0}), "public key");
  rejected(with_body(MsgType::kJoin, {1, 0, 'x', 0}), "run");  // version 1's JOIN: no run text
  rejected(with_body(MsgType::kJoin, {1, 0, 'x', 0, 0xFF, 0xFF, 0xFF, 0xFF}), "run");
  rejected(with_body(MsgType::kJoin, {1, 0, 'x', 0, 2, 0, 0, 0, 'r'}), "run");
  rejected(with_body(MsgType::kStoreGet, {0xFF, 0x7F}), "key");
  rejected(with_body(MsgType::kStoreGet, {0, 0, 1, 0, 0, 0}), "store key");
  rejected(with_body(MsgType::kError, {99, 0, 0}), "error code");
  rejected(with_body(MsgType::kError, {10, 0, 0}), "error code");  // one past run_ended
  rejected(with_body(MsgType::kRecord, {'{', '\n', '}'}), "line break");
  rejected(with_body(MsgType::kRecord, {'[', ']'}), "JSON object");
  rejected(with_body(MsgType::kHeartbeat, {1}), "trailing");
  rejected(with_body(MsgType::kSuspect, {0xFF, 0xFF, 0xFF, 0xFF}), "peer");
  std::vector<uint8_t> push_body(16, 0);
  const double nan = std::nan("");
  std::memcpy(push_body.data() + 8, &nan, 8);
  rejected(with_body(MsgType::kPush, push_body), "weight");
  // Two members out of order.
  rejected(with_body(MsgType::kMembership, {2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0}), "ascending");

  std::vector<uint8_t> w = with_body(MsgType::kAck, {});
  w[4] = 1;  // before JOIN carried the run text
  rejected(w, "version");
  w[4] = 2;  // before ERROR run_ended
  rejected(w, "version");
  w[4] = 4;
  rejected(w, "version");
  w = with_body(MsgType::kAck, {});
  w[0] = 'X';
  rejected(w, "magic");
  for (uint8_t t : {0, 16, 255}) {
    w = with_body(MsgType::kAck, {});
    w[5] = t;
    rejected(w, "unknown message type");
  }
  w = with_body(MsgType::kAck, {});
  w[6] = 1;
  rejected(w, "flags");
  w = with_body(MsgType::kAck, {});
  const int32_t bad_island = -1;
  std::memcpy(w.data() + 8, &bad_island, 4);
  reseal(w.data(), w.size());
  rejected(w, "island");
  w = with_body(MsgType::kAck, {});
  const uint32_t huge = 0xFFFFFFF0u;
  std::memcpy(w.data() + 12, &huge, 4);
  rejected(w, "body length");
}

TEST(ZmqProtocol, EncodeRefusesWhatParseWouldReject) {
  Message m;
  m.header.type = MsgType::kStoreSet;
  std::vector<uint8_t> out;
  EXPECT_EQ(encode(m, &out).code(), StatusCode::kInvalidArgument);  // empty key
  m.key = std::string(kMaxStoreKeyBytes + 1, 'k');
  EXPECT_EQ(encode(m, &out).code(), StatusCode::kInvalidArgument);
  m = Message{};
  m.header.type = MsgType::kPush;
  m.weight = 0;
  EXPECT_EQ(encode(m, &out).code(), StatusCode::kInvalidArgument);
  m = Message{};
  m.header.type = MsgType::kRecord;
  const std::string two_lines = "{\"a\":1}\n{\"b\":2}";
  m.bytes = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(two_lines.data()), two_lines.size());
  EXPECT_EQ(encode(m, &out).code(), StatusCode::kInvalidArgument);
  m = Message{};
  m.header.type = MsgType::kJoin;
  m.run = std::string(kMaxRunBytes + 1, 'r');
  EXPECT_EQ(encode(m, &out).code(), StatusCode::kInvalidArgument);
  m.run.pop_back();  // at the bound: fine
  std::vector<uint8_t> join;
  EXPECT_TRUE(encode(m, &join).is_ok());
  m = Message{};
  m.header.island = -5;
  EXPECT_EQ(encode(m, &out).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(out.empty());
  EXPECT_THROW(encode_or_throw(m), std::invalid_argument);
}

TEST(ZmqProtocol, RandomAndMutatedInputNeverCrashes) {
  std::mt19937_64 rng(7);
  const std::vector<uint8_t> bytes = frame_bytes(40);
  const std::string json = R"({"k":[1,2]})";
  const std::vector<Message> all = samples(bytes, json);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint8_t> w;
    if (i % 2 == 0) {  // random bytes, half of them with a valid magic and version
      w.resize(rng() % 160);
      for (auto& b : w) b = static_cast<uint8_t>(rng());
      if (i % 4 == 0 && w.size() >= 6) {
        std::memcpy(w.data(), kMagic, 4);
        w[4] = kVersion;
        w[5] = static_cast<uint8_t>(1 + rng() % kMaxMsgType);
        reseal(w.data(), w.size());
      }
    } else {  // a valid message with a few body bytes changed, resealed
      w = encode_or_throw(all[rng() % all.size()]);
      for (int k = 0; k < 3 && w.size() > kHeaderBytes; ++k) {
        w[kHeaderBytes + rng() % (w.size() - kHeaderBytes)] = static_cast<uint8_t>(rng());
      }
      reseal(w.data(), w.size());
    }
    Message out;
    Status st = parse(w.data(), w.size(), &out);
    if (st.is_ok()) {
      ++accepted;
      std::vector<uint8_t> again;  // whatever parses must also be encodable
      EXPECT_TRUE(encode(out, &again).is_ok());
    } else {
      EXPECT_EQ(st.code(), StatusCode::kCorrupt);
    }
  }
  EXPECT_GT(accepted, 0);  // the mutations reached past the checksum
}

}  // namespace
}  // namespace atl::transport::proto
