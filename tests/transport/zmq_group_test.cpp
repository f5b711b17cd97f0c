// ZmqGroup over real loopback sockets, islands as threads: every result is compared bitwise
// with the in-process reference (InprocHub) for the same inputs; chunking and flow control
// on a 64 MB buffer; several collectives in flight; broadcast; byte counts; hostile input;
// a member lost mid-collective.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <zmq.hpp>

#include <map>
#include <optional>
#include <random>

#include "compression/frame.h"
#include "tests/transport/zmq_group_test_util.h"
#include "transport/zmq/curve.h"
#include "transport/zmq/data_wire.h"

namespace atl::transport::testing {
namespace {

// One allreduce_mean per island on `c`; each island's buffer/transmitted are filled in.
std::vector<CollectiveResult> zmq_allreduce(ZmqCluster& c, std::vector<at::Tensor>& buffers,
                                            const compression::Pipeline& codec, const std::vector<double>& weights,
                                            std::vector<at::Tensor>* transmitted = nullptr) {
  std::vector<CollectiveResult> results(c.size());
  c.run([&](int i) {
    at::Tensor t = transmitted ? (*transmitted)[i] : at::Tensor();
    results[i] = c.groups[i]->allreduce_mean(buffers[i], codec, weights[i], t)->wait(in_seconds(30));
  });
  return results;
}

TEST(ZmqGroup, AllreduceIsBitwiseTheInprocResult) {
  const std::vector<std::pair<std::string, compression::Pipeline>> codecs = {
      {"fp32", compression::Pipeline()},
      {"zstd", make_pipeline(compression::StageId::kZstd)},
      {"int8", make_pipeline(compression::StageId::kInt8)}};
  for (int w : {1, 2, 3, 4}) {
    ZmqCluster c(w);
    uint64_t seq = 0;  // the lossy path's seeds depend on the collective's sequence number
    for (const auto& [name, codec] : codecs) {
      for (int64_t n : {1, 2, 5, 1003, 65537}) {
        SCOPED_TRACE("W=" + std::to_string(w) + " " + name + " n=" + std::to_string(n));
        const std::vector<at::Tensor> inputs = random_inputs(w, n, 100 * w + n);
        const std::vector<double> ones(w, 1.0);
        std::vector<at::Tensor> ref = clones(inputs), ref_tx, got = clones(inputs), got_tx;
        for (int i = 0; i < w; ++i) {
          ref_tx.push_back(at::zeros({n}));
          got_tx.push_back(at::zeros({n}));
        }
        inproc_allreduce(ref, codec, ones, &ref_tx, seq++);
        std::vector<CollectiveResult> results = zmq_allreduce(c, got, codec, ones, &got_tx);
        for (int i = 0; i < w; ++i) {
          EXPECT_TRUE(results[i].status.is_ok()) << results[i].status.to_string();
          EXPECT_EQ(results[i].contributors, iota_ids(w));
          EXPECT_DOUBLE_EQ(results[i].weight_sum, w);
          EXPECT_TRUE(at::equal(got[i], ref[i])) << "island " << i;
          EXPECT_TRUE(at::equal(got[i], got[0])) << "island " << i;
          EXPECT_TRUE(at::equal(got_tx[i], ref_tx[i])) << "transmitted of island " << i;
        }
      }
    }
    for (auto& g : c.groups) EXPECT_EQ(g->dropped(), 0u);
  }
}

TEST(ZmqGroup, WeightedMeansMatchInproc) {
  ZmqCluster c(3);
  {  // the plain case: (1 * 1 + 1 * 2 + 2 * 4) / 4
    std::vector<at::Tensor> b = {at::full({10}, 1.0), at::full({10}, 2.0), at::full({10}, 4.0)};
    std::vector<CollectiveResult> r = zmq_allreduce(c, b, compression::Pipeline(), {1, 1, 2});
    for (int i = 0; i < 3; ++i) {
      EXPECT_DOUBLE_EQ(r[i].weight_sum, 4.0);
      EXPECT_TRUE(at::allclose(b[i], at::full({10}, 11.0 / 4)));
    }
  }
  const std::vector<std::vector<double>> weight_sets = {{1, 1, 2}, {0.3, 0.3, 0.3}, {0.5, 2.5, 1.25}};
  uint64_t seq = 1;
  for (const auto& weights : weight_sets) {
    for (const auto& codec : {compression::Pipeline(), make_pipeline(compression::StageId::kInt8)}) {
      const std::vector<at::Tensor> inputs = random_inputs(3, 1001, 7);
      std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
      inproc_allreduce(ref, codec, weights, nullptr, seq++);
      std::vector<CollectiveResult> r = zmq_allreduce(c, got, codec, weights);
      for (int i = 0; i < 3; ++i) {
        EXPECT_DOUBLE_EQ(r[i].weight_sum, weights[0] + weights[1] + weights[2]);
        EXPECT_TRUE(at::equal(got[i], ref[i])) << codec.describe() << " island " << i;
      }
    }
  }
}

// 64 MB of fp32 in 64 KB wire messages with two credits per link: thousands of messages,
// the senders held back by acknowledgements all the way.
TEST(ZmqGroup, LargeBufferInSmallChunksWithFewCredits) {
  ZmqGroupOptions o;
  o.chunk_bytes = 64 << 10;
  o.max_in_flight = 2;
  const int w = 4;
  const int64_t n = int64_t{16} << 20;  // 64 MB
  ZmqCluster c(w, o);
  const std::vector<at::Tensor> inputs = random_inputs(w, n, 64);
  std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
  inproc_allreduce(ref, compression::Pipeline(), std::vector<double>(w, 1.0));
  const auto t0 = Clock::now();
  std::vector<CollectiveResult> r = zmq_allreduce(c, got, compression::Pipeline(), std::vector<double>(w, 1.0));
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int i = 0; i < w; ++i) {
    ASSERT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    EXPECT_TRUE(at::equal(got[i], ref[i])) << "island " << i;
    const ByteCounters b = c.groups[i]->bytes();
    // 2 (W - 1) / W of the buffer, in pieces of at most 64 KB, each with its header.
    EXPECT_GE(b.sent, uint64_t(n) * 4 * 3 / 2);
    EXPECT_LE(b.sent, uint64_t(n) * 4 * 3 / 2 * 101 / 100);
    EXPECT_EQ(b.raw_sent, uint64_t(n) * 4 * 3 / 2);
    EXPECT_EQ(c.groups[i]->dropped(), 0u);
  }
  std::cout << "64 MB all-reduce, 4 islands, 64 KB chunks, 2 credits: " << secs << " s\n";
}

// Five collectives in flight per island, bitwise the in-process results.
TEST(ZmqGroup, SeveralCollectivesInFlight) {
  ZmqCluster c(3);
  expect_several_collectives_in_flight_match_inproc(c);
}

TEST(ZmqGroup, BroadcastFromRootMatchesInproc) {
  ZmqGroupOptions o;
  o.chunk_bytes = 16 << 10;  // several pieces
  const int w = 4, root = 2;
  ZmqCluster c(w, o);
  for (const auto& codec : {compression::Pipeline(), make_pipeline(compression::StageId::kInt8)}) {
    const std::vector<at::Tensor> inputs = random_inputs(w, 70001, 5);
    std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
    {
      Scheduler scheduler(w);
      InprocHub hub(w, scheduler);
      std::vector<std::unique_ptr<Group>> groups;
      for (int i = 0; i < w; ++i) groups.push_back(hub.make_group(i));
      scheduler.run([&](int i) { groups[i]->broadcast(root, ref[i], codec)->wait(); });
    }
    c.run([&](int i) {
      CollectiveResult r = c.groups[i]->broadcast(root, got[i], codec)->wait(in_seconds(30));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(r.contributors, iota_ids(w));
    });
    for (int i = 0; i < w; ++i) EXPECT_TRUE(at::equal(got[i], ref[i])) << codec.describe() << " island " << i;
    EXPECT_TRUE(at::equal(got[root], inputs[root]));
  }
}

// Per island, W = 3, n = 3000 (three chunks of 1000, one piece each):
//   2 HELLO (header + 40-byte body), 4 ring pieces (header + 4000 bytes of raw fp32: the
//   empty pipeline sends no frame header), and one 92-byte ACK for each of the 6 messages it
//   receives; the same comes back.
TEST(ZmqGroup, ByteCountersCountWhatTheSocketsCarry) {
  ZmqCluster c(3);
  std::vector<at::Tensor> b = random_inputs(3, 3000, 1);
  zmq_allreduce(c, b, compression::Pipeline(), {1, 1, 1});
  const uint64_t h = dataplane::kHeaderBytes;
  const uint64_t want = 2 * (h + collectives::kHelloBytes) + 4 * (h + 4000) + 6 * h;
  for (int i = 0; i < 3; ++i) {
    ByteCounters got = c.groups[i]->bytes();
    for (int k = 0; k < 200 && (got.sent != want || got.received != want); ++k) {  // last acks
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      got = c.groups[i]->bytes();
    }
    EXPECT_EQ(got.sent, want) << "island " << i;
    EXPECT_EQ(got.received, want) << "island " << i;
    EXPECT_EQ(got.raw_sent, 4u * 4000) << "island " << i;
  }
}

// Random bytes on a plain TCP connection, and from ZeroMQ peers: random frames, truncated,
// bit-flipped and multi-frame messages, a forged link name, a HELLO from a non-member. All
// dropped; the islands' collectives complete with the reference result.
TEST(ZmqGroup, GarbageAndTruncatedMessagesAreDropped) {
  ZmqCluster c(2);
  const std::string target = c.peers[0].endpoint;
  const int port = std::stoi(target.substr(target.rfind(':') + 1));
  {  // not even ZMTP
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    std::mt19937 rng(1);
    std::vector<uint8_t> junk(4096);
    for (auto& x : junk) x = static_cast<uint8_t>(rng());
    EXPECT_GT(::send(fd, junk.data(), junk.size(), MSG_NOSIGNAL), 0);
    ::close(fd);
  }
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer), forged(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 0);
  forged.set(zmq::sockopt::linger, 0);
  forged.set(zmq::sockopt::routing_id, "d7:forged");
  raw.connect(target);
  forged.connect(target);
  dataplane::Header h;
  h.type = dataplane::MsgType::kHello;
  h.sender = 7;
  h.seq = 0;
  h.link_seq = 1;
  h.payload_len = collectives::kHelloBytes;
  const std::vector<uint8_t> body = collectives::encode_hello({1, 10, 1.0, 1, 1});
  uint8_t head[dataplane::kHeaderBytes];
  dataplane::encode_header(h, body.data(), head);
  std::mt19937_64 rng(2);
  int sent = 0;
  for (int i = 0; i < 100; ++i) {  // random frames
    std::vector<uint8_t> junk(rng() % 200);
    for (auto& x : junk) x = static_cast<uint8_t>(rng());
    raw.send(zmq::buffer(junk));
    ++sent;
  }
  for (size_t n = 0; n < dataplane::kHeaderBytes; n += 7) {  // truncated headers
    raw.send(zmq::buffer(head, n));
    ++sent;
  }
  for (size_t bit = 0; bit < dataplane::kHeaderBytes * 8; bit += 13) {  // bit flips
    uint8_t flipped[dataplane::kHeaderBytes];
    std::memcpy(flipped, head, sizeof head);
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    raw.send(zmq::buffer(flipped, sizeof flipped), zmq::send_flags::sndmore);
    raw.send(zmq::buffer(body));
    ++sent;
  }
  raw.send(zmq::buffer(head, sizeof head), zmq::send_flags::sndmore);  // three frames
  raw.send(zmq::buffer(body), zmq::send_flags::sndmore);
  raw.send(zmq::buffer(body));
  raw.send(zmq::buffer(head, sizeof head), zmq::send_flags::sndmore);  // valid, unnamed link
  raw.send(zmq::buffer(body));
  forged.send(zmq::buffer(head, sizeof head), zmq::send_flags::sndmore);  // named, not a member
  forged.send(zmq::buffer(body));
  sent += 3;
  for (int k = 0; k < 300 && c.groups[0]->dropped() < static_cast<uint64_t>(sent) - 1; ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // The forged HELLO waits for collective #0 and is dropped when it starts.
  uint64_t seq = 0;
  for (const auto& codec : {compression::Pipeline(), make_pipeline(compression::StageId::kInt8)}) {
    const std::vector<at::Tensor> inputs = random_inputs(2, 4099, 9);
    std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
    inproc_allreduce(ref, codec, {1, 1}, nullptr, seq++);
    std::vector<CollectiveResult> r = zmq_allreduce(c, got, codec, {1, 1});
    for (int i = 0; i < 2; ++i) {
      EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
      EXPECT_TRUE(at::equal(got[i], ref[i]));
    }
  }
  // At least every ZeroMQ message sent (libzmq may also parse the plain-TCP junk as legacy
  // ZMTP/1.0 frames, which are then dropped too).
  EXPECT_GE(c.groups[0]->dropped(), static_cast<uint64_t>(sent));
  EXPECT_EQ(c.groups[1]->dropped(), 0u);
}

// Island 2 dies before the collective; when the membership drops it, islands 0 and 1
// restart among themselves and end with the two-island reference result.
TEST(ZmqGroup, LostMemberRestartsAmongSurvivors) {
  ZmqGroupOptions o;
  o.poll_ms = 10;
  for (const auto& codec : {compression::Pipeline(), make_pipeline(compression::StageId::kInt8)}) {
    ZmqCluster c(3, o, /*static_planes=*/false);
    c.groups[2].reset();  // crashed
    const std::vector<at::Tensor> inputs = random_inputs(2, 10007, 11);
    std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
    inproc_allreduce(ref, codec, {1, 1});
    std::vector<std::unique_ptr<Handle>> handles;
    for (int i = 0; i < 2; ++i) handles.push_back(c.groups[i]->allreduce_mean(got[i], codec, 1.0));
    // Still waiting for island 2: a passing deadline reports kTimeout and changes nothing.
    EXPECT_EQ(handles[0]->wait(in_seconds(0.2)).status.code(), StatusCode::kTimeout);
    EXPECT_FALSE(handles[1]->done());
    const Membership survivors{1, {c.peers[0], c.peers[1]}};
    for (int i = 0; i < 2; ++i) c.test_planes[i]->set(survivors);
    for (int i = 0; i < 2; ++i) {
      CollectiveResult r = handles[i]->wait(in_seconds(20));
      EXPECT_EQ(r.status.code(), StatusCode::kPeerLost) << r.status.to_string();
      EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
      EXPECT_DOUBLE_EQ(r.weight_sum, 2.0);
      EXPECT_TRUE(at::equal(got[i], ref[i])) << codec.describe() << " island " << i;
      EXPECT_EQ(c.groups[i]->view().epoch, 1u);
    }
    // The group goes on in the new epoch.
    std::vector<at::Tensor> again = clones(inputs), again_ref = clones(inputs);
    inproc_allreduce(again_ref, codec, {1, 1}, nullptr, 1);
    c.run([&](int i) {
      if (i == 2) return;
      CollectiveResult r = c.groups[i]->allreduce_mean(again[i], codec, 1.0)->wait(in_seconds(20));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_TRUE(at::equal(again[i], again_ref[i]));
    });
  }
}

// Island 2 dies in the middle of the data phase, after islands 0 and 1 have added some of its
// pieces into their results: their restart among themselves must begin from their inputs
// (the caller's buffer stays the input until the collective completes), giving the
// two-island result.
TEST(ZmqGroup, MemberLostMidDataPhaseRestartsFromTheInputs) {
  ZmqGroupOptions o;
  o.poll_ms = 10;
  o.chunk_bytes = 64 << 10;
  o.max_in_flight = 1;  // a slow data phase: 0.5 s or more
  o.linger_ms = 0;      // a destroyed group stops at once (no delivering of what is queued)
  const int64_t n = int64_t{4} << 20;
  ZmqCluster c(3, o, /*static_planes=*/false);
  const std::vector<at::Tensor> inputs = random_inputs(3, n, 21);
  std::vector<at::Tensor> ref = {inputs[0].clone(), inputs[1].clone()}, got = clones(inputs);
  inproc_allreduce(ref, compression::Pipeline(), {1, 1});
  std::vector<std::unique_ptr<Handle>> handles;
  for (int i = 0; i < 3; ++i) handles.push_back(c.groups[i]->allreduce_mean(got[i], compression::Pipeline(), 1.0));
  // Island 0 receives from island 2 and adds into its result: wait until several pieces are
  // in and have been added (a piece is counted when it arrives, added just after).
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (c.groups[0]->bytes().received < 4 * uint64_t(64 << 10) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_FALSE(handles[0]->done()) << "the data phase ended before island 2 could die in it";
  ASSERT_GE(c.groups[0]->bytes().received, 4 * uint64_t(64 << 10)) << "island 0 received too little";
  EXPECT_TRUE(at::equal(got[0], inputs[0])) << "the caller's buffer changed before the collective completed";
  c.groups[2].reset();  // crashed
  const Membership survivors{1, {c.peers[0], c.peers[1]}};
  for (int i = 0; i < 2; ++i) c.test_planes[i]->set(survivors);
  for (int i = 0; i < 2; ++i) {
    CollectiveResult r = handles[i]->wait(in_seconds(60));
    EXPECT_EQ(r.status.code(), StatusCode::kPeerLost) << r.status.to_string();
    EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(at::equal(got[i], ref[i])) << "island " << i;
  }
}

// An island that joined late (first_seq = 1) answers ABSENT for collective #0, which the
// others then complete without it; from #1 on it takes part.
TEST(ZmqGroup, LateJoinerSitsOutEarlierCollectives) {
  ZmqCluster c(2);
  c.groups[1].reset();
  ZmqGroupOptions late;
  late.first_seq = 1;
  c.groups[1] = std::make_unique<ZmqGroup>(*c.planes[1], late);
  at::Tensor alone = at::full({100}, 3.0);
  CollectiveResult r0 = c.groups[0]->allreduce_mean(alone, compression::Pipeline(), 1.0)->wait(in_seconds(20));
  EXPECT_TRUE(r0.status.is_ok()) << r0.status.to_string();
  EXPECT_EQ(r0.contributors, std::vector<int>{0});
  EXPECT_TRUE(at::equal(alone, at::full({100}, 3.0)));
  std::vector<at::Tensor> b = {at::full({100}, 1.0), at::full({100}, 2.0)};
  std::vector<CollectiveResult> r = zmq_allreduce(c, b, compression::Pipeline(), {1, 1});
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    EXPECT_EQ(r[i].contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(at::equal(b[i], at::full({100}, 1.5)));
  }
}

// A late joiner in a sub-group (ZmqGroupOptions::first_seqs, from a donor's next_seqs()):
// islands 0 and 1 run sub-group 5's collectives #0 and #1, which island 2 (a member from the
// start) answers ABSENT; it makes the sub-group at #2 and takes part from there.
TEST(ZmqGroup, LateJoinerTakesPartInASubgroupFromItsFirstSeq) {
  ZmqCluster c(3);
  c.groups[2].reset();
  ZmqGroupOptions late;
  late.first_seqs = {{5, 2}};
  c.groups[2] = std::make_unique<ZmqGroup>(*c.planes[2], late);
  const std::vector<int> ids = {0, 1, 2};
  std::vector<std::unique_ptr<Group>> subs(3);
  for (int i = 0; i < 2; ++i) subs[i] = c.groups[i]->subgroup(5, ids);
  for (int k = 0; k < 2; ++k) {
    std::vector<at::Tensor> b = {at::full({50}, 1.0 + k), at::full({50}, 3.0 + k)};
    auto h0 = subs[0]->allreduce_mean(b[0], compression::Pipeline(), 1.0);
    auto h1 = subs[1]->allreduce_mean(b[1], compression::Pipeline(), 1.0);
    for (auto* h : {h0.get(), h1.get()}) {
      CollectiveResult r = h->wait(in_seconds(20));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(r.contributors, (std::vector<int>{0, 1})) << "collective #" << k;
    }
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(at::equal(b[i], at::full({50}, 2.0 + k))) << "collective #" << k;
  }
  subs[2] = c.groups[2]->subgroup(5, ids);
  std::vector<at::Tensor> b = {at::full({50}, 1.0), at::full({50}, 2.0), at::full({50}, 6.0)};
  std::vector<std::unique_ptr<Handle>> h;
  for (int i = 0; i < 3; ++i) h.push_back(subs[i]->allreduce_mean(b[i], compression::Pipeline(), 1.0));
  for (int i = 0; i < 3; ++i) {
    CollectiveResult r = h[i]->wait(in_seconds(20));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.contributors, (std::vector<int>{0, 1, 2}));
    EXPECT_TRUE(at::equal(b[i], at::full({50}, 3.0))) << "island " << i;
  }
  const std::map<uint32_t, uint64_t> next = {{0, 0}, {5, 3}};
  EXPECT_EQ(c.groups[0]->next_seqs(), next);
  EXPECT_EQ(c.groups[2]->next_seqs(), next);
}

// The server role: the sum of what was pushed, by tag.
class SumServer final : public OuterServer {
 public:
  void on_push(int, uint64_t tag, const at::Tensor& payload, double weight) override {
    at::Tensor w = payload * weight;
    sums_[tag] = sums_.count(tag) ? sums_[tag] + w : w;
    ++count_[tag];
  }
  std::optional<at::Tensor> on_pull(int, uint64_t tag) override {
    if (count_[tag] < 2) return std::nullopt;
    return sums_[tag];
  }

 private:
  std::map<uint64_t, at::Tensor> sums_;
  std::map<uint64_t, int> count_;
};

TEST(ZmqGroup, PushAndPullGoThroughTheControlPlane) {
  SumServer server;
  ZmqCluster c(2, {}, true, &server);
  const compression::Pipeline fp32;
  c.run([&](int i) {
    at::Tensor t = at::full({8}, double(i + 1)), tx = at::zeros({8}), out = at::zeros({8});
    CollectiveResult p = c.groups[i]->push(4, t, fp32, 2.0, tx)->wait();
    EXPECT_TRUE(p.status.is_ok()) << p.status.to_string();
    EXPECT_TRUE(at::equal(tx, t));
    CollectiveResult q = c.groups[i]->pull(4, out, fp32)->wait();
    EXPECT_TRUE(q.status.is_ok()) << q.status.to_string();
    EXPECT_TRUE(at::equal(out, at::full({8}, 6.0)));  // 2 * 1 + 2 * 2
    const uint64_t frame = compression::kMinFrameHeaderBytes + 8 * 4;
    EXPECT_EQ(c.groups[i]->bytes().sent, frame);
    EXPECT_EQ(c.groups[i]->bytes().received, frame);
    EXPECT_EQ(c.groups[i]->bytes().raw_sent, 8u * 4);
  });
}

// CurveZMQ on the data sockets: members' all-reduce works encrypted; a client with a key
// that is not a member's, and a plain-TCP ZeroMQ client, are refused at the handshake, so
// their messages never reach the island.
TEST(ZmqGroup, CurveAdmitsOnlyMembersKeys) {
  if (!curve::available().is_ok()) GTEST_SKIP() << curve::available().message();
  auto keypair = [] {
    char pub[41], sec[41];
    EXPECT_EQ(zmq_curve_keypair(pub, sec), 0);
    return std::make_pair(std::string(pub), std::string(sec));
  };
  std::vector<Peer> peers = loopback_peers(2);
  std::vector<std::pair<std::string, std::string>> keys = {keypair(), keypair()};
  for (int i = 0; i < 2; ++i) peers[i].public_key = keys[i].first;
  StaticClusterOptions so;
  so.peers = peers;
  StaticCluster cluster(so);
  std::vector<std::unique_ptr<ControlPlane>> planes;
  std::vector<std::unique_ptr<ZmqGroup>> groups;
  for (int i = 0; i < 2; ++i) {
    planes.push_back(cluster.plane(i));
    ZmqGroupOptions o;
    o.curve = true;
    o.curve_public_key = keys[i].first;
    o.curve_secret_key = keys[i].second;
    groups.push_back(std::make_unique<ZmqGroup>(*planes[i], o));
  }
  auto allreduce = [&](uint64_t seq) {
    const std::vector<at::Tensor> inputs = random_inputs(2, 3001, seq);
    std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
    inproc_allreduce(ref, compression::Pipeline(), {1, 1}, nullptr, seq);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        CollectiveResult r = groups[i]->allreduce_mean(got[i], compression::Pipeline(), 1.0)->wait(in_seconds(20));
        EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(at::equal(got[i], ref[i]));
  };
  allreduce(0);

  // A well-formed HELLO for collective #1 claiming island 1, from an intruder's key and
  // from a client without CURVE.
  dataplane::Header h;
  h.type = dataplane::MsgType::kHello;
  h.sender = 1;
  h.seq = 1;
  h.link_seq = 1;
  h.payload_len = collectives::kHelloBytes;
  const std::vector<uint8_t> body = collectives::encode_hello({1, 3001, 1.0, 1, 1});
  uint8_t head[dataplane::kHeaderBytes];
  dataplane::encode_header(h, body.data(), head);
  zmq::context_t ctx;
  zmq::socket_t intruder(ctx, zmq::socket_type::dealer), plain(ctx, zmq::socket_type::dealer);
  const auto intruder_keys = keypair();
  for (zmq::socket_t* s : {&intruder, &plain}) {
    s->set(zmq::sockopt::linger, 0);
    s->set(zmq::sockopt::routing_id, "d1:intruder");
  }
  intruder.set(zmq::sockopt::curve_serverkey, keys[0].first);
  intruder.set(zmq::sockopt::curve_publickey, intruder_keys.first);
  intruder.set(zmq::sockopt::curve_secretkey, intruder_keys.second);
  for (zmq::socket_t* s : {&intruder, &plain}) {
    s->connect(peers[0].endpoint);
    s->send(zmq::buffer(head, sizeof head), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    s->send(zmq::buffer(body), zmq::send_flags::dontwait);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  allreduce(1);  // a forged HELLO for #1 would have been taken as island 1's (or dropped)
  EXPECT_EQ(groups[0]->dropped(), 0u);
  EXPECT_EQ(groups[1]->dropped(), 0u);
}

}  // namespace
}  // namespace atl::transport::testing
