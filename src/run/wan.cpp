#include "src/run/wan.h"

#include <cstdio>

#include "src/core/json.h"
#include "src/core/network_profile.h"

namespace atl::run {

using transport::kServer;
using transport::NetworkModel;
namespace relay = transport::relay;

namespace {

relay::DirectionShape direction(const NetworkModel& m, int a, int b, const WanOptions& options,
                                std::map<std::string, double>& buckets, const std::string& access) {
  const transport::PathSpec& p = m.path(a, b);
  relay::DirectionShape d;
  d.latency_s = p.latency_s;
  d.jitter_s = p.jitter_s;
  d.loss = p.loss;
  d.loss_stall_s = m.rtt_s(a, b);
  d.random_loss = options.random_loss;
  auto bucket = [&](const std::string& name, double bps) {
    buckets[name] = bps;
    d.buckets.push_back(name);
  };
  bucket("up:" + endpoint_name(a) + access, m.up_bps(a));
  bucket("down:" + endpoint_name(b) + access, m.down_bps(b));
  const int ra = m.region_of(a), rb = m.region_of(b);
  if (ra != rb) {
    const auto& names = m.spec().region_names;
    bucket("path:" + names[static_cast<size_t>(ra)] + ">" + names[static_cast<size_t>(rb)], p.cap_bps);
  }
  return d;
}

}  // namespace

std::string endpoint_name(int endpoint) { return endpoint == kServer ? "coordinator" : std::to_string(endpoint); }

int shard_plane_port(const config::Config& config, int island, int rank) {
  return config.transport.base_port + rank * config.islands.count + island;
}

std::string endpoint_address(const config::Config& config, int endpoint, int rank) {
  const auto& t = config.transport;
  if (endpoint == kServer) return t.coordinator;
  // Islands bind transport.host; a wildcard is reached on loopback.
  const std::string host = t.host == "*" || t.host == "0.0.0.0" ? "127.0.0.1" : t.host;
  return "tcp://" + host + ":" + std::to_string(rank == 0 ? t.base_port + endpoint : shard_plane_port(config, endpoint, rank));
}

relay::LinkSpec wan_link(const NetworkModel& model, int from, int to, const std::string& listen,
                         const std::string& target, const WanOptions& options,
                         std::map<std::string, double>& buckets, int rank, bool rank_links) {
  relay::LinkSpec l;
  l.name = endpoint_name(from) + "->" + endpoint_name(to) + (rank > 0 ? " rank " + std::to_string(rank) : "");
  l.listen = listen;
  l.target = target;
  // Rank r's shard plane on the island's access links, or (network.rank_links) on links of
  // its own of the same rates; paths between regions are shared either way.
  const std::string access = rank_links ? "#rank" + std::to_string(rank) : "";
  l.forward = direction(model, from, to, options, buckets, access);
  l.backward = direction(model, to, from, options, buckets, access);
  const int ra = model.region_of(from), rb = model.region_of(to);
  for (const transport::Partition& p : model.spec().partitions) {
    if ((p.region_a == ra && p.region_b == rb) || (p.region_a == rb && p.region_b == ra)) {
      l.cuts.push_back({p.start_s, p.end_s});
    }
  }
  l.blackhole = options.blackhole;
  l.stall_every_s = options.stall_every_s;
  l.stall_s = options.stall_s;
  return l;
}

WanPlan plan_wan(const config::Config& config, const WanOptions& options) {
  const NetworkModel model = core::make_network_model(config);
  const int k = config.islands.count;
  WanPlan plan;
  plan.peer_link.resize(static_cast<size_t>(k));
  auto add = [&](int from, int to, int rank) {
    plan.relay.links.push_back(wan_link(model, from, to, "127.0.0.1:0", endpoint_address(config, to, rank), options,
                                        plan.relay.buckets, rank, config.network.rank_links));
    return plan.relay.links.size() - 1;
  };
  const int ranks = config.islands.shard_exchange ? config.islands.ranks.max() : 1;
  plan.shard_link.assign(static_cast<size_t>(k), std::vector<std::map<int, size_t>>(static_cast<size_t>(ranks - 1)));
  for (int i = 0; i < k; ++i) {
    plan.control_link.push_back(add(i, kServer, 0));
    for (int j = 0; j < k; ++j) {
      if (j == i) continue;
      plan.peer_link[static_cast<size_t>(i)][j] = add(i, j, 0);
      for (int r = 1; r < ranks; ++r) plan.shard_link[static_cast<size_t>(i)][static_cast<size_t>(r - 1)][j] = add(i, j, r);
    }
  }
  plan.relay.seed = config.run.seed;
  return plan;
}

namespace {

void add_direction(core::JsonObject& o, const std::string& prefix, const relay::DirectionStats& d) {
  o.add(prefix + "_bytes", d.bytes)
      .add(prefix + "_loss_stalls", d.loss_stalls)
      .add(prefix + "_loss_stall_s", d.loss_stall_s)
      .add(prefix + "_mean_delay_s", d.chunks > 0 ? d.delay_s / static_cast<double>(d.chunks) : 0.0);
}

std::string direction_line(const relay::DirectionStats& d) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%llu bytes, %llu loss stalls (%.2f s), mean added delay %.1f ms",
                static_cast<unsigned long long>(d.bytes), static_cast<unsigned long long>(d.loss_stalls),
                d.loss_stall_s, d.chunks > 0 ? 1e3 * d.delay_s / static_cast<double>(d.chunks) : 0.0);
  return buf;
}

}  // namespace

std::string link_stats_json(const relay::LinkStats& s) {
  core::JsonObject o;
  o.add("event", "relay_link")
      .add("link", s.name)
      .add("address", s.address)
      .add("accepted", s.accepted)
      .add("reset", s.reset)
      .add("failed", s.failed)
      .add("cuts", s.cuts)
      .add("periodic_stalls", s.periodic_stalls);
  add_direction(o, "forward", s.forward);
  add_direction(o, "backward", s.backward);
  return o.str();
}

std::string link_stats_line(const relay::LinkStats& s) {
  return "relay " + s.name + ": forward " + direction_line(s.forward) + "; backward " +
         direction_line(s.backward) + "; " + std::to_string(s.accepted) + " connections, " +
         std::to_string(s.reset) + " reset, " + std::to_string(s.failed) + " failed, " +
         std::to_string(s.cuts) + " cuts, " + std::to_string(s.periodic_stalls) + " periodic stalls";
}

}  // namespace atl::run
