// A network of `k` islands in one region for the virtual-clock tests: `mbps` access links
// (both directions), `latency_ms` one way.
#pragma once

#include "transport/network_model.h"

namespace atl::transport {

inline NetworkSpec flat(int k, double mbps, double latency_ms) {
  NetworkSpec s;
  s.region_names = {"r"};
  s.island_region.assign(static_cast<size_t>(k), 0);
  s.up_bps.assign(static_cast<size_t>(k), mbps * 1e6);
  s.down_bps.assign(static_cast<size_t>(k), mbps * 1e6);
  PathSpec p;
  p.latency_s = latency_ms / 1e3;
  s.paths = {{p}};
  return s;
}

}  // namespace atl::transport
