#include "src/core/network_profile.h"

#include <algorithm>
#include <limits>

namespace atl::core {

namespace {

int region_id(std::vector<std::string>& names, const std::string& name) {
  auto it = std::find(names.begin(), names.end(), name);
  if (it != names.end()) return static_cast<int>(it - names.begin());
  names.push_back(name);
  return static_cast<int>(names.size()) - 1;
}

}  // namespace

transport::NetworkModel make_network_model(const config::Config& config) {
  const config::NetworkConfig& net = config.network;
  int islands = config.islands.count;
  for (const auto& e : config.islands.events) islands += e.add;

  transport::NetworkSpec spec;
  spec.island_region.assign(static_cast<size_t>(islands), 0);
  if (net.regions.empty()) {
    spec.region_names = {"default"};
  } else {
    for (size_t i = 0; i < net.regions.size(); ++i)
      spec.island_region[i] = region_id(spec.region_names, net.regions[i]);
    // Islands added later than network.regions lists sit in the first region.
  }
  spec.server_region = net.server_region.empty() ? spec.island_region[0]
                                                 : region_id(spec.region_names, net.server_region);
  const double mbps = 1e6;
  const double up = (net.up_mbps > 0 ? net.up_mbps : net.bandwidth_mbps) * mbps;
  const double down = (net.down_mbps > 0 ? net.down_mbps : net.bandwidth_mbps) * mbps;
  spec.up_bps.assign(static_cast<size_t>(islands), up);
  spec.down_bps.assign(static_cast<size_t>(islands), down);
  // The coordinator / server is a data-centre host: its access link is not the bottleneck
  // beyond the islands' own links [impl choice, documented in docs/simulator.md].
  spec.server_up_bps = spec.server_down_bps = std::numeric_limits<double>::infinity();

  const size_t r = spec.region_names.size();
  transport::PathSpec base;
  base.latency_s = net.latency_ms / 1e3;
  base.jitter_s = net.jitter_ms / 1e3;
  base.loss = net.loss;
  spec.paths.assign(r, std::vector<transport::PathSpec>(r, base));
  for (const auto& link : net.links) {
    const int a = region_id(spec.region_names, link.between[0]);
    const int b = region_id(spec.region_names, link.between[1]);
    if (spec.region_names.size() != r) continue;  // unknown region: rejected by parse_config
    transport::PathSpec p = base;
    if (link.latency_ms >= 0) p.latency_s = link.latency_ms / 1e3;
    if (link.jitter_ms >= 0) p.jitter_s = link.jitter_ms / 1e3;
    if (link.loss >= 0) p.loss = link.loss;
    if (link.bandwidth_mbps > 0) p.cap_bps = link.bandwidth_mbps * mbps;
    spec.paths[static_cast<size_t>(a)][static_cast<size_t>(b)] = p;
    spec.paths[static_cast<size_t>(b)][static_cast<size_t>(a)] = p;
  }
  for (const auto& e : config.islands.events) {
    if (e.partition.size() != 2) continue;
    transport::Partition cut;
    cut.region_a = region_id(spec.region_names, e.partition[0]);
    cut.region_b = region_id(spec.region_names, e.partition[1]);
    cut.start_s = e.at_time_s;
    cut.end_s = e.at_time_s + e.duration_s;
    spec.partitions.push_back(cut);
  }
  return transport::NetworkModel(std::move(spec));
}

}  // namespace atl::core
