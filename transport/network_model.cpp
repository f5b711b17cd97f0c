#include "transport/network_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

namespace atl::transport {

int NetworkModel::region_of(int endpoint) const {
  if (endpoint == kServer) return spec_.server_region;
  if (endpoint < 0 || endpoint >= islands()) throw std::out_of_range("network model: no endpoint " + std::to_string(endpoint));
  return spec_.island_region[static_cast<size_t>(endpoint)];
}

const PathSpec& NetworkModel::path(int a, int b) const {
  return spec_.paths[static_cast<size_t>(region_of(a))][static_cast<size_t>(region_of(b))];
}

double NetworkModel::up_bps(int endpoint) const {
  return endpoint == kServer ? spec_.server_up_bps : spec_.up_bps[static_cast<size_t>(endpoint)];
}

double NetworkModel::down_bps(int endpoint) const {
  return endpoint == kServer ? spec_.server_down_bps : spec_.down_bps[static_cast<size_t>(endpoint)];
}

namespace {

// Latency, jitter and retransmissions of one message (everything but serialisation).
double delay_s(const NetworkModel& m, const Transfer& t, std::mt19937_64& rng) {
  const PathSpec& p = m.path(t.from, t.to);
  double d = p.latency_s;
  if (p.jitter_s > 0) d += std::uniform_real_distribution<double>(0, p.jitter_s)(rng);
  if (p.loss > 0 && t.bytes > 0) {
    const double packets = std::ceil(static_cast<double>(t.bytes) / kPacketBytes);
    const auto losses = std::poisson_distribution<int64_t>(packets * p.loss)(rng);
    d += static_cast<double>(losses) * m.rtt_s(t.from, t.to);
  }
  return d;
}

}  // namespace

double NetworkModel::transfer_time(const Transfer& t, std::mt19937_64& rng) const {
  const double bits = 8.0 * static_cast<double>(t.bytes);
  const double bw = std::min({up_bps(t.from), down_bps(t.to), path(t.from, t.to).cap_bps});
  return delay_s(*this, t, rng) + bits / bw;
}

double NetworkModel::phase_time(const std::vector<Transfer>& phase, std::mt19937_64& rng) const {
  if (phase.empty()) return 0;
  std::map<int, double> up_bits, down_bits;
  std::map<std::pair<int, int>, double> region_bits;  // per region pair, both directions apart
  double delay = 0;
  for (const Transfer& t : phase) {
    const double bits = 8.0 * static_cast<double>(t.bytes);
    up_bits[t.from] += bits;
    down_bits[t.to] += bits;
    if (region_of(t.from) != region_of(t.to)) region_bits[{region_of(t.from), region_of(t.to)}] += bits;
    delay = std::max(delay, delay_s(*this, t, rng));
  }
  double serial = 0;
  for (const auto& [e, bits] : up_bits) serial = std::max(serial, bits / up_bps(e));
  for (const auto& [e, bits] : down_bits) serial = std::max(serial, bits / down_bps(e));
  for (const auto& [rr, bits] : region_bits) {
    serial = std::max(serial, bits / spec_.paths[static_cast<size_t>(rr.first)][static_cast<size_t>(rr.second)].cap_bps);
  }
  return delay + serial;
}

double NetworkModel::connected_at(int a, int b, double t) const {
  const int ra = region_of(a), rb = region_of(b);
  double at = t;
  // Cuts may overlap or follow each other: advance until no cut covers `at`.
  for (bool moved = true; moved;) {
    moved = false;
    for (const Partition& p : spec_.partitions) {
      const bool pair = (p.region_a == ra && p.region_b == rb) || (p.region_a == rb && p.region_b == ra);
      if (pair && at >= p.start_s && at < p.end_s) {
        at = p.end_s;
        moved = true;
      }
    }
  }
  return at;
}

}  // namespace atl::transport
