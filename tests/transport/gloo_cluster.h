// W islands on loopback, each a GlooGroup over a fixed membership (StaticControlPlane: its
// in-process store is the rendezvous store), or over TestPlanes sharing a TestStore whose
// membership the test changes. For gloo_group_test and the Group conformance suite.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tests/transport/zmq_group_test_util.h"
#include "transport/gloo/gloo_group.h"

namespace atl::transport::testing {

struct GlooCluster {
  // static_planes: StaticControlPlane (fixed membership); else TestPlane (changeable).
  explicit GlooCluster(int w, GlooGroupOptions options = {}, bool static_planes = true,
                       OuterServer* server = nullptr) {
    peers = loopback_peers(w);
    if (static_planes) {
      StaticClusterOptions so;
      so.peers = peers;
      so.server = server;
      cluster = std::make_unique<StaticCluster>(so);
      for (int i = 0; i < w; ++i) planes.push_back(cluster->plane(i));
    } else {
      store = std::make_shared<TestStore>();
      for (int i = 0; i < w; ++i) {
        auto p = std::make_unique<TestPlane>(i, Membership{0, peers}, store);
        test_planes.push_back(p.get());
        planes.push_back(std::move(p));
      }
    }
    for (int i = 0; i < w; ++i) groups.push_back(std::make_unique<GlooGroup>(*planes[i], options));
  }
  int size() const { return static_cast<int>(groups.size()); }
  void run(const std::function<void(int)>& body) { run_islands(size(), body); }
  std::vector<Peer> peers;
  std::unique_ptr<StaticCluster> cluster;
  std::vector<std::unique_ptr<ControlPlane>> planes;
  std::vector<TestPlane*> test_planes;
  std::shared_ptr<TestStore> store;  // the TestPlanes' store
  std::vector<std::unique_ptr<GlooGroup>> groups;  // destroyed first (declared last)
};

}  // namespace atl::transport::testing
