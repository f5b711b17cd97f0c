// The network model: how long a transfer takes between two endpoints of a run, from one
// profile (`network:` in YAML). The simulator charges it on the virtual clock; `atoll relay`
// imposes the same per-link latency, bandwidth, stalls and cuts on real sockets, so one
// profile describes both.
//
// Endpoints are island ids 0..islands-1 and kServer (the coordinator / server role).
// A transfer of B bytes from a to b takes
//   latency(a,b) + U[0, jitter(a,b)] + 8B / min(up(a), down(b), cap(a,b)) + losses * rtt(a,b)
// with losses ~ Poisson(ceil(B / kPacketBytes) * loss(a,b)): each lost packet costs one round
// trip (fast retransmit). Concurrent transfers over one access link share it: see phase_time.
// Pure and deterministic given the RNG; no torch.
#pragma once

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace atl::transport {

inline constexpr int kServer = -1;
inline constexpr double kPacketBytes = 1460;

// Properties of the path between two regions (or inside one).
struct PathSpec {
  double latency_s = 0;  // one-way
  double jitter_s = 0;   // extra one-way delay, uniform in [0, jitter_s]
  double loss = 0;       // packet loss probability
  double cap_bps = std::numeric_limits<double>::infinity();  // capacity of the path
};

// A cut between two regions during [start_s, end_s) of virtual/wall time.
struct Partition {
  int region_a = 0, region_b = 0;
  double start_s = 0, end_s = 0;
};

struct NetworkSpec {
  std::vector<std::string> region_names;      // index = region id
  std::vector<int> island_region;             // region of each island
  int server_region = 0;
  std::vector<double> up_bps, down_bps;       // access link of each island
  double server_up_bps = std::numeric_limits<double>::infinity();
  double server_down_bps = std::numeric_limits<double>::infinity();
  std::vector<std::vector<PathSpec>> paths;   // [region][region], symmetric
  std::vector<Partition> partitions;
};

// One message of a communication phase.
struct Transfer {
  int from = 0, to = 0;
  uint64_t bytes = 0;
};

class NetworkModel {
 public:
  NetworkModel() = default;
  explicit NetworkModel(NetworkSpec spec) : spec_(std::move(spec)) {}

  const NetworkSpec& spec() const { return spec_; }
  int islands() const { return static_cast<int>(spec_.island_region.size()); }
  int region_of(int endpoint) const;
  const PathSpec& path(int a, int b) const;
  double rtt_s(int a, int b) const { return 2 * path(a, b).latency_s; }
  double up_bps(int endpoint) const;
  double down_bps(int endpoint) const;

  // Seconds for one transfer alone on the network (formula above).
  double transfer_time(const Transfer& t, std::mt19937_64& rng) const;

  // Seconds for a set of transfers that start together and run concurrently (one step of a
  // collective): each endpoint's uplink carries the sum of what it sends and its downlink
  // the sum of what it receives; the phase ends when the slowest transfer is done:
  //   max over transfers of latency + jitter + losses*rtt, plus the longest serialisation
  //   time max(up bytes/up, down bytes/down, pair bytes/cap) over endpoints and pairs.
  double phase_time(const std::vector<Transfer>& phase, std::mt19937_64& rng) const;

  // End of the cut that separates a and b at time t, or t when they are connected.
  double connected_at(int a, int b, double t) const;

 private:
  NetworkSpec spec_;
};

}  // namespace atl::transport
