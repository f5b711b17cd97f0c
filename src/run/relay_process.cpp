// `atoll relay`: one WAN-emulation link in the foreground until Ctrl-C (docs/wan-emulation.md).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "src/base/status.h"
#include "src/run/wan.h"
#include "src/core/network_profile.h"

namespace atl::run {

namespace relay = transport::relay;

namespace {

std::atomic<relay::Relay*> g_relay{nullptr};
void stop_relay_on_signal(int) {
  if (relay::Relay* r = g_relay.load()) r->stop();
}

std::string describe(const relay::DirectionShape& d, const std::map<std::string, double>& buckets) {
  char buf[200];
  double bps = INFINITY;
  for (const auto& b : d.buckets) {
    auto it = buckets.find(b);
    if (it != buckets.end() && it->second > 0) bps = std::min(bps, it->second);
  }
  char rate[40] = "no rate cap";
  if (std::isfinite(bps)) std::snprintf(rate, sizeof rate, "%g Mbit/s", bps / 1e6);
  std::snprintf(buf, sizeof buf, "latency %.1f ms + U[0, %.1f] ms, %s, loss %g (stall %.0f ms each)",
                1e3 * d.latency_s, 1e3 * d.jitter_s, rate, d.loss, 1e3 * d.loss_stall_s);
  return buf;
}

int parse_endpoint(const config::Config& config, int id, const char* flag) {
  const int k = config.islands.count;
  if (id != transport::kServer && (id < 0 || id >= k)) {
    throw UserError(std::string(flag) + " " + std::to_string(id) + ": must be an island id in [0, " +
                    std::to_string(k) + ") or -1 (the coordinator)");
  }
  return id;
}

}  // namespace

int run_relay(const RelayCommand& c, const config::Config* config) {
  relay::RelayOptions options;
  relay::LinkSpec link;
  if (config != nullptr) {
    const int from = parse_endpoint(*config, c.from, "--from");
    const int to = parse_endpoint(*config, c.to_endpoint, "--to-island");
    if (from == to) throw UserError("--from and --to-island name the same endpoint");
    const transport::NetworkModel model = core::make_network_model(*config);
    link = wan_link(model, from, to, c.listen, c.to.empty() ? endpoint_address(*config, to) : c.to, c.wan,
                    options.buckets);
    options.seed = static_cast<uint64_t>(config->run.seed);
  } else {
    if (c.to.empty()) throw UserError("atoll relay: --to HOST:PORT is required (or --config with --from and --to-island)");
    link.name = "relay";
    link.listen = c.listen;
    link.target = c.to;
    link.blackhole = c.wan.blackhole;
    link.stall_every_s = c.wan.stall_every_s;
    link.stall_s = c.wan.stall_s;
    link.forward.random_loss = link.backward.random_loss = c.wan.random_loss;
  }
  for (relay::DirectionShape* d : {&link.forward, &link.backward}) {
    if (c.latency_ms >= 0) {
      d->latency_s = c.latency_ms / 1e3;
      d->loss_stall_s = 2 * d->latency_s;  // a lost packet costs the round trip
    }
    if (c.jitter_ms >= 0) d->jitter_s = c.jitter_ms / 1e3;
    if (c.loss >= 0) d->loss = c.loss;
    if (c.bandwidth_mbps > 0) {
      const std::string name = d == &link.forward ? "forward" : "backward";
      options.buckets[name] = c.bandwidth_mbps * 1e6;
      d->buckets = {name};
    }
  }
  if (c.cut_at_s >= 0) {
    if (c.cut_for_s <= 0) throw UserError("--cut-at-s needs --cut-for-s > 0");
    link.cuts.push_back({c.cut_at_s, c.cut_at_s + c.cut_for_s});
  }
  options.links = {link};
  auto created = relay::Relay::create(options);
  if (!created.is_ok()) throw UserError("atoll relay: " + created.status().message());
  relay::Relay& r = *created.value();

  std::printf("relay %s: listening on %s, forwarding to %s\n", link.name.c_str(), r.address(0).c_str(),
              link.target.c_str());
  std::printf("  forward:  %s\n  backward: %s\n", describe(link.forward, options.buckets).c_str(),
              describe(link.backward, options.buckets).c_str());
  for (const auto& w : link.cuts) {
    std::printf("  cut: %.1f s .. %.1f s (%s)\n", w.start_s, w.end_s, link.blackhole ? "blackhole" : "reset");
  }
  if (link.stall_every_s > 0) std::printf("  stalls: %.3f s every %.3f s\n", link.stall_s, link.stall_every_s);
  std::fflush(stdout);

  g_relay = &r;
  struct sigaction sa {};
  sa.sa_handler = stop_relay_on_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  r.run();
  g_relay = nullptr;
  std::printf("%s\n", link_stats_line(r.stats().at(0)).c_str());
  return 0;
}

}  // namespace atl::run
