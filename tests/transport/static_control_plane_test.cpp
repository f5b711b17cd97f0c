// StaticControlPlane: a fixed membership, and the in-process store / server / sink shared by
// the planes of one StaticCluster, with islands as threads.
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "tests/transport/static_control_plane.h"
#include "tests/transport/zmq_test_util.h"

namespace atl::transport::testing {
namespace {

TEST(StaticControlPlane, FixedMembershipSharedStoreServerAndSink) {
  MeanServer server(3);
  RecordSink sink;
  StaticClusterOptions o;
  o.peers = {{2, "tcp://h:3", ""}, {0, "tcp://h:1", ""}, {1, "tcp://h:2", ""}};
  o.server = &server;
  o.record_sink = sink.callback();
  StaticCluster cluster(o);
  EXPECT_THROW(cluster.plane(7), std::out_of_range);

  const compression::Pipeline fp32;
  std::vector<std::future<std::vector<float>>> results;
  for (int id = 0; id < 3; ++id) {
    results.push_back(std::async(std::launch::async, [&, id] {
      std::unique_ptr<ControlPlane> plane = cluster.plane(id);
      EXPECT_EQ(plane->self(), id);
      EXPECT_EQ(ids(plane->membership()), (std::vector<int>{0, 1, 2}));
      EXPECT_EQ(plane->membership().members[id].endpoint, "tcp://h:" + std::to_string(id + 1));
      // Island 2 sets the key late: 0 and 1 wait for it.
      if (id == 2) {
        std::this_thread::sleep_for(milliseconds(50));
        EXPECT_TRUE(plane->store_set("ready", {42}).is_ok());
      }
      StatusOr<std::vector<uint8_t>> ready = plane->store_get("ready", in_ms(5000));
      EXPECT_TRUE(ready.is_ok() && *ready == std::vector<uint8_t>{42});
      EXPECT_TRUE(plane->push(1, encode_tensor(fp32, torch::full({2}, float(id))), 1.0).is_ok());
      StatusOr<std::vector<uint8_t>> mean = plane->pull(1, in_ms(5000));
      EXPECT_TRUE(mean.is_ok()) << mean.status().to_string();
      plane->record("{\"island\":" + std::to_string(id) + "}");
      at::Tensor t = decode_tensor(fp32, *mean, 2);
      return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + 2);
    }));
  }
  for (auto& r : results) EXPECT_EQ(r.get(), (std::vector<float>{1.f, 1.f}));  // mean of 0, 1, 2
  EXPECT_EQ(sink.lines().size(), 3u);

  std::unique_ptr<ControlPlane> p = cluster.plane(0);
  EXPECT_EQ(p->store_get("absent", in_ms(50)).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(p->pull(9, in_ms(50)).status().code(), StatusCode::kTimeout);
  EXPECT_EQ(p->wait_for_change(5, std::nullopt).epoch, 0u);  // differs: returns at once
  const auto t0 = Clock::now();
  EXPECT_EQ(p->wait_for_change(0, in_ms(60)).epoch, 0u);
  EXPECT_GE(ms_since(t0), 50);
  p->suspect(1);
  EXPECT_EQ(p->membership().members.size(), 3u);
  std::vector<uint8_t> bad = encode_tensor(fp32, torch::ones({2}));
  bad[0] = 'X';
  EXPECT_EQ(p->push(2, bad, 1.0).code(), StatusCode::kCorrupt);
}

TEST(StaticControlPlane, WithoutServerPushPullAreUnavailable) {
  StaticClusterOptions o;
  o.peers = {{0, "", ""}};
  StaticCluster cluster(o);
  auto p = cluster.plane(0);
  EXPECT_EQ(p->push(1, encode_tensor({}, torch::ones({1})), 1.0).code(), StatusCode::kUnavailable);
  EXPECT_EQ(p->pull(1, in_ms(10)).status().code(), StatusCode::kUnavailable);
  p->record("{}");  // no sink: dropped
  StaticClusterOptions dup;
  dup.peers = {{1, "", ""}, {1, "", ""}};
  EXPECT_THROW(StaticCluster{dup}, std::invalid_argument);
}

}  // namespace
}  // namespace atl::transport::testing
