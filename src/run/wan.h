// WAN emulation for real runs on one machine (docs/wan-emulation.md): relay links whose
// latency, jitter, loss stalls, rates and cuts come from the run's network model
// (src/core/network_profile.h, the model the simulator charges), so one `network:` profile
// describes both.
//
// Endpoints are island ids and transport::kServer (the coordinator). Every direction a -> b
// gets: path(a, b) latency, jitter and loss (each loss stalls it rtt_s(a, b)); the token
// buckets "up:a", "down:b" and, between two regions, "path:<region a>><region b>", shared by
// every direction that crosses them (NetworkModel::phase_time's sharing); and the partitions
// of islands.events between the two endpoints' regions as cuts.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "transport/network_model.h"
#include "transport/relay/relay.h"

namespace atl::run {

// Choices the profile does not make (command-line flags of `atoll launch` / `atoll relay`).
struct WanOptions {
  bool blackhole = false;      // cuts stop forwarding instead of resetting connections
  bool random_loss = false;    // losses drawn per packet instead of evenly spaced
  double stall_every_s = 0;    // > 0: periodic stalls of stall_s on every link
  double stall_s = 0;
};

// Relay links for every directed island link (island i dials relay (i, j) instead of island j)
// and for each island's control connection to the coordinator.
struct WanPlan {
  transport::relay::RelayOptions relay;
  std::vector<std::map<int, size_t>> peer_link;  // [i][j]: index of link i -> j in relay.links
  std::vector<size_t> control_link;              // [i]: index of link i -> coordinator
  // islands.shard_exchange: [i][r - 1][j], link i -> j of rank r >= 1's shard plane (sharing
  // the token buckets of i -> j: the island's link, as the simulator shares it).
  std::vector<std::vector<std::map<int, size_t>>> shard_link;
};

// "0", "1", ... or "coordinator" for transport::kServer.
std::string endpoint_name(int endpoint);
// The endpoint a relay of `config` forwards to: island k's data socket (rank r >= 1: its shard
// plane's, which binds it when its peers are routed: shard_plane_port) or the coordinator.
std::string endpoint_address(const config::Config& config, int endpoint, int rank = 0);
// The port of island `island`'s rank `rank` >= 1 shard plane when relays forward to it:
// transport.base_port + rank x islands.count + island (rank 0's data socket is base_port +
// island).
int shard_plane_port(const config::Config& config, int island, int rank);

// One relay link from `from` to `to` (connections accepted on `listen` go to `target`), with
// the token buckets it names added to `buckets`.
// `rank`: a link of rank `rank`'s shard plane (named "i->j rank r"), on the island's access
// buckets or, with `rank_links` (network.rank_links), on buckets of its own.
transport::relay::LinkSpec wan_link(const transport::NetworkModel& model, int from, int to,
                                    const std::string& listen, const std::string& target,
                                    const WanOptions& options, std::map<std::string, double>& buckets,
                                    int rank = 0, bool rank_links = false);

// Every link of a launch of `config` on this machine, listening on free loopback ports.
WanPlan plan_wan(const config::Config& config, const WanOptions& options);

// One link's counters as a JSON object (launch writes them to <run dir>/relays.jsonl) and as
// one human-readable line.
std::string link_stats_json(const transport::relay::LinkStats& s);
std::string link_stats_line(const transport::relay::LinkStats& s);

// `atoll relay`: one link, from explicit flags or from a config's model (flags given
// explicitly then override the model's values in both directions).
struct RelayCommand {
  std::string listen = "127.0.0.1:0";  // host:port to accept on
  std::string to;                      // host:port to forward to ("" with a config: the
                                       // data endpoint of to_endpoint, or the coordinator)
  int from = 0, to_endpoint = 1;       // with a config: the link's endpoints (kServer = -1)
  double latency_ms = -1, jitter_ms = -1, bandwidth_mbps = -1, loss = -1;  // -1: not given
  double cut_at_s = -1, cut_for_s = 0;  // one more cut [cut_at_s, cut_at_s + cut_for_s)
  WanOptions wan;
};

// Runs the relay until SIGINT/SIGTERM, then prints its counters. `config` may be null.
// Returns the exit code; bad flags throw atl::UserError.
int run_relay(const RelayCommand& command, const config::Config* config);

}  // namespace atl::run
