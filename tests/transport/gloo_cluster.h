// W islands on loopback, each a GlooGroup over a fixed membership (StaticControlPlane: its
// in-process store is the rendezvous store). For gloo_group_test and the Group conformance
// suite.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tests/transport/zmq_group_test_util.h"
#include "transport/gloo/gloo_group.h"

namespace atl::transport::testing {

struct GlooCluster {
  explicit GlooCluster(int w, GlooGroupOptions options = {}, OuterServer* server = nullptr) {
    StaticClusterOptions so;
    so.peers = loopback_peers(w);
    so.server = server;
    cluster = std::make_unique<StaticCluster>(so);
    for (int i = 0; i < w; ++i) planes.push_back(cluster->plane(i));
    for (int i = 0; i < w; ++i) groups.push_back(std::make_unique<GlooGroup>(*planes[i], options));
  }
  int size() const { return static_cast<int>(groups.size()); }
  void run(const std::function<void(int)>& body) { run_islands(size(), body); }
  std::unique_ptr<StaticCluster> cluster;
  std::vector<std::unique_ptr<ControlPlane>> planes;
  std::vector<std::unique_ptr<GlooGroup>> groups;  // destroyed first (declared last)
};

}  // namespace atl::transport::testing
