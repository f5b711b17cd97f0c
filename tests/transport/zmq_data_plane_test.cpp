// The data plane's parts in isolation: the wire header (layout, every truncation and bit
// flip rejected), a link's credits and retransmission against a raw socket, and the
// all-reduce state machine's hand-over of a finished result to a peer that restarted it.
#include <gtest/gtest.h>
#include <zmq.hpp>

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>

#include "src/base/hash.h"
#include "src/base/bytes.h"
#include "transport/inproc/inproc_group.h"
#include "transport/zmq/allreduce_op.h"
#include "transport/zmq/data_wire.h"
#include "transport/zmq/peer_links.h"
#include "transport/zmq/zmq_wire.h"

namespace atl::transport::dataplane {
namespace {

TEST(DataWire, HeaderRoundTripsAndRejectsDamage) {
  Header h;
  h.type = MsgType::kRing;
  h.flags = 0;
  h.sender = 3;
  h.step = 5;
  h.epoch = 7;
  h.seq = 11;
  h.link_seq = 13;
  h.done_below = 10;
  h.chunk = 2;
  h.piece = 1;
  h.pieces = 4;
  h.offset = 100;
  h.total = 400;
  h.group = 0x01020304;
  const uint8_t payload[6] = {1, 2, 3, 4, 5, 6};
  h.payload_len = sizeof payload;
  uint8_t b[kHeaderBytes];
  encode_header(h, payload, b);
  EXPECT_EQ(std::memcmp(b, "ATLD", 4), 0);
  EXPECT_EQ(b[4], 5);  // data wire version 5 (docs/data_plane.md)
  EXPECT_EQ(b[5], 3);
  Header p;
  ASSERT_TRUE(parse_header(b, kHeaderBytes, payload, sizeof payload, &p).is_ok());
  EXPECT_EQ(p.sender, 3);
  EXPECT_EQ(p.step, 5u);
  EXPECT_EQ(p.epoch, 7u);
  EXPECT_EQ(p.seq, 11u);
  EXPECT_EQ(p.link_seq, 13u);
  EXPECT_EQ(p.done_below, 10u);
  EXPECT_EQ(p.chunk, 2u);
  EXPECT_EQ(p.piece, 1u);
  EXPECT_EQ(p.pieces, 4u);
  EXPECT_EQ(p.offset, 100u);
  EXPECT_EQ(p.total, 400u);
  EXPECT_EQ(p.group, 0x01020304u);
  for (size_t n = 0; n < kHeaderBytes; ++n) EXPECT_FALSE(parse_header(b, n, payload, sizeof payload, &p).is_ok());
  EXPECT_FALSE(parse_header(b, kHeaderBytes, payload, 5, &p).is_ok());  // truncated payload
  for (size_t bit = 0; bit < (kHeaderBytes + sizeof payload) * 8; ++bit) {
    uint8_t hb[kHeaderBytes], pb[sizeof payload];
    std::memcpy(hb, b, sizeof hb);
    std::memcpy(pb, payload, sizeof pb);
    uint8_t* at = bit < kHeaderBytes * 8 ? &hb[bit / 8] : &pb[bit / 8 - kHeaderBytes];
    *at ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_FALSE(parse_header(hb, kHeaderBytes, pb, sizeof pb, &p).is_ok()) << "bit " << bit;
  }
  collectives::Hello hello{1, 1000, 0.5, 42, 256};
  collectives::Hello back;
  std::vector<uint8_t> hb = collectives::encode_hello(hello);
  ASSERT_TRUE(collectives::parse_hello(hb.data(), hb.size(), &back).is_ok());
  EXPECT_EQ(back.numel, 1000u);
  EXPECT_EQ(back.weight, 0.5);
  hello.weight = -1;
  hb = collectives::encode_hello(hello);
  EXPECT_FALSE(collectives::parse_hello(hb.data(), hb.size(), &back).is_ok());
  collectives::ResultInfo info{StatusCode::kPeerLost, 2.0, 9, {0, 2}};
  std::vector<uint8_t> ib = collectives::encode_result_info(info);
  collectives::ResultInfo info_back;
  ASSERT_TRUE(collectives::parse_result_info(ib.data(), ib.size(), &info_back).is_ok());
  EXPECT_EQ(info_back.contributors, (std::vector<int>{0, 2}));
  EXPECT_EQ(info_back.status, StatusCode::kPeerLost);
  EXPECT_FALSE(collectives::parse_result_info(ib.data(), ib.size() - 1, &info_back).is_ok());
}

// Every field at its documented offset (data_wire.h's layout), little-endian, and the checksum
// over header[0, 84) seeded with the payload's hash: a round trip alone would not notice two
// fields swapped the same way in encode and parse.
TEST(DataWire, HeaderFieldsSitAtTheirDocumentedOffsets) {
  Header h;
  h.type = MsgType::kDirect;
  h.flags = kFlagSplit;
  h.sender = 0x0f0102;
  h.step = 0x11121314;
  h.epoch = 0x2122232425262728;
  h.seq = 0x3132333435363738;
  h.link_seq = 0x4142434445464748;
  h.done_below = 0x5152535455565758;
  h.chunk = 0x61626364;
  h.piece = 0x71727374;
  h.pieces = 0x81828384;
  h.offset = 0x9192939495969798;
  h.total = 0xa1a2a3a4a5a6a7a8;
  h.group = 0xb1b2b3b4;
  const uint8_t payload[6] = {1, 2, 3, 4, 5, 6};
  h.payload_len = sizeof payload;
  uint8_t b[kHeaderBytes];
  encode_header(h, payload, b);
  const uint8_t want[kChecksumOffset] = {
      'A',  'T',  'L',  'D',  5,    4,    1,    0,     // magic, version, type, flags, reserved
      0x02, 0x01, 0x0f, 0x00, 0x14, 0x13, 0x12, 0x11,  // sender @8, step @12
      0x28, 0x27, 0x26, 0x25, 0x24, 0x23, 0x22, 0x21,  // epoch @16
      0x38, 0x37, 0x36, 0x35, 0x34, 0x33, 0x32, 0x31,  // seq @24
      0x48, 0x47, 0x46, 0x45, 0x44, 0x43, 0x42, 0x41,  // link_seq @32
      0x58, 0x57, 0x56, 0x55, 0x54, 0x53, 0x52, 0x51,  // done_below @40
      0x64, 0x63, 0x62, 0x61, 0x74, 0x73, 0x72, 0x71,  // chunk @48, piece @52
      0x84, 0x83, 0x82, 0x81, 0x06, 0x00, 0x00, 0x00,  // pieces @56, payload_len @60
      0x98, 0x97, 0x96, 0x95, 0x94, 0x93, 0x92, 0x91,  // offset @64
      0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3, 0xa2, 0xa1,  // total @72
      0xb4, 0xb3, 0xb2, 0xb1,                          // group @80
  };
  for (size_t i = 0; i < kChecksumOffset; ++i) EXPECT_EQ(b[i], want[i]) << "byte " << i;
  EXPECT_EQ(bytes::get_at<uint64_t>(b, kChecksumOffset), xxh3_64(b, kChecksumOffset, xxh3_64(payload, sizeof payload)));
  Header p;
  ASSERT_TRUE(parse_header(b, kHeaderBytes, payload, sizeof payload, &p).is_ok());
  EXPECT_EQ(p.type, MsgType::kDirect);
  EXPECT_EQ(p.flags, kFlagSplit);
  EXPECT_EQ(p.sender, 0x0f0102);
  EXPECT_EQ(p.step, 0x11121314u);
  EXPECT_EQ(p.epoch, 0x2122232425262728u);
  EXPECT_EQ(p.seq, 0x3132333435363738u);
  EXPECT_EQ(p.link_seq, 0x4142434445464748u);
  EXPECT_EQ(p.done_below, 0x5152535455565758u);
  EXPECT_EQ(p.chunk, 0x61626364u);
  EXPECT_EQ(p.piece, 0x71727374u);
  EXPECT_EQ(p.pieces, 0x81828384u);
  EXPECT_EQ(p.payload_len, sizeof payload);
  EXPECT_EQ(p.offset, 0x9192939495969798u);
  EXPECT_EQ(p.total, 0xa1a2a3a4a5a6a7a8u);
  EXPECT_EQ(p.group, 0xb1b2b3b4u);
}

// kRaw (version 2): raw fp32 pieces on RING / BROADCAST / RESULT only, a whole number of
// values, never together with kSplit.
TEST(DataWire, RawFlagRules) {
  const uint8_t payload[8] = {0, 0, 128, 63, 0, 0, 0, 64};  // 1.0f, 2.0f
  auto parses = [&](MsgType type, uint8_t flags, uint32_t len) {
    Header h;
    h.type = type;
    h.flags = flags;
    h.sender = 1;
    h.pieces = 1;
    h.total = 8;
    h.payload_len = len;
    uint8_t b[kHeaderBytes];
    encode_header(h, payload, b);
    Header p;
    return parse_header(b, kHeaderBytes, payload, len, &p).is_ok();
  };
  EXPECT_TRUE(parses(MsgType::kRing, kFlagRaw, 8));
  EXPECT_TRUE(parses(MsgType::kBroadcast, kFlagRaw, 8));
  EXPECT_TRUE(parses(MsgType::kResult, kFlagRaw, 8));
  EXPECT_FALSE(parses(MsgType::kDirect, kFlagRaw, 8));
  EXPECT_FALSE(parses(MsgType::kRing, kFlagRaw, 6));
  EXPECT_FALSE(parses(MsgType::kRing, kFlagRaw | kFlagSplit, 8));
  EXPECT_FALSE(parses(MsgType::kRing, 4, 8));  // a reserved bit
}

Outbound ring_message(int i) {
  Header h;
  h.type = MsgType::kRing;
  h.sender = 0;
  h.pieces = 1;
  auto bytes = std::make_shared<const Bytes>(Bytes(100, static_cast<uint8_t>(i)));
  return Outbound{h, bytes, 0, bytes->size(), 400};
}

// Receives every message waiting on `router` within `ms`; returns their link_seqs.
std::vector<uint64_t> drain(zmq::socket_t& router, PeerLinks& links, int ms, zmq::message_t* rid) {
  std::vector<uint64_t> seqs;
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    links.poll(std::chrono::milliseconds(5), -1, [](Inbound&) {});
    links.check_timers(Clock::now());
    zmq::message_t id, head, body;
    while (router.recv(id, zmq::recv_flags::dontwait)) {
      (void)router.recv(head);
      (void)router.recv(body);
      Header h;
      EXPECT_TRUE(parse_header(head.data<uint8_t>(), head.size(), body.data<uint8_t>(), body.size(), &h).is_ok());
      seqs.push_back(h.link_seq);
      rid->copy(id);
    }
  }
  return seqs;
}

void ack(zmq::socket_t& router, const zmq::message_t& rid, uint64_t link_seq) {
  Header h;
  h.type = MsgType::kAck;
  h.sender = 1;
  h.link_seq = link_seq;
  uint8_t b[kHeaderBytes];
  encode_header(h, nullptr, b);
  zmq::message_t id;
  id.copy(const_cast<zmq::message_t&>(rid));
  router.send(id, zmq::send_flags::sndmore);
  router.send(zmq::buffer(b, sizeof b));
}

TEST(PeerLinks, AtMostMaxInFlightUnacknowledgedAndGoBackNRetransmission) {
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  DropLog drops;
  ZmqGroupOptions o;
  o.max_in_flight = 3;
  o.latency_ms = 0;
  o.timeout_slack = 0;  // retransmission after 1 s
  PeerLinks links(ctx, 0, "tcp://127.0.0.1:*", o, [] { return 1e9; }, drops);
  links.set_peers({{1, router.get(zmq::sockopt::last_endpoint), ""}});
  for (int i = 0; i < 10; ++i) links.send(1, ring_message(i));
  // raw_sent counts a message when it is handed over, not when its credit lets it out: a
  // checkpoint cut after a collective completed must count its unacknowledged last messages.
  EXPECT_EQ(links.counters().raw_sent, 10u * 400);
  zmq::message_t rid;
  EXPECT_EQ(drain(router, links, 300, &rid), (std::vector<uint64_t>{1, 2, 3}));  // credits: 3
  ack(router, rid, 2);
  EXPECT_EQ(drain(router, links, 300, &rid), (std::vector<uint64_t>{4, 5}));
  EXPECT_FALSE(links.idle());
  // No more acks: after the timeout the whole window (3, 4, 5) is sent again.
  EXPECT_EQ(drain(router, links, 1500, &rid), (std::vector<uint64_t>{3, 4, 5}));
  for (int k = 0; k < 10 && !links.idle(); ++k) {  // 6..10 go out as credits return
    ack(router, rid, 10);
    drain(router, links, 100, &rid);
  }
  EXPECT_TRUE(links.idle());
  EXPECT_EQ(links.counters().raw_sent, 10u * 400);
}

// A fake I/O thread: collects what an op sends.
class FakeContext final : public OpContext {
 public:
  explicit FakeContext(int self) : self_(self) {}
  int self() const override { return self_; }
  const ZmqGroupOptions& options() const override { return options_; }
  void send(int peer, Outbound msg) override { out.push_back({peer, std::move(msg)}); }
  void suspect(int) override {}
  void refresh_membership() override {}
  double bandwidth() const override { return 1e9; }
  void observe_throughput(double, double) override {}
  DropLog& drops() override { return drops_; }
  std::deque<std::pair<int, Outbound>> out;

 private:
  int self_;
  ZmqGroupOptions options_;
  DropLog drops_;
};

// The message as PeerLinks::receive_router hands it over: with the hash of the payload it
// received (which parse_header verified against the header's checksum).
Inbound to_inbound(const Outbound& o) {
  Inbound m{o.header, o.length ? zmq::message_t(o.payload(), o.length) : zmq::message_t()};
  m.header.payload_len = static_cast<uint32_t>(o.length);
  m.payload_hash = checksum_payload(m.data(), m.size());
  return m;
}

// Delivers everything `from` has sent so far to `to` (whose context is `cto`).
void deliver_all(FakeContext& from, AllreduceOp& to, FakeContext& cto) {
  while (!from.out.empty()) {
    Inbound m = to_inbound(from.out.front().second);
    from.out.pop_front();
    to.on_message(cto, m);
  }
}

// Delivers what ops `a` (island 0) and `b` (island 1) send each other until neither sends
// more, except 0's messages that `withhold` picks, which are returned undelivered.
std::vector<Outbound> exchange_until_quiet(AllreduceOp& a, FakeContext& ca, AllreduceOp& b, FakeContext& cb,
                                           const std::function<bool(const Header&)>& withhold) {
  std::vector<Outbound> withheld;
  for (bool moved = true; moved;) {
    moved = false;
    while (!ca.out.empty()) {
      Outbound o = std::move(ca.out.front().second);
      ca.out.pop_front();
      if (withhold(o.header)) {
        withheld.push_back(std::move(o));
        continue;
      }
      Inbound m = to_inbound(o);
      b.on_message(cb, m);
      moved = true;
    }
    moved = moved || !cb.out.empty();
    deliver_all(cb, a, ca);
  }
  return withheld;
}

// W = 2 ring: island 0 finishes, island 1 misses 0's last piece and restarts in epoch 1;
// island 0 answers the new HELLO with its result, which island 1 takes over bitwise. The
// chunks are large enough that island 0 keeps its all-gather piece as it arrived (not in
// its result tensor): the hand-over must place it first.
TEST(AllreduceOp, RestartedPeerTakesOverTheFinishedResult) {
  const compression::Pipeline fp32;
  at::manual_seed(3);
  std::vector<at::Tensor> in = {at::randn({5001}), at::randn({5001})};
  std::vector<at::Tensor> buf = {in[0].clone(), in[1].clone()};
  std::vector<std::shared_ptr<Completion>> done = {std::make_shared<Completion>(), std::make_shared<Completion>()};
  AllreduceOp a(0, buf[0], in[0].clone(), fp32, 1.0, {}, 1 << 20, done[0]);
  AllreduceOp b(0, buf[1], in[1].clone(), fp32, 1.0, {}, 1 << 20, done[1]);
  FakeContext ca(0), cb(1);
  a.start(ca, 0, {0, 1});
  b.start(cb, 0, {0, 1});
  // 0's all-gather piece to 1 (the last ring step)
  std::vector<Outbound> withheld = exchange_until_quiet(a, ca, b, cb, [](const Header& h) {
    return h.type == MsgType::kRing && h.step == 1;
  });
  ASSERT_TRUE(a.done());
  ASSERT_FALSE(b.done());
  ASSERT_EQ(withheld.size(), 1u);
  std::unique_ptr<Retained> kept = a.take_retained();
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->pieces.size(), 1u);  // island 0's all-gather piece, kept as it arrived

  b.on_membership(cb, 1, {0, 1});  // island 1 restarts: HELLO in epoch 1
  ASSERT_EQ(cb.out.size(), 1u);
  EXPECT_EQ(cb.out.front().second.header.type, MsgType::kHello);
  EXPECT_EQ(cb.out.front().second.header.epoch, 1u);
  serve_result(ca, 0, 1, *kept, 1);  // what ZmqGroup does with a HELLO for a finished seq
  Inbound stale = to_inbound(withheld[0]);
  b.on_message(cb, stale);  // the old epoch's piece: dropped
  EXPECT_FALSE(b.done());
  deliver_all(ca, b, cb);
  ASSERT_TRUE(b.done());
  CollectiveResult r = done[1]->wait(std::nullopt);
  EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
  EXPECT_TRUE(at::equal(buf[1], buf[0]));
  EXPECT_TRUE(at::allclose(buf[1], (in[0] + in[1]) / 2));
  EXPECT_TRUE(kept->pieces.empty());
  EXPECT_TRUE(at::equal(kept->kept.values, buf[0]));  // what was handed over, whole
}

// Three islands' all-reduces on fake I/O threads, with every piece they send logged as a
// link keeps it until it is acknowledged.
struct ThreeIslands {
  explicit ThreeIslands(int64_t n, uint64_t seed) {
    at::manual_seed(seed);
    for (int i = 0; i < 3; ++i) {
      in.push_back(at::randn({n}));
      buf.push_back(in.back().clone());
      done.push_back(std::make_shared<Completion>());
      ops.push_back(std::make_unique<AllreduceOp>(0, buf[i], at::empty({n}), fp32, 1.0, at::Tensor(), 1 << 20,
                                                  done[i]));
      ctx.push_back(std::make_unique<FakeContext>(i));
      kept.emplace_back();
    }
  }
  // Delivers among islands [0, islands) until nothing moves; `lost(from, header)` picks
  // messages that never arrive. A HELLO for a finished collective is answered with its kept
  // result, as ZmqGroup's I/O thread does.
  void pump(int islands, const std::function<bool(int, const Header&)>& lost) {
    for (bool moved = true; moved;) {
      moved = false;
      for (int from = 0; from < islands; ++from) {
        while (!ctx[from]->out.empty()) {
          auto [to, o] = std::move(ctx[from]->out.front());
          ctx[from]->out.pop_front();
          moved = true;
          log.push_back(o);
          if (lost(from, o.header) || to >= islands) continue;
          if (!ops[to]->done()) {
            Inbound m = to_inbound(o);
            ops[to]->on_message(*ctx[to], m);
          } else if (o.header.type == MsgType::kHello) {
            if (!kept[to]) kept[to] = ops[to]->take_retained();
            serve_result(*ctx[to], 0, o.header.epoch, *kept[to], from);
          }
        }
      }
    }
  }
  // Every logged piece still holds the bytes its checksum was taken over.
  void expect_pieces_unchanged() const {
    for (const Outbound& o : log) {
      if (o.length == 0) continue;
      ASSERT_TRUE(o.hashed);
      EXPECT_EQ(checksum_payload(o.payload(), o.length), o.payload_hash)
          << msg_type_name(o.header.type) << " from island " << o.header.sender << " epoch " << o.header.epoch
          << " step " << o.header.step << " chunk " << o.header.chunk << (o.borrowed ? " (sent without a copy)" : "");
    }
  }
  bool any_borrowed() const {
    return std::any_of(log.begin(), log.end(), [](const Outbound& o) { return o.borrowed != nullptr; });
  }

  const compression::Pipeline fp32;
  std::vector<at::Tensor> in, buf;
  std::vector<std::shared_ptr<Completion>> done;
  std::vector<std::unique_ptr<AllreduceOp>> ops;
  std::vector<std::unique_ptr<FakeContext>> ctx;
  std::vector<std::unique_ptr<Retained>> kept;
  std::vector<Outbound> log;
};

// Sends from memory the all-reduce owns go out without a copy (zmq_wire.cpp), and the link
// keeps them until acknowledged, so nothing may change that memory while they are kept. W = 3
// ring: island 2's data pieces are lost (its HELLO arrives), islands 0 and 1 restart among
// themselves in epoch 1 and finish. Every piece sent in either epoch must still hold the
// bytes its checksum was taken over, also after the callers have reused their buffers: the
// restart wrote a new result tensor, not the one the first attempt's pieces were sent from,
// and pieces of the caller's buffer were copied.
TEST(AllreduceOp, PiecesSentWithoutACopyStayUnchangedWhileReferenced) {
  ThreeIslands t(30000, 5);  // pieces of 10,000 floats: above the zero-copy threshold
  for (int i = 0; i < 3; ++i) t.ops[i]->start(*t.ctx[i], 0, {0, 1, 2});
  t.pump(3, [](int from, const Header& h) { return from == 2 && h.type != MsgType::kHello; });
  ASSERT_FALSE(t.ops[0]->done());
  ASSERT_FALSE(t.ops[1]->done());
  const size_t first_epoch = t.log.size();
  ASSERT_TRUE(t.any_borrowed()) << "no piece of the first attempt was sent without a copy";
  for (int i = 0; i < 2; ++i) t.ops[i]->on_membership(*t.ctx[i], 1, {0, 1});
  t.pump(2, [](int, const Header&) { return false; });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(t.ops[i]->done()) << i;
    CollectiveResult r = t.done[i]->wait(std::nullopt);
    EXPECT_EQ(r.status.code(), StatusCode::kPeerLost) << r.status.to_string();
    EXPECT_TRUE(at::allclose(t.buf[i], (t.in[0] + t.in[1]) / 2)) << i;
  }
  EXPECT_TRUE(at::equal(t.buf[0], t.buf[1]));
  ASSERT_GT(t.log.size(), first_epoch);
  for (int i = 0; i < 2; ++i) t.buf[i].fill_(7);  // the callers use their buffers again
  t.expect_pieces_unchanged();
}

// The same through a hand-over: islands 0 and 1 finish a W = 3 ring, island 2 misses its
// last piece and restarts; a finished island places its kept pieces into its result for
// the hand-over, which must not touch the partial sums its earlier pieces were sent from.
TEST(AllreduceOp, AHandOverLeavesThePiecesSentWithoutACopyUnchanged) {
  ThreeIslands t(30000, 6);
  for (int i = 0; i < 3; ++i) t.ops[i]->start(*t.ctx[i], 0, {0, 1, 2});
  auto last_piece_to_2 = [](int from, const Header& h) { return from == 1 && h.type == MsgType::kRing && h.step == 3; };
  t.pump(3, last_piece_to_2);
  ASSERT_TRUE(t.ops[0]->done());
  ASSERT_TRUE(t.ops[1]->done());
  ASSERT_FALSE(t.ops[2]->done());
  ASSERT_TRUE(t.any_borrowed());
  t.ops[2]->on_membership(*t.ctx[2], 1, {0, 1, 2});  // island 2 restarts: HELLO in epoch 1
  t.pump(3, [](int, const Header&) { return false; });
  ASSERT_TRUE(t.ops[2]->done());
  CollectiveResult r = t.done[2]->wait(std::nullopt);
  EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  EXPECT_TRUE(t.kept[0] || t.kept[1]) << "no hand-over";
  for (int i = 1; i < 3; ++i) EXPECT_TRUE(at::equal(t.buf[i], t.buf[0])) << i;
  t.expect_pieces_unchanged();
}

// A whole frame arriving for a receive that pieces of a split frame have started (a broken or
// hostile peer) is dropped: it neither completes the receive with a half-filled frame nor
// replaces it; the split frame completes from its remaining pieces, byte for byte.
TEST(ZmqWire, AWholeFrameAfterPiecesOfASplitFrameIsDropped) {
  FakeContext ctx(0);
  ZmqWire wire(/*group=*/0, /*seq=*/5, /*epoch=*/0, /*chunk_bytes=*/1024, {0, 1});
  wire.bind(ctx);
  const size_t total = 2500;  // three pieces: 1024, 1024, 452 bytes
  const collectives::RecvId id =
      wire.post_recv(1, {collectives::Tag::kDirect, 0, 0, 0, 1}, nullptr, total, /*raw=*/false);
  std::vector<uint8_t> frame(total);
  for (size_t i = 0; i < total; ++i) frame[i] = static_cast<uint8_t>(i * 31 + 7);
  auto message = [](Header h, const uint8_t* data, size_t size) {
    h.type = MsgType::kDirect;
    h.sender = 1;
    h.seq = 5;
    h.payload_len = static_cast<uint32_t>(size);
    Inbound m{h, zmq::message_t(data, size)};
    m.payload_hash = checksum_payload(m.data(), m.size());
    return m;
  };
  auto piece = [&](uint32_t k) {
    Header h;
    h.flags = kFlagSplit;
    h.pieces = 3;
    h.piece = k;
    h.total = total;
    h.offset = uint64_t{k} * 1024;
    return message(h, frame.data() + h.offset, std::min<size_t>(1024, total - h.offset));
  };
  for (uint32_t k : {0u, 1u}) {
    Inbound m = piece(k);
    wire.deliver(m);
  }
  EXPECT_FALSE(wire.ready(id));
  const std::vector<uint8_t> other(100, 0xAB);
  Header h;
  h.pieces = 1;
  h.total = other.size();
  Inbound whole = message(h, other.data(), other.size());
  wire.deliver(whole);
  EXPECT_FALSE(wire.ready(id)) << "a whole frame completed the receive of a split frame";
  EXPECT_EQ(ctx.drops().total(), 1u);
  Inbound last = piece(2);
  wire.deliver(last);
  ASSERT_TRUE(wire.ready(id));
  const collectives::Payload got = wire.take(id);
  ASSERT_EQ(got.size, total);
  EXPECT_EQ(std::memcmp(got.data, frame.data(), total), 0);
}

// A collective that ends without a result leaves the caller its input, however far its data
// phase got: W = 2 ring in pieces, island 1's first piece is added, its second is damaged
// (a raw piece of the wrong size), and island 0 completes with kCorrupt and its buffer
// exactly as it was issued.
TEST(AllreduceOp, ACorruptPieceLeavesTheCallerItsInput) {
  const compression::Pipeline fp32;
  at::manual_seed(7);
  const int64_t n = 8000;
  std::vector<at::Tensor> in = {at::randn({n}), at::randn({n})};
  std::vector<at::Tensor> buf = {in[0].clone(), in[1].clone()};
  std::vector<std::shared_ptr<Completion>> done = {std::make_shared<Completion>(), std::make_shared<Completion>()};
  const int64_t chunk_bytes = 8192;  // pieces of 2048 floats: two per chunk
  AllreduceOp a(0, buf[0], at::empty({n}), fp32, 1.0, {}, chunk_bytes, done[0]);
  AllreduceOp b(0, buf[1], at::empty({n}), fp32, 1.0, {}, chunk_bytes, done[1]);
  FakeContext ca(0), cb(1);
  a.start(ca, 0, {0, 1});
  b.start(cb, 0, {0, 1});
  int added = 0;
  for (bool moved = true; moved && !a.done();) {
    moved = false;
    for (; !cb.out.empty(); moved = true) {
      Outbound o = std::move(cb.out.front().second);
      cb.out.pop_front();
      Inbound m = to_inbound(o);
      if (o.header.type == MsgType::kRing && o.header.step == 0 && ++added == 2) {
        m.payload = zmq::message_t(o.payload(), o.length - sizeof(float));
        m.header.payload_len = static_cast<uint32_t>(o.length - sizeof(float));
      }
      a.on_message(ca, m);
    }
    for (; !ca.out.empty(); moved = true) {
      Inbound m = to_inbound(ca.out.front().second);
      ca.out.pop_front();
      b.on_message(cb, m);
    }
  }
  ASSERT_EQ(added, 2) << "island 1 sent fewer pieces than expected";
  ASSERT_TRUE(a.done());
  EXPECT_EQ(done[0]->wait(std::nullopt).status.code(), StatusCode::kCorrupt);
  EXPECT_TRUE(at::equal(buf[0], in[0])) << "the caller's buffer changed";
}

// The same for an allgather: island 1 misses island 0's bytes, restarts, and takes island
// 0's finished result (handed over packed as fp32 words) instead of running it again.
TEST(AllreduceOp, RestartedPeerTakesOverAFinishedAllgather) {
  std::vector<std::vector<uint8_t>> out0, out1;
  std::vector<std::shared_ptr<Completion>> done = {std::make_shared<Completion>(), std::make_shared<Completion>()};
  AllreduceOp a(0, std::vector<uint8_t>{1, 2, 3, 4, 5}, &out0, 1 << 20, done[0]);
  AllreduceOp b(0, std::vector<uint8_t>{9}, &out1, 1 << 20, done[1]);
  FakeContext ca(0), cb(1);
  a.start(ca, 0, {0, 1});
  b.start(cb, 0, {0, 1});
  // 0's bytes to 1
  std::vector<Outbound> withheld =
      exchange_until_quiet(a, ca, b, cb, [](const Header& h) { return h.type == MsgType::kGather; });
  ASSERT_TRUE(a.done());
  ASSERT_FALSE(b.done());
  ASSERT_EQ(withheld.size(), 1u);
  const std::vector<std::vector<uint8_t>> want = {{1, 2, 3, 4, 5}, {9}};
  EXPECT_EQ(out0, want);
  std::unique_ptr<Retained> kept = a.take_retained();
  ASSERT_TRUE(kept);
  b.on_membership(cb, 1, {0, 1});
  ASSERT_EQ(cb.out.size(), 1u);
  EXPECT_EQ(cb.out.front().second.header.type, MsgType::kHello);
  serve_result(ca, 0, 1, *kept, 1);
  deliver_all(ca, b, cb);
  ASSERT_TRUE(b.done());
  CollectiveResult r = done[1]->wait(std::nullopt);
  EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
  EXPECT_EQ(out1, want);
}

// A broadcast runs in attempts too (data wire v5): island 1 misses the root's piece,
// restarts in epoch 1, and takes the root's finished result instead.
TEST(AllreduceOp, RestartedReceiverTakesOverAFinishedBroadcast) {
  const compression::Pipeline fp32;
  at::manual_seed(4);
  const at::Tensor sent = at::randn({1001});
  at::Tensor root = sent.clone(), got = at::zeros({1001});
  std::vector<std::shared_ptr<Completion>> done = {std::make_shared<Completion>(), std::make_shared<Completion>()};
  AllreduceOp a(0, 0, root, {}, fp32, 1 << 20, done[0]);
  AllreduceOp b(0, 0, got, at::empty({1001}), fp32, 1 << 20, done[1]);
  FakeContext ca(0), cb(1);
  a.start(ca, 0, {0, 1});
  b.start(cb, 0, {0, 1});
  std::vector<Outbound> withheld =
      exchange_until_quiet(a, ca, b, cb, [](const Header& h) { return h.type == MsgType::kBroadcast; });
  ASSERT_TRUE(a.done());
  ASSERT_FALSE(b.done());
  ASSERT_EQ(withheld.size(), 1u);
  std::unique_ptr<Retained> kept = a.take_retained();
  ASSERT_TRUE(kept);
  b.on_membership(cb, 1, {0, 1});
  ASSERT_EQ(cb.out.size(), 1u);
  EXPECT_EQ(cb.out.front().second.header.type, MsgType::kHello);
  serve_result(ca, 0, 1, *kept, 1);
  deliver_all(ca, b, cb);
  ASSERT_TRUE(b.done());
  CollectiveResult r = done[1]->wait(std::nullopt);
  EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
  EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
  EXPECT_TRUE(at::equal(got, sent));
  EXPECT_TRUE(at::equal(root, sent));
}

// A broadcast whose root is lost mid-way produces nothing: the receiver that had taken some
// of the root's pieces completes with kPeerLost and its buffer exactly as issued (it
// receives into a tensor of its own, copied into the caller's buffer only at completion).
TEST(AllreduceOp, ABroadcastThatLosesItsRootLeavesTheReceiverItsInput) {
  const compression::Pipeline fp32;
  at::manual_seed(5);
  const int64_t n = 8000;
  const at::Tensor sent = at::randn({n}), mine = at::randn({n});
  at::Tensor root = sent.clone(), got = mine.clone();
  std::vector<std::shared_ptr<Completion>> done = {std::make_shared<Completion>(), std::make_shared<Completion>()};
  const int64_t chunk_bytes = 8192;  // pieces of 2048 floats
  AllreduceOp a(0, 0, root, {}, fp32, chunk_bytes, done[0]);
  AllreduceOp b(0, 0, got, at::empty({n}), fp32, chunk_bytes, done[1]);
  FakeContext ca(0), cb(1);
  a.start(ca, 0, {0, 1});
  b.start(cb, 0, {0, 1});
  int pieces = 0;
  std::vector<Outbound> withheld = exchange_until_quiet(a, ca, b, cb, [&](const Header& h) {
    return h.type == MsgType::kBroadcast && ++pieces > 2;  // island 1 takes two pieces of four
  });
  ASSERT_EQ(pieces, 4) << "the root sent another number of pieces";
  ASSERT_FALSE(b.done());
  b.on_membership(cb, 1, {1});  // the root is gone
  ASSERT_TRUE(b.done());
  EXPECT_EQ(done[1]->wait(std::nullopt).status.code(), StatusCode::kPeerLost);
  EXPECT_TRUE(at::equal(got, mine)) << "the receiver's buffer changed";
  EXPECT_TRUE(at::equal(root, sent));
}

// A sub-group's op names every message it sends by the sub-group's key (data wire v4:
// group), and so does the hand-over of its finished result.
TEST(AllreduceOp, SubgroupMessagesCarryTheGroupKey) {
  std::vector<std::vector<uint8_t>> out0, out1;
  std::vector<std::shared_ptr<Completion>> done = {std::make_shared<Completion>(), std::make_shared<Completion>()};
  AllreduceOp a(0, std::vector<uint8_t>{1, 2}, &out0, 1 << 20, done[0]);
  AllreduceOp b(0, std::vector<uint8_t>{3}, &out1, 1 << 20, done[1]);
  a.set_group(7, {0, 1});
  b.set_group(7, {0, 1});
  FakeContext ca(0), cb(1);
  a.start(ca, 0, {0, 1});
  b.start(cb, 0, {0, 1});
  std::vector<Header> sent;
  auto record = [&](const Header& h) {
    sent.push_back(h);
    return false;
  };
  for (const auto& [peer, o] : cb.out) sent.push_back(o.header);
  exchange_until_quiet(a, ca, b, cb, record);
  ASSERT_TRUE(a.done() && b.done());
  EXPECT_EQ(out0, out1);
  std::unique_ptr<Retained> kept = a.take_retained();
  ASSERT_TRUE(kept);
  serve_result(ca, 0, 1, *kept, 1, 7);
  for (const auto& [peer, o] : ca.out) sent.push_back(o.header);
  ASSERT_GE(sent.size(), 4u);  // HELLO, GATHER, RESULT_INFO, RESULT
  for (const Header& h : sent) EXPECT_EQ(h.group, 7u) << msg_type_name(h.type);
}

// pack_gathered / unpack_gathered round-trip, and a damaged packing is refused.
TEST(AllreduceOp, PackedAllgatherResultsRoundTripAndRejectDamage) {
  const std::vector<std::vector<uint8_t>> g = {{}, {7}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
  at::Tensor words = collectives::pack_gathered(g);
  std::vector<std::vector<uint8_t>> back;
  ASSERT_TRUE(collectives::unpack_gathered(words, &back).is_ok());
  EXPECT_EQ(back, g);
  at::Tensor bad = words.clone();
  uint64_t huge = 1000;
  std::memcpy(static_cast<uint8_t*>(bad.data_ptr()) + 8 + 8 * 2, &huge, 8);  // last size beyond the end
  EXPECT_EQ(collectives::unpack_gathered(bad, &back).code(), StatusCode::kCorrupt);
  EXPECT_EQ(collectives::unpack_gathered(at::zeros({1}), &back).code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace atl::transport::dataplane
