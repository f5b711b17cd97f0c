// One row per transport kind: how it builds an island's data plane (src/run/data_plane.h).
#include "src/run/data_plane.h"

#include <algorithm>
#include <utility>

#include "src/base/status.h"
#include "src/run/hosts.h"
#include "transport/gloo/gloo_group.h"
#include "transport/zmq/zmq_group.h"

namespace atl::run {
namespace {

std::unique_ptr<transport::NetGroup> make_zmq(const config::TransportConfig& t, transport::ControlPlane& control,
                                              DataPlaneStart s) {
  transport::ZmqGroupOptions o;
  o.bind = std::move(s.bind);
  o.first_seq = s.first_seq;
  o.first_seqs = std::move(s.first_seqs);
  o.in_flight = std::move(s.in_flight);
  o.star = t.collective == "star";
  o.chunk_bytes = t.chunk_bytes;
  o.max_in_flight = t.max_in_flight;
  o.bandwidth_mbps = t.bandwidth_mbps;
  o.timeout_slack = t.timeout_slack;
  if (t.curve) {
    o.curve = true;
    o.curve_public_key = std::move(s.curve_public_key);
    o.curve_secret_key = std::move(s.curve_secret_key);
  }
  return std::make_unique<transport::ZmqGroup>(control, o);
}

// gloo's pairs listen on transport.host, or with "*" on this node's name (island_address;
// ephemeral ports); the data-phase timeout follows the
// same bandwidth model as zmq's; connecting the pairs of a new mesh may take up to two
// heartbeat timeouts (at least 5 s).
std::unique_ptr<transport::NetGroup> make_gloo(const config::TransportConfig& t, transport::ControlPlane& control,
                                               DataPlaneStart s) {
  transport::GlooGroupOptions o;
  o.host = island_address(t);
  o.chunk_bytes = t.chunk_bytes;
  o.bandwidth_mbps = t.bandwidth_mbps;
  o.timeout_slack = t.timeout_slack;
  o.connect_timeout_ms = std::max<int64_t>(2 * t.heartbeat_timeout_ms, 5000);
  o.poll_ms = static_cast<int>(std::clamp<int64_t>(t.heartbeat_ms / 2, 10, 100));
  o.first_seq = s.first_seq;
  o.first_seqs = std::move(s.first_seqs);
  o.in_flight = std::move(s.in_flight);
  if (!s.store_prefix.empty()) o.store_prefix = std::move(s.store_prefix);
  return std::make_unique<transport::GlooGroup>(control, std::move(o));
}

struct Row {
  const char* kind;
  std::unique_ptr<transport::NetGroup> (*make)(const config::TransportConfig&, transport::ControlPlane&,
                                               DataPlaneStart);
};

const Row kRows[] = {
    {"zmq", make_zmq},
    {"gloo", make_gloo},
};

}  // namespace

std::unique_ptr<transport::NetGroup> make_data_plane(const config::TransportConfig& t,
                                                     transport::ControlPlane& control, DataPlaneStart start) {
  for (const auto& r : kRows)
    if (t.kind == r.kind) return r.make(t, control, std::move(start));
  throw UserError("transport.kind: no data plane '" + t.kind + "'");
}

std::vector<std::string> data_plane_kinds() {
  std::vector<std::string> kinds;
  for (const auto& r : kRows) kinds.emplace_back(r.kind);
  return kinds;
}

}  // namespace atl::run
