// The in-process group: ring all-reduce results, bitwise agreement, weights, byte counts,
// broadcast and the server role. Many islands as threads under the scheduler.
#include "transport/inproc/inproc_group.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "transport/ring.h"

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
    EXPECT_EQ(total, 2u * (k - 1) * 1003 * 4);
  }
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

TEST(InprocGroup, BroadcastFromRoot) {
  Fixture f(4);
  std::vector<at::Tensor> b;
  for (int i = 0; i < 4; ++i) b.push_back(at::full({5}, static_cast<double>(i)));
  f.scheduler.run([&](int i) { f.groups[i]->broadcast(2, b[i], f.codec)->wait(); });
  for (auto& t : b) EXPECT_TRUE(at::equal(t, at::full({5}, 2.0)));
  EXPECT_EQ(f.groups[2]->bytes().sent, 3u * 5 * 4);
  EXPECT_EQ(f.groups[0]->bytes().received, 5u * 4);
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
    EXPECT_EQ(f.groups[i]->bytes().sent, 16u);
    EXPECT_EQ(f.groups[i]->bytes().received, 16u);
  }
}

}  // namespace
}  // namespace atl::transport
