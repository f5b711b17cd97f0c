// The network model and the simulator's virtual clock: transfer times against hand
// calculations, sharing of access links, losses, cuts, and collectives on the in-process
// transport advancing each island's clock to the collective's completion.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "compression/frame.h"
#include "transport/inproc/inproc_group.h"
#include "transport/network_model.h"
#include "tests/transport/flat_network.h"

namespace atl::transport {
namespace {

TEST(NetworkModel, OneTransferMatchesHandCalculation) {
  // 100 MB at 100 Mbit/s with 50 ms latency: 8 s + 0.05 s.
  NetworkModel m(flat(2, 100, 50));
  std::mt19937_64 rng(1);
  EXPECT_DOUBLE_EQ(m.transfer_time({0, 1, 100'000'000}, rng), 8.05);
  EXPECT_DOUBLE_EQ(m.phase_time({{0, 1, 100'000'000}}, rng), 8.05);
}

TEST(NetworkModel, AsymmetricLinksAndRegionCaps) {
  NetworkSpec s = flat(2, 100, 10);
  s.up_bps[0] = 10e6;  // island 0 uploads at 10 Mbit/s
  NetworkModel m(s);
  std::mt19937_64 rng(1);
  EXPECT_DOUBLE_EQ(m.transfer_time({0, 1, 1'000'000}, rng), 0.01 + 0.8);
  EXPECT_DOUBLE_EQ(m.transfer_time({1, 0, 1'000'000}, rng), 0.01 + 0.08);

  NetworkSpec r = flat(2, 1000, 1);
  r.region_names = {"us", "eu"};
  r.island_region = {0, 1};
  PathSpec local, wan;
  local.latency_s = 0.001;
  wan.latency_s = 0.04;
  wan.cap_bps = 100e6;
  r.paths = {{local, wan}, {wan, local}};
  NetworkModel w(r);
  EXPECT_DOUBLE_EQ(w.rtt_s(0, 1), 0.08);
  EXPECT_DOUBLE_EQ(w.transfer_time({0, 1, 1'000'000}, rng), 0.04 + 0.08);  // capped path
}

TEST(NetworkModel, ConcurrentTransfersShareAnUplink) {
  NetworkModel m(flat(3, 100, 0));
  std::mt19937_64 rng(1);
  // Island 0 sends 1 MB to each of two peers at once: 2 MB through its 100 Mbit/s uplink.
  EXPECT_DOUBLE_EQ(m.phase_time({{0, 1, 1'000'000}, {0, 2, 1'000'000}}, rng), 0.16);
  // A ring step: everyone sends to its neighbour; no link carries more than 1 MB.
  EXPECT_DOUBLE_EQ(m.phase_time({{0, 1, 1'000'000}, {1, 2, 1'000'000}, {2, 0, 1'000'000}}, rng), 0.08);
}

TEST(NetworkModel, LossCostsRoundTripsOnAverageAndIsSeeded) {
  NetworkSpec s = flat(2, 1000, 20);
  s.paths[0][0].loss = 0.01;
  NetworkModel m(s);
  const uint64_t bytes = 1'460'000;  // 1000 packets: 10 losses expected, 40 ms each
  const double clean = 0.02 + 8.0 * bytes / 1e9;
  std::mt19937_64 a(7), b(7);
  double sum = 0;
  const int n = 2000;
  for (int i = 0; i < n; ++i) {
    const double t = m.transfer_time({0, 1, bytes}, a);
    EXPECT_EQ(t, m.transfer_time({0, 1, bytes}, b));  // same seed, same draws
    sum += t - clean;
  }
  EXPECT_NEAR(sum / n, 10 * 0.04, 0.02);
}

TEST(NetworkModel, CutsDelayUntilHealed) {
  NetworkSpec s = flat(2, 1000, 1);
  s.region_names = {"a", "b"};
  s.island_region = {0, 1};
  s.paths = {{s.paths[0][0], s.paths[0][0]}, {s.paths[0][0], s.paths[0][0]}};
  s.partitions = {{0, 1, 10, 20}, {1, 0, 20, 25}};
  NetworkModel m(s);
  EXPECT_EQ(m.connected_at(0, 1, 5), 5);
  EXPECT_EQ(m.connected_at(0, 1, 12), 25);  // two back-to-back cuts
  EXPECT_EQ(m.connected_at(0, 0, 12), 12);  // same region: unaffected
}

struct Clocked {
  Clocked(int k, double mbps, double latency_ms) : scheduler(k), hub(k, scheduler), model(flat(k, mbps, latency_ms)) {
    hub.set_network(&model, 1, 2.0);
    for (int i = 0; i < k; ++i) groups.push_back(hub.make_group(i));
  }
  Scheduler scheduler;
  InprocHub hub;
  NetworkModel model;
  std::vector<std::unique_ptr<Group>> groups;
  compression::Pipeline codec;
};

TEST(VirtualClock, RingAllreduceCostsItsStepsAfterTheLastPost) {
  const int k = 4;
  const int64_t n = 1000 * k;
  Clocked f(k, 100, 25);
  std::vector<at::Tensor> b;
  for (int i = 0; i < k; ++i) b.push_back(at::full({n}, static_cast<float>(i)));
  const double posts[] = {1.0, 3.0, 2.0, 0.5};  // island 1 is the last to post
  std::vector<double> end(k);
  f.scheduler.run([&](int i) {
    f.scheduler.advance(i, posts[i]);
    f.groups[i]->allreduce_mean(b[i], f.codec, 1.0)->wait();
    end[i] = f.scheduler.time(i);
  });
  // 2(W-1) ring steps, each one chunk (header + n/W floats) per member, one hop latency.
  const double chunk = compression::kMinFrameHeaderBytes + 4.0 * n / k;
  const double expected = 3.0 + 2 * (k - 1) * (0.025 + chunk * 8 / 100e6);
  for (int i = 0; i < k; ++i) {
    EXPECT_NEAR(end[i], expected, 1e-9) << i;
    const auto w = f.hub.wait_time(i);
    EXPECT_NEAR(w.idle_s, 3.0 - posts[i], 1e-9) << i;  // waiting for island 1
    EXPECT_NEAR(w.comm_s, expected - 3.0, 1e-9) << i;
  }
}

// transport.collective star: two phases through the server's link. Its 200 Mbit/s downlink
// carries the W contributions at once, then its uplink the W copies of the mean.
TEST(VirtualClock, StarAllreduceCostsTwoPhasesThroughTheServer) {
  const int k = 4;
  const int64_t n = 10000;
  NetworkSpec spec = flat(k, 100, 25);
  spec.server_up_bps = 200e6;
  spec.server_down_bps = 200e6;
  Scheduler scheduler(k);
  InprocHub hub(k, scheduler);
  NetworkModel model(spec);
  hub.set_network(&model, 1, 2.0);
  hub.set_star(true);
  std::vector<std::unique_ptr<Group>> groups;
  for (int i = 0; i < k; ++i) groups.push_back(hub.make_group(i));
  std::vector<at::Tensor> b;
  for (int i = 0; i < k; ++i) b.push_back(at::full({n}, static_cast<float>(i)));
  const double posts[] = {1.0, 3.0, 2.0, 0.5};
  std::vector<double> end(k);
  const compression::Pipeline codec;
  scheduler.run([&](int i) {
    scheduler.advance(i, posts[i]);
    groups[i]->allreduce_mean(b[i], codec, 1.0)->wait();
    end[i] = scheduler.time(i);
  });
  const double frame = compression::kMinFrameHeaderBytes + 4.0 * n;
  const double phase = 0.025 + k * frame * 8 / 200e6;  // the server's link, not a member's 100 Mbit/s
  for (int i = 0; i < k; ++i) {
    EXPECT_NEAR(end[i], 3.0 + 2 * phase, 1e-9) << i;
    EXPECT_TRUE(at::equal(b[i], at::full({n}, 1.5))) << i;
  }
}

TEST(VirtualClock, AsyncHandleIsDoneOnlyOnceTheClockPassesCompletion) {
  Clocked f(2, 8, 100);  // 1 MB/s, 100 ms
  std::vector<at::Tensor> b = {at::zeros({250'000}), at::ones({250'000})};  // 1 MB each
  std::vector<int> polls_before_done(2, 0);
  f.scheduler.run([&](int i) {
    auto h = f.groups[i]->allreduce_mean(b[i], f.codec, 1.0);
    // Overlap: keep "computing" 10 ms steps until the exchange has landed.
    while (!h->done()) {
      ++polls_before_done[i];
      f.scheduler.advance(i, f.scheduler.time(i) + 0.01);
    }
    h->wait();
    EXPECT_EQ(f.hub.wait_time(i).comm_s, 0.0);  // fully hidden behind compute
  });
  // Two ring steps of ~0.5 MB (0.5 s) + 0.1 s latency each: about 1.2 s of overlap.
  EXPECT_GE(polls_before_done[0], 115);
  EXPECT_LE(polls_before_done[0], 125);
}

// Simulator checkpoints (docs/checkpoints.md "Exchanges in flight across a checkpoint"): an
// all-reduce every member has posted but none has collected is saved in the hub's snapshot
// (settled), restored into a fresh hub, and handed back by Group::resume_in_flight(); its
// wait ends at the same virtual time with the same idle/comm split as without the stop.
TEST(VirtualClock, CollectiveInFlightSurvivesSnapshotAndRestore) {
  const int k = 3;
  const double posts[] = {1.0, 2.5, 2.0};
  auto inputs = [&] {
    std::vector<at::Tensor> b;
    for (int i = 0; i < k; ++i) b.push_back(at::full({30'000}, static_cast<float>(i + 1)));
    return b;
  };
  // Uninterrupted: post, compute 0.1 s, collect.
  Clocked ref(k, 100, 25);
  std::vector<at::Tensor> rb = inputs();
  std::vector<double> end(k);
  std::vector<CollectiveResult> results(k);
  ref.scheduler.run([&](int i) {
    ref.scheduler.advance(i, posts[i]);
    auto h = ref.groups[i]->allreduce_mean(rb[i], ref.codec, 1.0);
    ref.scheduler.advance(i, posts[i] + 0.1);
    results[i] = h->wait();
    end[i] = ref.scheduler.time(i);
  });
  // Stopped after every member posted: the hub's snapshot holds the collective.
  Clocked a(k, 100, 25);
  std::vector<at::Tensor> ab = inputs();
  std::vector<std::unique_ptr<Handle>> handles(k);
  int posted = 0;
  a.scheduler.run([&](int i) {
    a.scheduler.advance(i, posts[i]);
    handles[i] = a.groups[i]->allreduce_mean(ab[i], a.codec, 1.0);
    ++posted;
    a.scheduler.block_until(i, [&] { return posted == k; }, "the others to post");
  });
  EXPECT_FALSE(a.hub.quiescent());
  ASSERT_TRUE(a.hub.settled());
  const InprocHub::Snapshot snap = a.hub.snapshot();
  ASSERT_EQ(snap.settled.size(), 1u);
  EXPECT_EQ(snap.settled[0].holders.size(), static_cast<size_t>(k));
  EXPECT_EQ(snap.settled[0].holders[1].second, 2.5);
  for (int i = 0; i < k; ++i) EXPECT_TRUE(at::equal(ab[i], rb[i])) << i;  // the mean is in place
  // Resumed in a fresh hub: the groups are made after restore().
  Scheduler scheduler(k);
  InprocHub hub(k, scheduler);
  NetworkModel model(flat(k, 100, 25));
  hub.set_network(&model, 1, 2.0);
  hub.restore(snap);
  std::vector<std::unique_ptr<Group>> groups;
  for (int i = 0; i < k; ++i) groups.push_back(hub.make_group(i));
  scheduler.run([&](int i) {
    scheduler.set_time(i, posts[i]);
    auto h = groups[i]->resume_in_flight();
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(groups[i]->resume_in_flight(), nullptr);  // handed back once
    scheduler.advance(i, posts[i] + 0.1);
    const CollectiveResult r = h->wait();
    EXPECT_EQ(r.contributors, results[i].contributors);
    EXPECT_EQ(r.weight_sum, results[i].weight_sum);
    EXPECT_EQ(scheduler.time(i), end[i]) << i;
    EXPECT_EQ(hub.wait_time(i).idle_s, ref.hub.wait_time(i).idle_s) << i;
    EXPECT_EQ(hub.wait_time(i).comm_s, ref.hub.wait_time(i).comm_s) << i;
  });
  EXPECT_TRUE(hub.quiescent());  // collected by every holder
  handles.clear();
}

TEST(VirtualClock, LostMemberIsDroppedAfterDetection) {
  Clocked f(3, 1000, 1);
  std::vector<at::Tensor> b = {at::full({30}, 1.0), at::full({30}, 2.0), at::full({30}, 6.0)};
  CollectiveResult r0;
  f.scheduler.run([&](int i) {
    if (i == 2) {  // dies at t = 5 without contributing
      f.scheduler.advance(i, 5.0);
      f.hub.remove_member(2, 5.0);
      return;
    }
    auto r = f.groups[i]->allreduce_mean(b[i], f.codec, 1.0)->wait();
    if (i == 0) r0 = r;
    EXPECT_GE(f.scheduler.time(i), 7.0);  // 5 s + 2 s detection
  });
  EXPECT_EQ(r0.contributors, (std::vector<int>{0, 1}));
  EXPECT_TRUE(at::allclose(b[0], at::full({30}, 1.5)));
  EXPECT_EQ(f.groups[0]->view().members, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace atl::transport
