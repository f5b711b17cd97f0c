// The star all-reduce over ZeroMQ (transport.collective: star): islands as threads, each a
// ZmqGroup with options.star over its own ZmqControlClient, and a real Coordinator that
// reduces. Results are compared bitwise with InprocHub::set_star for the same inputs; a
// member that dies, a late joiner, mismatched pipelines and the byte counters.
#include <gtest/gtest.h>

#include "compression/frame.h"
#include "tests/transport/zmq_group_test_util.h"
#include "tests/transport/zmq_test_util.h"
#include "transport/star.h"
#include "transport/zmq/data_wire.h"

namespace atl::transport::testing {
namespace {

compression::Pipeline int8_pipeline() {
  compression::StageConfig s;
  s.id = compression::StageId::kInt8;
  s.block = 64;
  s.rounding = compression::Rounding::kStochastic;  // the seeds matter
  return compression::Pipeline::make({s}).value();
}

// A coordinator reducing with `pipeline` and W islands joined to it, each with a star ZmqGroup
// (`first_seq[i]` when given).
struct StarCluster {
  StarCluster(int w, const compression::Pipeline& pipeline, std::vector<uint64_t> first_seq = {}) {
    CoordinatorOptions co = fast_coordinator();
    co.pipeline = pipeline;
    coordinator = start_coordinator(co);
    peers = loopback_peers(w);
    for (int i = 0; i < w; ++i) {
      ControlClientOptions o = fast_client(coordinator->endpoint(), i);
      o.data_endpoint = peers[i].endpoint;
      o.leave_on_destroy = false;  // a destroyed island vanishes like a crash
      clients.push_back(join(o));
    }
    EXPECT_EQ(ids(wait_for_ids(*clients[0], iota_ids(w))), iota_ids(w));
    for (int i = 0; i < w; ++i) {
      ZmqGroupOptions g;
      g.star = true;
      g.first_seq = first_seq.empty() ? 0 : first_seq[i];
      groups.push_back(std::make_unique<ZmqGroup>(*clients[i], g));
    }
  }
  int size() const { return static_cast<int>(groups.size()); }
  // Island i calls allreduce_mean(buffers[i], codec, weights[i], transmitted[i]), all at once.
  std::vector<CollectiveResult> allreduce(std::vector<at::Tensor>& buffers, const compression::Pipeline& codec,
                                          const std::vector<double>& weights,
                                          std::vector<at::Tensor>* transmitted = nullptr) {
    std::vector<CollectiveResult> results(size());
    std::vector<std::thread> threads;
    for (int i = 0; i < size(); ++i) {
      threads.emplace_back([&, i] {
        at::Tensor t = transmitted ? (*transmitted)[i] : at::Tensor();
        results[i] = groups[i]->allreduce_mean(buffers[i], codec, weights[i], t)->wait(in_seconds(30));
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }
  // The island vanishes without a word (no LEAVE): the coordinator finds out by heartbeats.
  void crash(int i) {
    groups[i].reset();
    clients[i].reset();
  }

  std::unique_ptr<Coordinator> coordinator;
  std::vector<Peer> peers;
  std::vector<std::unique_ptr<ZmqControlClient>> clients;
  std::vector<std::unique_ptr<ZmqGroup>> groups;  // destroyed first (declared last)
};

TEST(ZmqStar, AllreduceIsBitwiseTheInprocStar) {
  const std::vector<std::pair<std::string, compression::Pipeline>> codecs = {{"fp32", compression::Pipeline()},
                                                                             {"int8", int8_pipeline()}};
  for (const auto& [name, codec] : codecs) {
    for (int w : {1, 2, 4}) {
      StarCluster c(w, codec);
      uint64_t seq = 0;  // seeds depend on the collective's sequence number
      for (int64_t n : {1, 1003, 65537}) {
        for (bool uniform : {true, false}) {
          SCOPED_TRACE(name + " W=" + std::to_string(w) + " n=" + std::to_string(n) + (uniform ? " uniform" : " weighted"));
          std::vector<double> weights(w, 1.0);
          if (!uniform) {
            for (int i = 0; i < w; ++i) weights[i] = 0.5 + i;
          }
          const std::vector<at::Tensor> inputs = random_inputs(w, n, 10 * w + n);
          std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs), ref_tx, got_tx;
          for (int i = 0; i < w; ++i) {
            ref_tx.push_back(at::zeros({n}));
            got_tx.push_back(at::zeros({n}));
          }
          inproc_allreduce(ref, codec, weights, &ref_tx, seq++, /*star=*/true);
          std::vector<CollectiveResult> r = c.allreduce(got, codec, weights, &got_tx);
          double weight_sum = 0;
          for (double x : weights) weight_sum += x;
          for (int i = 0; i < w; ++i) {
            EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
            EXPECT_EQ(r[i].contributors, iota_ids(w));
            EXPECT_DOUBLE_EQ(r[i].weight_sum, weight_sum);
            EXPECT_TRUE(at::equal(got[i], ref[i])) << "island " << i;
            EXPECT_TRUE(at::equal(got_tx[i], ref_tx[i])) << "transmitted of island " << i;
          }
        }
      }
    }
  }
}

// The star sums in member order, the ring chunk by chunk around the ring: for fp32 inputs the
// two differ in the last bits, which is why the simulator must know which one a run uses.
TEST(ZmqStar, DiffersFromTheRingInSummationOrder) {
  const int w = 4;
  const int64_t n = 4096;
  const std::vector<at::Tensor> inputs = random_inputs(w, n, 3);
  std::vector<at::Tensor> ring = clones(inputs), star = clones(inputs);
  inproc_allreduce(ring, compression::Pipeline(), std::vector<double>(w, 1.0));
  StarCluster c(w, compression::Pipeline());
  c.allreduce(star, compression::Pipeline(), std::vector<double>(w, 1.0));
  EXPECT_TRUE(at::allclose(star[0], ring[0], 1e-5, 1e-6));
  EXPECT_FALSE(at::equal(star[0], ring[0]));
}

// Per island, W = 3, n = 3000 fp32: its contribution's frame out; the RESULT_INFO body twice
// (completion, then with the mean) and the mean's frame in.
TEST(ZmqStar, ByteCountersCountTheFrames) {
  StarCluster c(3, compression::Pipeline());
  std::vector<at::Tensor> b = random_inputs(3, 3000, 1);
  c.allreduce(b, compression::Pipeline(), {1, 1, 1});
  const uint64_t frame = compression::kMinFrameHeaderBytes + 3000 * 4;
  const uint64_t info = 24 + 4 * 3;
  for (int i = 0; i < 3; ++i) {
    const ByteCounters got = c.groups[i]->bytes();
    EXPECT_EQ(got.sent, frame) << i;
    EXPECT_EQ(got.received, 2 * info + frame) << i;
    EXPECT_EQ(got.raw_sent, 3000u * 4) << i;
  }
}

// Island 2 dies after islands 0 and 1 contributed: the coordinator declares it dead after its
// heartbeat timeout and completes the collective with the survivors' mean (kPeerLost).
TEST(ZmqStar, LostMemberCompletesOverTheSurvivors) {
  for (const auto& codec : {compression::Pipeline(), int8_pipeline()}) {
    StarCluster c(3, codec);
    const std::vector<at::Tensor> inputs = random_inputs(2, 10007, 11);
    std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
    inproc_allreduce(ref, codec, {1, 1}, nullptr, 0, /*star=*/true);
    std::vector<std::unique_ptr<Handle>> handles;
    for (int i = 0; i < 2; ++i) handles.push_back(c.groups[i]->allreduce_mean(got[i], codec, 1.0));
    // Still waiting for island 2: a passing deadline reports kTimeout and changes nothing.
    EXPECT_EQ(handles[0]->wait(in_seconds(0.3)).status.code(), StatusCode::kTimeout);
    EXPECT_FALSE(handles[1]->done());
    c.crash(2);
    for (int i = 0; i < 2; ++i) {
      CollectiveResult r = handles[i]->wait(in_seconds(20));
      EXPECT_EQ(r.status.code(), StatusCode::kPeerLost) << r.status.to_string();
      EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
      EXPECT_DOUBLE_EQ(r.weight_sum, 2.0);
      EXPECT_TRUE(at::equal(got[i], ref[i])) << codec.describe() << " island " << i;
    }
    // The survivors go on.
    std::vector<at::Tensor> again = clones(inputs), again_ref = clones(inputs);
    inproc_allreduce(again_ref, codec, {1, 1}, nullptr, 1, /*star=*/true);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        CollectiveResult r = c.groups[i]->allreduce_mean(again[i], codec, 1.0)->wait(in_seconds(20));
        EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
        EXPECT_TRUE(at::equal(again[i], again_ref[i]));
      });
    }
    for (auto& t : threads) t.join();
  }
}

// An island that joined late (first_seq = 1) tells the coordinator so: collective #0 completes
// with island 0 alone (its buffer unchanged); from #1 on both take part.
TEST(ZmqStar, LateJoinerSitsOutEarlierCollectives) {
  StarCluster c(2, compression::Pipeline(), {0, 1});
  at::Tensor alone = at::full({100}, 3.0);
  CollectiveResult r0 = c.groups[0]->allreduce_mean(alone, compression::Pipeline(), 2.0)->wait(in_seconds(20));
  EXPECT_TRUE(r0.status.is_ok()) << r0.status.to_string();
  EXPECT_EQ(r0.contributors, std::vector<int>{0});
  EXPECT_DOUBLE_EQ(r0.weight_sum, 2.0);
  EXPECT_TRUE(at::equal(alone, at::full({100}, 3.0)));
  std::vector<at::Tensor> b = {at::full({100}, 1.0), at::full({100}, 2.0)};
  std::vector<CollectiveResult> r = c.allreduce(b, compression::Pipeline(), {1, 1});
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    EXPECT_EQ(r[i].contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(at::equal(b[i], at::full({100}, 1.5)));
  }
}

// A contribution the coordinator cannot decode (island 1 encodes fp32, the run's pipeline is
// int8) fails the collective for every member instead of leaving the others waiting.
TEST(ZmqStar, UndecodableContributionFailsTheCollectiveForEveryone) {
  StarCluster c(2, int8_pipeline());
  std::vector<at::Tensor> b = random_inputs(2, 500, 2);
  std::vector<std::unique_ptr<Handle>> handles;
  handles.push_back(c.groups[0]->allreduce_mean(b[0], int8_pipeline(), 1.0));
  handles.push_back(c.groups[1]->allreduce_mean(b[1], compression::Pipeline(), 1.0));
  for (int i = 0; i < 2; ++i) {
    CollectiveResult r = handles[i]->wait(in_seconds(20));
    EXPECT_EQ(r.status.code(), StatusCode::kCorrupt) << r.status.to_string();
    EXPECT_TRUE(r.contributors.empty());
  }
}

// The server role's tags must leave the star namespace alone.
TEST(ZmqStar, ServerTagsCannotUseTheStarNamespace) {
  StarCluster c(1, compression::Pipeline());
  at::Tensor t = at::zeros({4});
  EXPECT_THROW(c.groups[0]->push(star::kTagBit | 3, t, compression::Pipeline(), 1.0), c10::Error);
  EXPECT_THROW(c.groups[0]->pull(star::kTagBit | 3, t, compression::Pipeline()), c10::Error);
}

}  // namespace
}  // namespace atl::transport::testing
