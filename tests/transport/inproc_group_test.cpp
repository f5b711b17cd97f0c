// The in-process group: ring all-reduce results, bitwise agreement, weights, byte counts,
// broadcast and the server role. Many islands as threads under the scheduler.
#include "transport/inproc/inproc_group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "compression/frame.h"
#include "transport/ring.h"
#include "transport/star.h"

namespace atl::transport {
namespace {

struct Fixture {
  explicit Fixture(int k) : scheduler(k), hub(k, scheduler) {
    for (int i = 0; i < k; ++i) groups.push_back(hub.make_group(i));
  }
  Scheduler scheduler;
  InprocHub hub;
  std::vector<std::unique_ptr<Group>> groups;
  compression::Pipeline codec;
};

TEST(Ring, ChunksCoverTheBufferExactlyOnce) {
  for (int64_t n : {0, 1, 7, 100, 1001}) {
    for (int w : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int c = 0; c < w; ++c) {
        auto [b, e] = ring::chunk_bounds(n, w, c);
        EXPECT_EQ(b, next);
        EXPECT_LE(e - b, n / w + 1);
        next = e;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(InprocGroup, AllreduceMeanIsExactMeanAndBitwiseEqualEverywhere) {
  for (int k : {1, 2, 3, 5}) {
    Fixture f(k);
    at::manual_seed(k);
    std::vector<at::Tensor> inputs, buffers;
    for (int i = 0; i < k; ++i) {
      inputs.push_back(at::randn({1003}));
      buffers.push_back(inputs.back().clone());
    }
    f.scheduler.run([&](int i) {
      auto r = f.groups[i]->allreduce_mean(buffers[i], f.codec, 1.0)->wait();
      EXPECT_TRUE(r.status.is_ok());
      EXPECT_EQ(static_cast<int>(r.contributors.size()), k);
    });
    at::Tensor mean = at::stack(inputs).to(at::kDouble).mean(0);
    for (int i = 0; i < k; ++i) {
      EXPECT_TRUE(at::allclose(buffers[i].to(at::kDouble), mean, 1e-5, 1e-6)) << "k=" << k;
      EXPECT_TRUE(at::equal(buffers[i], buffers[0]));
    }
    uint64_t total = 0;
    for (int i = 0; i < k; ++i) total += f.groups[i]->bytes().sent;
    // 2(W-1) messages per member, each a frame: header + fp32 payload
    EXPECT_EQ(total, 2u * (k - 1) * 1003 * 4 + 2u * k * (k - 1) * compression::kMinFrameHeaderBytes);
  }
}

// The hub runs every member's program at once; a message is freed once its receiver has
// consumed it, so the hub holds about a round of messages (each member's chunk: one buffer's
// worth in all, two across a round's boundary), not the whole all-reduce's 2(W-1) chunks per
// member (before: 14 buffers' worth at W = 8).
TEST(InprocGroup, RingHoldsAboutOneRoundOfMessages) {
  const int k = 8;
  const int64_t n = 80000;
  Fixture f(k);
  std::vector<at::Tensor> buffers;
  for (int i = 0; i < k; ++i) buffers.push_back(at::full({n}, static_cast<float>(i)));
  f.scheduler.run([&](int i) { EXPECT_TRUE(f.groups[i]->allreduce_mean(buffers[i], f.codec, 1.0)->wait().status.is_ok()); });
  EXPECT_TRUE(at::equal(buffers[0], at::full({n}, 3.5f)));
  const uint64_t one_buffer = 4 * n + k * compression::kMinFrameHeaderBytes;
  EXPECT_GT(f.hub.peak_message_bytes(), 0u);
  EXPECT_LE(f.hub.peak_message_bytes(), 2 * one_buffer);
}

TEST(InprocGroup, WeightedMean) {
  Fixture f(3);
  std::vector<at::Tensor> b = {at::full({10}, 1.0), at::full({10}, 2.0), at::full({10}, 4.0)};
  const double w[] = {1, 1, 2};
  f.scheduler.run([&](int i) {
    auto r = f.groups[i]->allreduce_mean(b[i], f.codec, w[i])->wait();
    EXPECT_DOUBLE_EQ(r.weight_sum, 4.0);
  });
  for (auto& t : b) EXPECT_TRUE(at::allclose(t, at::full({10}, 11.0 / 4)));
}

// The in-process group checks its arguments as the networked groups do (group.h
// check_allreduce): a caller's bug is refused at once, before anything is posted.
TEST(InprocGroup, RefusesTheArgumentsTheNetworkedGroupsRefuse) {
  Fixture f(1);
  Group& g = *f.groups[0];
  const at::Tensor ok = at::ones({4});
  for (double w : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_THROW(g.allreduce_mean(ok.clone(), f.codec, w), c10::Error) << "weight " << w;
  }
  EXPECT_THROW(g.allreduce_mean(at::ones({4}, at::kDouble), f.codec), c10::Error);
  EXPECT_THROW(g.allreduce_mean(at::ones({4, 2}).t(), f.codec), c10::Error);  // not contiguous
  EXPECT_THROW(g.allreduce_mean(ok.clone(), f.codec, 1.0, at::ones({3})), c10::Error);
  EXPECT_THROW(g.allreduce_mean(ok.clone(), f.codec, 1.0, at::ones({4}, at::kDouble)), c10::Error);
  EXPECT_THROW(g.broadcast(0, at::Tensor(), f.codec), c10::Error);
}

TEST(InprocGroup, BroadcastFromRoot) {
  Fixture f(4);
  std::vector<at::Tensor> b;
  for (int i = 0; i < 4; ++i) b.push_back(at::full({5}, static_cast<double>(i)));
  f.scheduler.run([&](int i) { f.groups[i]->broadcast(2, b[i], f.codec)->wait(); });
  for (auto& t : b) EXPECT_TRUE(at::equal(t, at::full({5}, 2.0)));
  const uint64_t frame = 5u * 4 + compression::kMinFrameHeaderBytes;
  EXPECT_EQ(f.groups[2]->bytes().sent, 3u * frame);
  EXPECT_EQ(f.groups[0]->bytes().received, frame);
}

TEST(InprocGroup, CollectivesMatchInOrderAcrossCalls) {
  Fixture f(2);
  std::vector<at::Tensor> a = {at::full({3}, 1.0), at::full({3}, 3.0)};
  std::vector<at::Tensor> b = {at::full({3}, 10.0), at::full({3}, 30.0)};
  f.scheduler.run([&](int i) {
    auto h1 = f.groups[i]->allreduce_mean(a[i], f.codec, 1.0);
    auto h2 = f.groups[i]->allreduce_mean(b[i], f.codec, 1.0);
    h2->wait();
    h1->wait();
  });
  EXPECT_TRUE(at::allclose(a[0], at::full({3}, 2.0)));
  EXPECT_TRUE(at::allclose(b[1], at::full({3}, 20.0)));
}

class EchoServer final : public OuterServer {
 public:
  void on_push(int, uint64_t tag, const at::Tensor& payload, double weight) override {
    sum = sum.defined() ? sum + payload * weight : payload * weight;
    ++pushes;
  }
  std::optional<at::Tensor> on_pull(int, uint64_t) override {
    if (pushes < 3) return std::nullopt;
    return sum;
  }
  at::Tensor sum;
  int pushes = 0;
};

TEST(InprocGroup, PullWaitsForTheServer) {
  Fixture f(3);
  EchoServer server;
  f.hub.set_server(&server);
  std::vector<at::Tensor> out(3);
  f.scheduler.run([&](int i) {
    f.groups[i]->push(0, at::full({4}, static_cast<double>(i + 1)), f.codec, 1.0)->wait();
    out[i] = at::zeros({4});
    f.groups[i]->pull(0, out[i], f.codec)->wait();
  });
  for (auto& t : out) EXPECT_TRUE(at::allclose(t, at::full({4}, 6.0)));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(f.groups[i]->bytes().sent, 16u + compression::kMinFrameHeaderBytes);
    EXPECT_EQ(f.groups[i]->bytes().received, 16u + compression::kMinFrameHeaderBytes);
  }
}

}  // namespace
}  // namespace atl::transport

namespace atl::transport {
namespace {

compression::Pipeline lossy(compression::StageId id) {
  compression::StageConfig st;
  st.id = id;
  st.block = 64;
  return compression::Pipeline::make({st}).value();
}

// Lossy codecs: each contribution is quantised once, summed in fp32 by the chunk owner,
// and the owner's mean quantised once more; everyone ends bitwise equal; same bytes as a
// ring; `transmitted` reports exactly what the others decoded.
TEST(InprocGroup, LossyAllreduceAccumulatesInFp32AndAgreesBitwise) {
  const int k = 4;
  const int64_t n = 4099;
  Fixture f(k);
  const compression::Pipeline int8 = lossy(compression::StageId::kInt8);
  at::manual_seed(9);
  std::vector<at::Tensor> inputs, buffers, transmitted;
  for (int i = 0; i < k; ++i) {
    inputs.push_back(at::randn({n}));
    buffers.push_back(inputs.back().clone());
    transmitted.push_back(at::full({n}, 12345.0));
  }
  f.scheduler.run([&](int i) { f.groups[i]->allreduce_mean(buffers[i], int8, 1.0, transmitted[i])->wait(); });
  at::Tensor exact = at::stack(inputs).mean(0);
  const double rel = ((buffers[0] - exact).norm() / exact.norm()).item<double>();
  EXPECT_LT(rel, 0.02);   // two int8 quantisations
  EXPECT_GT(rel, 0.0);    // and it really was lossy
  for (int i = 1; i < k; ++i) EXPECT_TRUE(at::equal(buffers[i], buffers[0]));
  for (int i = 0; i < k; ++i) {
    // what the others decoded is close to the input, not equal, and nowhere left unset
    EXPECT_FALSE(at::equal(transmitted[i], inputs[i]));
    EXPECT_LT(((transmitted[i] - inputs[i]).abs().max()).item<double>(), 0.1);
  }
  // the mean of what was transmitted, re-quantised, is the result: recompute chunk 0's
  // owner view: member 0 keeps its own chunk exact, so its transmitted chunk 0 == input.
  auto [b, e] = ring::chunk_bounds(n, k, 0);
  EXPECT_TRUE(at::equal(transmitted[0].narrow(0, b, e - b), inputs[0].narrow(0, b, e - b)));
  uint64_t total = 0, raw = 0;
  for (int i = 0; i < k; ++i) {
    total += f.groups[i]->bytes().sent;
    raw += f.groups[i]->bytes().raw_sent;
  }
  EXPECT_EQ(raw, 2u * (k - 1) * n * 4);  // the ring's volume in fp32 terms
  EXPECT_LT(total * 3, raw);             // int8 with scales: well under a third of fp32
}

// Star (transport/star.h): each contribution encoded once with its member's seed and decoded
// by the server, weighted and summed in member-id order, the mean encoded once with the
// collective's seed; every member decodes that same frame. Checked against that recipe
// written out here, for a lossy codec with uneven weights, then the lossless fp32 sum order.
TEST(InprocGroup, StarReducesAtTheServerInMemberOrder) {
  const int k = 3;
  const int64_t n = 1001;
  const compression::Pipeline int8 = lossy(compression::StageId::kInt8);
  const std::vector<double> weights = {0.5, 2.0, 1.25};
  at::manual_seed(4);
  std::vector<at::Tensor> inputs, buffers, transmitted;
  for (int i = 0; i < k; ++i) {
    inputs.push_back(at::randn({n}));
    buffers.push_back(inputs.back().clone());
    transmitted.push_back(at::zeros({n}));
  }
  Fixture f(k);
  f.hub.set_star(true);
  f.scheduler.run([&](int i) {
    f.groups[i]->allreduce_mean(at::zeros({1}), int8, 1.0)->wait();  // seeds depend on seq
    auto r = f.groups[i]->allreduce_mean(buffers[i], int8, weights[i], transmitted[i])->wait();
    EXPECT_TRUE(r.status.is_ok());
    EXPECT_EQ(r.contributors, (std::vector<int>{0, 1, 2}));
    EXPECT_DOUBLE_EQ(r.weight_sum, 3.75);
  });
  std::vector<at::Tensor> decoded;
  for (int i = 0; i < k; ++i) {
    std::vector<uint8_t> frame;
    int8.encode(inputs[i], frame, star::contribution_seed(1, i));
    decoded.push_back(at::empty({n}));
    ASSERT_TRUE(int8.decode(frame.data(), frame.size(), decoded.back()).is_ok());
    EXPECT_TRUE(at::equal(transmitted[i], decoded.back())) << i;
  }
  at::Tensor sum = at::zeros({n});
  for (int i = 0; i < k; ++i) sum.add_(decoded[i] * weights[i]);
  sum.div_(3.75);
  std::vector<uint8_t> mean_frame;
  int8.encode(sum, mean_frame, star::mean_seed(1));
  at::Tensor expected = at::empty({n});
  ASSERT_TRUE(int8.decode(mean_frame.data(), mean_frame.size(), expected).is_ok());
  for (int i = 0; i < k; ++i) EXPECT_TRUE(at::equal(buffers[i], expected)) << i;

  // Lossless: ((x0 + x1) + x2) / 3, in that order, everywhere.
  Fixture g(k);
  g.hub.set_star(true);
  for (int i = 0; i < k; ++i) buffers[i] = inputs[i].clone();
  g.scheduler.run([&](int i) { g.groups[i]->allreduce_mean(buffers[i], g.codec, 1.0)->wait(); });
  const at::Tensor fp32 = ((at::zeros({n}) + inputs[0] + inputs[1]) + inputs[2]) / 3.0;
  for (int i = 0; i < k; ++i) EXPECT_TRUE(at::equal(buffers[i], fp32)) << i;
  for (int i = 0; i < k; ++i) {  // each member sends its buffer and receives the mean: one frame each way
    const uint64_t frame = compression::kMinFrameHeaderBytes + 4 * n;
    EXPECT_EQ(g.groups[i]->bytes().sent, frame);
    EXPECT_EQ(g.groups[i]->bytes().received, frame);
  }
}

}  // namespace
}  // namespace atl::transport
