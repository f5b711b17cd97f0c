// GlooGroup over gloo's TCP transport on loopback, islands as threads: every result is
// compared bitwise with the in-process reference (InprocHub) for the same inputs; weights,
// broadcast, several collectives in flight, a late joiner, push/pull, byte counts, a
// sub-group's own mesh; the rendezvous through a real coordinator, and an island that dies
// mid-collective (the survivors end with the same values and contributors, and go on among
// themselves).
#include <gtest/gtest.h>

#include <map>
#include <optional>

#include "compression/frame.h"
#include "tests/transport/zmq_group_test_util.h"
#include "tests/transport/zmq_test_util.h"
#include "tests/transport/gloo_cluster.h"
#include "transport/gloo/gloo_group.h"
#include "transport/gloo/mesh.h"

namespace atl::transport::testing {
namespace {

std::vector<CollectiveResult> gloo_allreduce(GlooCluster& c, std::vector<at::Tensor>& buffers,
                                             const compression::Pipeline& codec, const std::vector<double>& weights,
                                             std::vector<at::Tensor>* transmitted = nullptr) {
  std::vector<CollectiveResult> results(c.size());
  c.run([&](int i) {
    at::Tensor t = transmitted ? (*transmitted)[i] : at::Tensor();
    results[i] = c.groups[i]->allreduce_mean(buffers[i], codec, weights[i], t)->wait(in_seconds(30));
  });
  return results;
}

TEST(GlooGroup, AllreduceIsBitwiseTheInprocResult) {
  const std::vector<std::pair<std::string, compression::Pipeline>> codecs = {
      {"fp32", compression::Pipeline()},
      {"zstd", make_pipeline(compression::StageId::kZstd)},
      {"int8", make_pipeline(compression::StageId::kInt8)}};
  GlooGroupOptions o;
  o.chunk_bytes = 4096;  // several ring pieces per chunk for the larger buffers
  for (int w : {1, 2, 3, 4}) {
    GlooCluster c(w, o);
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
        std::vector<CollectiveResult> results = gloo_allreduce(c, got, codec, ones, &got_tx);
        for (int i = 0; i < w; ++i) {
          EXPECT_TRUE(results[i].status.is_ok()) << results[i].status.to_string();
          EXPECT_EQ(results[i].contributors, iota_ids(w));
          EXPECT_DOUBLE_EQ(results[i].weight_sum, w);
          EXPECT_TRUE(at::equal(got[i], ref[i])) << "island " << i;
          EXPECT_TRUE(at::equal(got_tx[i], ref_tx[i])) << "transmitted of island " << i;
        }
      }
    }
    for (auto& g : c.groups) EXPECT_EQ(g->meshes_built(), 1u);  // one rendezvous, then reused
  }
}

TEST(GlooGroup, WeightedMeansMatchInproc) {
  GlooCluster c(3);
  const std::vector<std::vector<double>> weight_sets = {{1, 1, 2}, {0.3, 0.3, 0.3}, {0.5, 2.5, 1.25}};
  uint64_t seq = 0;
  for (const auto& weights : weight_sets) {
    for (const auto& codec : {compression::Pipeline(), make_pipeline(compression::StageId::kInt8)}) {
      const std::vector<at::Tensor> inputs = random_inputs(3, 1001, 7);
      std::vector<at::Tensor> ref = clones(inputs), got = clones(inputs);
      inproc_allreduce(ref, codec, weights, nullptr, seq++);
      std::vector<CollectiveResult> r = gloo_allreduce(c, got, codec, weights);
      for (int i = 0; i < 3; ++i) {
        EXPECT_DOUBLE_EQ(r[i].weight_sum, weights[0] + weights[1] + weights[2]);
        EXPECT_TRUE(at::equal(got[i], ref[i])) << codec.describe() << " island " << i;
      }
    }
  }
}

TEST(GlooGroup, BroadcastFromRootMatchesInproc) {
  const int w = 4, root = 2;
  GlooCluster c(w);
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

// Five collectives in flight per island, bitwise the in-process results.
TEST(GlooGroup, SeveralCollectivesInFlight) {
  GlooCluster c(3);
  expect_several_collectives_in_flight_match_inproc(c);
}

// Members that issued different collectives (sizes) complete with kInternal, unchanged.
TEST(GlooGroup, MismatchedCollectivesFailCleanly) {
  GlooCluster c(2);
  std::vector<at::Tensor> b = {at::full({10}, 1.0), at::full({11}, 2.0)};
  c.run([&](int i) {
    CollectiveResult r = c.groups[i]->allreduce_mean(b[i], compression::Pipeline(), 1.0)->wait(in_seconds(30));
    EXPECT_EQ(r.status.code(), StatusCode::kInternal) << r.status.to_string();
  });
  EXPECT_TRUE(at::equal(b[0], at::full({10}, 1.0)));
  EXPECT_TRUE(at::equal(b[1], at::full({11}, 2.0)));
}

// An island that joined late (first_seq = 1) sits out collective #0, which island 0
// completes alone; from #1 on it takes part.
TEST(GlooGroup, LateJoinerSitsOutEarlierCollectives) {
  StaticClusterOptions so;
  so.peers = loopback_peers(2);
  StaticCluster cluster(so);
  auto p0 = cluster.plane(0), p1 = cluster.plane(1);
  GlooGroupOptions late;
  late.first_seq = 1;
  GlooGroup g0(*p0), g1(*p1, late);
  at::Tensor alone = at::full({100}, 3.0);
  std::vector<at::Tensor> b = {at::full({100}, 1.0), at::full({100}, 2.0)};
  std::vector<CollectiveResult> r(2);
  CollectiveResult r0;
  run_islands(2, [&](int i) {
    if (i == 0) {
      r0 = g0.allreduce_mean(alone, compression::Pipeline(), 1.0)->wait(in_seconds(30));
      r[0] = g0.allreduce_mean(b[0], compression::Pipeline(), 1.0)->wait(in_seconds(30));
    } else {
      r[1] = g1.allreduce_mean(b[1], compression::Pipeline(), 1.0)->wait(in_seconds(30));
    }
  });
  EXPECT_TRUE(r0.status.is_ok()) << r0.status.to_string();
  EXPECT_EQ(r0.contributors, std::vector<int>{0});
  EXPECT_TRUE(at::equal(alone, at::full({100}, 3.0)));
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(r[i].status.is_ok()) << r[i].status.to_string();
    EXPECT_EQ(r[i].contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(at::equal(b[i], at::full({100}, 1.5)));
  }
}

// A late joiner in a sub-group (GlooGroupOptions::first_seqs): islands 0 and 1 run sub-group
// 5's collectives #0 and #1 while island 2, whose sub-group starts at #2, waits in #2 (the
// mesh's rendezvous states leave it out of #0 and #1); #2 runs among all three.
TEST(GlooGroup, LateJoinerTakesPartInASubgroupFromItsFirstSeq) {
  StaticClusterOptions so;
  so.peers = loopback_peers(3);
  StaticCluster cluster(so);
  auto p0 = cluster.plane(0), p1 = cluster.plane(1), p2 = cluster.plane(2);
  GlooGroupOptions late;
  late.first_seqs = {{5, 2}};
  GlooGroup g0(*p0), g1(*p1), g2(*p2, late);
  // A sub-group named in first_seqs and not made yet is listed (a checkpoint keeps its place).
  EXPECT_EQ(g2.next_seqs(), (std::map<uint32_t, uint64_t>{{0, 0}, {5, 2}}));
  const std::vector<int> ids = {0, 1, 2};
  std::vector<std::unique_ptr<Group>> subs;
  for (GlooGroup* g : {&g0, &g1, &g2}) subs.push_back(g->subgroup(5, ids));
  std::vector<std::vector<at::Tensor>> b(3);
  std::vector<std::vector<CollectiveResult>> r(3);
  run_islands(3, [&](int i) {
    for (int k = i == 2 ? 2 : 0; k < 3; ++k) {
      b[i].push_back(at::full({50}, double(i + 1 + k)));
      r[i].push_back(subs[i]->allreduce_mean(b[i].back(), compression::Pipeline(), 1.0)->wait(in_seconds(30)));
    }
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(r[i].size(), 3u);
    for (int k = 0; k < 2; ++k) {
      EXPECT_TRUE(r[i][k].status.is_ok()) << r[i][k].status.to_string();
      EXPECT_EQ(r[i][k].contributors, (std::vector<int>{0, 1})) << "island " << i << ", collective #" << k;
      EXPECT_TRUE(at::equal(b[i][k], at::full({50}, 1.5 + k))) << "island " << i << ", collective #" << k;
    }
  }
  for (int i = 0; i < 3; ++i) {
    const CollectiveResult& last = r[i].back();
    EXPECT_TRUE(last.status.is_ok()) << last.status.to_string();
    EXPECT_EQ(last.contributors, (std::vector<int>{0, 1, 2})) << "island " << i;
    EXPECT_TRUE(at::equal(b[i].back(), at::full({50}, 4.0))) << "island " << i;
  }
  const std::map<uint32_t, uint64_t> next = {{0, 0}, {5, 3}};
  EXPECT_EQ(g0.next_seqs(), next);
  EXPECT_EQ(g2.next_seqs(), next);
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

TEST(GlooGroup, PushAndPullGoThroughTheControlPlane) {
  SumServer server;
  GlooCluster c(2, {}, true, &server);
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

// Per island, W = 2, n = 1000 raw fp32 (two chunks of 500, one piece each): one HELLO
// (40 bytes behind GlooWire's 8-byte tag and length) and two ring messages (2000 bytes) each
// way; every message costs gloo's 48-byte data preamble and a ready notification from each end.
TEST(GlooGroup, ByteCountersCountPayloadsAndGlooFraming) {
  GlooCluster c(2);
  std::vector<at::Tensor> b = random_inputs(2, 1000, 1);
  gloo_allreduce(c, b, compression::Pipeline(), {1, 1});
  const uint64_t p = gloo_mesh::kGlooPreambleBytes;
  const uint64_t want = (8 + 40 + 3 * p) + 2 * (2000 + 3 * p);
  for (int i = 0; i < 2; ++i) {
    const ByteCounters got = c.groups[i]->bytes();
    EXPECT_EQ(got.sent, want) << "island " << i;
    EXPECT_EQ(got.received, want) << "island " << i;
    EXPECT_EQ(got.raw_sent, 4000u) << "island " << i;
  }
}

// Island 2 is cut off (dropped from the membership, as after a partition) while islands 0
// and 1 wait for it in collective #1; they complete #1 between themselves. When it is back
// (a new epoch with all three) and issues #1 late, it takes the result islands 0 and 1
// computed (same values, contributors and status) instead of running #1 again, and #2 then
// runs among all three.
TEST(GlooGroup, IslandBackFromAPartitionTakesTheResultItMissed) {
  auto store = std::make_shared<TestStore>();
  const std::vector<Peer> peers = loopback_peers(3);
  std::vector<std::unique_ptr<TestPlane>> planes;
  for (int i = 0; i < 3; ++i) planes.push_back(std::make_unique<TestPlane>(i, Membership{0, peers}, store));
  GlooGroupOptions go;
  go.poll_ms = 10;
  std::vector<std::unique_ptr<GlooGroup>> groups;
  for (int i = 0; i < 3; ++i) groups.push_back(std::make_unique<GlooGroup>(*planes[i], go));
  const compression::Pipeline fp32;

  std::vector<at::Tensor> b0 = random_inputs(3, 1000, 1), ref0 = clones(b0);
  inproc_allreduce(ref0, fp32, {1, 1, 1});
  run_islands(3, [&](int i) {
    CollectiveResult r = groups[i]->allreduce_mean(b0[i], fp32, 1.0)->wait(in_seconds(20));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_TRUE(at::equal(b0[i], ref0[i]));
  });

  const std::vector<at::Tensor> in1 = random_inputs(3, 1000, 2);
  std::vector<at::Tensor> b1 = clones(in1);
  std::vector<std::unique_ptr<Handle>> h1;
  for (int i = 0; i < 2; ++i) h1.push_back(groups[i]->allreduce_mean(b1[i], fp32, 1.0));
  EXPECT_EQ(h1[0]->wait(in_seconds(0.3)).status.code(), StatusCode::kTimeout);  // waiting for island 2
  const Membership two{1, {peers[0], peers[1]}};
  planes[0]->set(two);
  planes[1]->set(two);
  std::vector<at::Tensor> ref1 = {in1[0].clone(), in1[1].clone()};
  inproc_allreduce(ref1, fp32, {1, 1}, nullptr, 1);
  for (int i = 0; i < 2; ++i) {
    CollectiveResult r = h1[i]->wait(in_seconds(20));
    EXPECT_EQ(r.status.code(), StatusCode::kPeerLost) << r.status.to_string();
    EXPECT_EQ(r.contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(at::equal(b1[i], ref1[i]));
  }

  const Membership all{2, peers};
  for (auto& p : planes) p->set(all);
  std::vector<at::Tensor> b2 = random_inputs(3, 1000, 3), ref2 = clones(b2);
  inproc_allreduce(ref2, fp32, {1, 1, 1}, nullptr, 2);
  run_islands(3, [&](int i) {
    if (i == 2) {
      CollectiveResult late = groups[2]->allreduce_mean(b1[2], fp32, 1.0)->wait(in_seconds(20));
      EXPECT_EQ(late.status.code(), StatusCode::kPeerLost) << late.status.to_string();
      EXPECT_EQ(late.contributors, (std::vector<int>{0, 1}));
      EXPECT_DOUBLE_EQ(late.weight_sum, 2.0);
      EXPECT_TRUE(at::equal(b1[2], ref1[0])) << "island 2 did not take islands 0 and 1's result";
    }
    CollectiveResult r = groups[i]->allreduce_mean(b2[i], fp32, 1.0)->wait(in_seconds(20));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.contributors, iota_ids(3));
    EXPECT_TRUE(at::equal(b2[i], ref2[i]));
  });
}

// Sub-group {0, 2} (key 5) of three islands: its mesh connects islands 0 and 2 only, under
// store keys of its own, while the whole group's mesh connects all three; each result is
// bitwise the in-process one (the sub-group's is its collective #0, as in-process).
TEST(GlooGroup, SubgroupMeshConnectsItsMembersOnlyUnderItsOwnKeys) {
  GlooCluster c(3, {}, /*static_planes=*/false);
  const compression::Pipeline fp32;
  std::vector<at::Tensor> all = random_inputs(3, 1000, 5), sub = random_inputs(2, 700, 6);
  std::vector<at::Tensor> all_ref = clones(all), sub_ref = clones(sub);
  inproc_allreduce(all_ref, fp32, {1, 1, 1});
  inproc_allreduce(sub_ref, fp32, {1, 1});
  c.run([&](int i) {
    std::unique_ptr<Group> g;
    std::unique_ptr<Handle> h;
    if (i != 1) {
      g = c.groups[i]->subgroup(5, {0, 2});
      h = g->allreduce_mean(sub[i / 2], fp32, 1.0);
    }
    CollectiveResult r = c.groups[i]->allreduce_mean(all[i], fp32, 1.0)->wait(in_seconds(30));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    if (!h) return;
    r = h->wait(in_seconds(30));
    EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
    EXPECT_EQ(r.contributors, (std::vector<int>{0, 2}));
  });
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(at::equal(all[i], all_ref[i])) << "island " << i;
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(at::equal(sub[k], sub_ref[k])) << "island " << 2 * k;
  std::lock_guard<std::mutex> lock(c.store->mu);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.store->values.count("gloo/e0/g0/state/" + std::to_string(i)), 1u) << i;
    EXPECT_EQ(c.store->values.count("gloo/k5/e0/g0/state/" + std::to_string(i)), i == 1 ? 0u : 1u) << i;
  }
}

// Three islands with GlooGroups (64 KiB chunks) whose rendezvous goes through a real
// coordinator's store; island 2's client does not LEAVE when destroyed (a crash).
struct ThreeIslandsOneToCrash {
  void start() {
    coordinator = start_coordinator();
    ASSERT_TRUE(coordinator);
    for (int i = 0; i < 3; ++i) {
      ControlClientOptions o = fast_client(coordinator->endpoint(), i);
      o.leave_on_destroy = i != 2;
      clients.push_back(join(o));
      ASSERT_TRUE(clients.back());
    }
    for (auto& cl : clients) wait_for_ids(*cl, {0, 1, 2});
    GlooGroupOptions go;
    go.chunk_bytes = 64 << 10;
    go.poll_ms = 20;
    go.connect_timeout_ms = 2000;
    for (int i = 0; i < 3; ++i) groups.push_back(std::make_unique<GlooGroup>(*clients[i], go));
  }
  std::unique_ptr<Coordinator> coordinator;
  std::vector<std::unique_ptr<ZmqControlClient>> clients;
  std::vector<std::unique_ptr<GlooGroup>> groups;  // destroyed first (declared last)
};

// Three islands rendezvous through a real coordinator's store. Island 2 dies (its group
// closes its connections, its control client vanishes without LEAVE) while a large
// collective runs; the coordinator declares it dead, and islands 0 and 1 end that collective
// with the same values and contributors (the two-island mean, kPeerLost; or, if island 2
// had sent everything before dying, the three-island mean), then go on between themselves.
TEST(GlooGroup, IslandDyingMidCollectiveLeavesSurvivorsConsistent) {
  ThreeIslandsOneToCrash c;
  c.start();
  if (::testing::Test::HasFatalFailure()) return;
  auto& clients = c.clients;
  auto& groups = c.groups;

  const compression::Pipeline fp32;
  {  // collective #0: all three
    std::vector<at::Tensor> ref = random_inputs(3, 1000, 3), got = clones(ref);
    inproc_allreduce(ref, fp32, {1, 1, 1});
    run_islands(3, [&](int i) {
      CollectiveResult r = groups[i]->allreduce_mean(got[i], fp32, 1.0)->wait(in_seconds(30));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_TRUE(at::equal(got[i], ref[i]));
    });
  }
  const int64_t n = int64_t{4} << 20;  // 16 MB
  const std::vector<at::Tensor> inputs = random_inputs(3, n, 4);
  std::vector<at::Tensor> got = clones(inputs);
  std::vector<CollectiveResult> r(3);
  run_islands(3, [&](int i) {
    auto h = groups[i]->allreduce_mean(got[i], fp32, 1.0);
    if (i == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      groups[2].reset();   // its connections close, as the kernel closes a killed process's
      clients[2].reset();  // no LEAVE: declared dead after its heartbeats stop
      return;
    }
    r[i] = h->wait(in_seconds(30));
  });
  ASSERT_EQ(r[0].status.code(), r[1].status.code()) << r[0].status.to_string() << " / " << r[1].status.to_string();
  ASSERT_EQ(r[0].contributors, r[1].contributors);
  EXPECT_TRUE(at::equal(got[0], got[1]));
  std::vector<at::Tensor> ref = clones(inputs);
  if (r[0].contributors == std::vector<int>{0, 1}) {
    EXPECT_EQ(r[0].status.code(), StatusCode::kPeerLost) << r[0].status.to_string();
    ref.pop_back();
    inproc_allreduce(ref, fp32, {1, 1}, nullptr, 1);
  } else {
    EXPECT_EQ(r[0].contributors, (std::vector<int>{0, 1, 2}));
    inproc_allreduce(ref, fp32, {1, 1, 1}, nullptr, 1);
  }
  EXPECT_TRUE(at::equal(got[0], ref[0]));
  // The survivors go on between themselves in the new epoch.
  std::vector<at::Tensor> again = random_inputs(2, 5000, 9), again_ref = clones(again);
  inproc_allreduce(again_ref, fp32, {1, 1}, nullptr, 2);
  run_islands(2, [&](int i) {
    CollectiveResult q = groups[i]->allreduce_mean(again[i], fp32, 1.0)->wait(in_seconds(30));
    EXPECT_TRUE(q.status.is_ok()) << q.status.to_string();
    EXPECT_EQ(q.contributors, (std::vector<int>{0, 1}));
    EXPECT_TRUE(at::equal(again[i], again_ref[i]));
  });
  for (int i = 0; i < 2; ++i) EXPECT_GE(groups[i]->meshes_built(), 2u);
}

// The same for an allgather of large strings: the survivors end with the same contributors
// and strings (the two of them, or all three when one of them finished and hands its result
// over), each string that of its contributor; then they gather between themselves.
TEST(GlooGroup, IslandDyingMidAllgatherLeavesSurvivorsConsistent) {
  ThreeIslandsOneToCrash c;
  c.start();
  if (::testing::Test::HasFatalFailure()) return;
  auto& clients = c.clients;
  auto& groups = c.groups;
  auto bytes_of = [](int i, size_t n) {
    std::vector<uint8_t> b(n + static_cast<size_t>(i));
    for (size_t k = 0; k < b.size(); ++k) b[k] = static_cast<uint8_t>(k * 13 + i);
    return b;
  };
  {  // allgather #0: all three
    std::vector<std::vector<std::vector<uint8_t>>> out(3);
    run_islands(3, [&](int i) {
      CollectiveResult r = groups[i]->allgather(bytes_of(i, 100), &out[i])->wait(in_seconds(30));
      EXPECT_TRUE(r.status.is_ok()) << r.status.to_string();
      EXPECT_EQ(out[i], (std::vector<std::vector<uint8_t>>{bytes_of(0, 100), bytes_of(1, 100), bytes_of(2, 100)}));
    });
  }
  // Each survivor goes on to the next allgather once it has its result (as islands do: a
  // member that finished hands its result to one that did not when it runs its next
  // collective) and sees island 2 gone (else that one would start among three and say
  // kPeerLost too).
  const size_t n = size_t{16} << 20;
  std::vector<std::vector<std::vector<uint8_t>>> out(3), again(2);
  std::vector<CollectiveResult> r(3), q(2);
  run_islands(3, [&](int i) {
    auto h = groups[i]->allgather(bytes_of(i, n), &out[i]);
    if (i == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      groups[2].reset();
      clients[2].reset();
      return;
    }
    r[i] = h->wait(in_seconds(30));
    wait_for_ids(*clients[i], {0, 1});
    q[i] = groups[i]->allgather(bytes_of(i, 10), &again[i])->wait(in_seconds(30));
  });
  ASSERT_EQ(r[0].status.code(), r[1].status.code()) << r[0].status.to_string() << " / " << r[1].status.to_string();
  ASSERT_EQ(r[0].contributors, r[1].contributors);
  EXPECT_EQ(out[0], out[1]);
  ASSERT_GE(r[0].contributors.size(), 2u);
  ASSERT_EQ(out[0].size(), r[0].contributors.size());
  for (size_t k = 0; k < out[0].size(); ++k) EXPECT_TRUE(out[0][k] == bytes_of(r[0].contributors[k], n)) << k;
  if (r[0].contributors.size() == 2) {
    EXPECT_EQ(r[0].status.code(), StatusCode::kPeerLost);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(q[i].status.is_ok()) << q[i].status.to_string();
    EXPECT_EQ(again[i], (std::vector<std::vector<uint8_t>>{bytes_of(0, 10), bytes_of(1, 10)}));
  }
}

}  // namespace
}  // namespace atl::transport::testing
