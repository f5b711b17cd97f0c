// The `network:` and `islands.events` partition entries of a config as a NetworkModel.
// Shared by the simulator (virtual clock) and `atoll relay` (WAN emulation on real sockets).
#pragma once

#include "src/config/config.h"
#include "transport/network_model.h"

namespace atl::core {

// Islands are 0..islands.count-1 plus those added by `add` events. Regions are numbered in
// order of first appearance in network.regions (one region "default" when it is empty).
// Paths inside a region use network.latency_ms/jitter_ms/loss and no cap; paths between two
// regions use the matching network.links entry (unset fields fall back to the same
// defaults). Partition events become cuts [at_time_s, at_time_s + duration_s).
transport::NetworkModel make_network_model(const config::Config& config);

}  // namespace atl::core
