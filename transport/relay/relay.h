// Relay: a user-space TCP relay that makes connections on one machine behave like WAN links
// (`atoll relay`, `atoll launch --emulate-wan`; docs/wan-emulation.md). Each link listens on
// one address and forwards every accepted connection to one target; per direction it adds
// latency and jitter, caps the rate with token buckets, injects the stalls that lost packets
// cost, and goes down on a schedule (connections reset, or a blackhole that forwards
// nothing). The numbers come from the same model the simulator charges
// (transport/network_model.h), derived by the caller; the relay only knows rates and delays.
//
// What a direction does with the bytes it reads (in order, byte order always preserved):
//   1. admission: a chunk enters the path when every token bucket the direction names has
//      tokens for it (buckets are shared by name, so the directions that leave one island
//      share its uplink as in NetworkModel::phase_time), and no stall is in progress;
//   2. loss: each 1460-byte packet admitted is lost with probability `loss`; a loss stalls
//      the direction for `loss_stall_s` (the path's round trip: a fast retransmit), i.e.
//      that packet and everything after it arrive that much later;
//   3. propagation: the chunk is delivered latency + U[0, jitter] after admission (never
//      before the chunk admitted ahead of it).
// Reading pauses while a direction buffers more than max_buffered_bytes (back-pressure to
// the sender, as a full TCP window would).
//
// Threads: create() binds on the caller's thread; run() is the event loop (poll) on the
// thread that calls it; stop() and stats() may be called from any thread, stop() also from
// a signal handler. Errors: create() returns kInvalidArgument for a malformed spec and
// kUnavailable when an address cannot be bound; peers that misbehave only lose their
// connection. No libtorch.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::transport::relay {

inline constexpr double kPacketBytes = 1460;  // as transport/network_model.h

// What one direction of a link imposes on the bytes that flow that way.
struct DirectionShape {
  double latency_s = 0;        // one-way delay added to every byte
  double jitter_s = 0;         // extra delay, uniform in [0, jitter_s], drawn per chunk
  double loss = 0;             // probability that a 1460-byte packet is lost
  double loss_stall_s = 0;     // what one loss costs: the stream stalls this long (one RTT)
  // false: losses evenly spaced, one every 1/loss packets (the first after 1/loss), so a short
  // run pays the model's mean cost; true: each packet lost independently (the model's
  // Poisson tail) [impl choice, docs/wan-emulation.md].
  bool random_loss = false;
  std::vector<std::string> buckets;  // token buckets (RelayOptions::buckets) every byte passes
};

// [start_s, end_s), in seconds since Relay::run began.
struct Window {
  double start_s = 0, end_s = 0;
};

struct LinkSpec {
  std::string name;                    // for logs and stats, e.g. "0->1", "2->coordinator"
  std::string listen = "127.0.0.1:0";  // host:port to accept on; port 0 = any free port
  std::string target;                  // host:port each accepted connection is forwarded to
  DirectionShape forward;              // accepted side -> target
  DirectionShape backward;             // target -> accepted side
  std::vector<Window> cuts;            // the link is down during these windows
  // Down means: false, reset every connection (RST to both ends) and reset new ones at once;
  // true, a blackhole: connections stay open, nothing is forwarded until the link is back.
  bool blackhole = false;
  double stall_every_s = 0;            // > 0: every stall_every_s seconds (first at t =
  double stall_s = 0;                  // stall_every_s) both directions stall for stall_s
};

struct RelayOptions {
  std::vector<LinkSpec> links;
  // Token bucket name -> rate in bits/s, shared by every direction that names it. A rate
  // that is not finite and > 0 means "no cap" (the bucket is ignored).
  std::map<std::string, double> buckets;
  uint64_t seed = 1;                         // jitter and loss phases / draws
  size_t max_buffered_bytes = size_t{4} << 20;  // per direction; reading pauses above it
};

struct DirectionStats {
  uint64_t bytes = 0;        // delivered to the far end
  uint64_t loss_stalls = 0;  // packets "lost" (each stalled the stream one loss_stall_s)
  double loss_stall_s = 0;   // time those stalls added
  uint64_t chunks = 0;       // chunks delivered
  double delay_s = 0;        // sum over chunks of latency + jitter + loss stalls added
};

struct LinkStats {
  std::string name;
  std::string address;       // bound listen address, host:port
  uint64_t accepted = 0;     // connections accepted
  uint64_t reset = 0;        // connections reset by a cut, or refused during one
  uint64_t failed = 0;       // connections whose target could not be reached
  uint64_t periodic_stalls = 0;
  uint64_t cuts = 0;         // times the link went down
  DirectionStats forward, backward;
};

class Relay {
 public:
  static StatusOr<std::unique_ptr<Relay>> create(RelayOptions options);
  ~Relay();
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // The bound listen address of link `link` ("127.0.0.1:40123").
  std::string address(size_t link) const;
  // Forwards until stop(); call it once. Time 0 of the cut and stall schedules is the call.
  void run();
  // Makes run() return soon (its connections are closed). Any thread; async-signal-safe.
  void stop();
  // The counters as of the event loop's last publish (at most 50 ms old).
  std::vector<LinkStats> stats() const;

 private:
  struct State;  // sockets and resolved targets (relay.cpp)
  struct Loop;   // the event loop (relay.cpp)
  explicit Relay(RelayOptions options);

  RelayOptions options_;
  std::unique_ptr<State> state_;
  std::atomic<bool> stop_{false};
  mutable std::mutex stats_mu_;
  std::vector<LinkStats> stats_;  // as of the loop's last publish (Loop::publish; guarded by stats_mu_)
};

// "host:port", "tcp://host:port" or "[v6addr]:port" -> (host, port); "*" means any address.
// kInvalidArgument when malformed.
StatusOr<std::pair<std::string, int>> parse_address(const std::string& address);

}  // namespace atl::transport::relay
