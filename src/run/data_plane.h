// An island's data plane, by transport.kind: the behaviour half of the transport registry
// (what each kind can do is transport/kinds.h; this file has one row per kind, in the same
// order, and a test checks the two agree). A new transport is its folder under transport/,
// its row in kTransportKinds and its row in data_plane.cpp; the island process asks for a
// data plane by kind and never names one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "transport/control_plane.h"
#include "transport/group.h"
#include "transport/server_link.h"

namespace atl::run {

// Where this island's data plane starts: a fresh start, a hand-over (the donor's next
// collectives) or a checkpoint (the saved ones, and the collective that was in flight).
struct DataPlaneStart {
  std::string bind;                       // this island's data endpoint (zmq)
  uint64_t first_seq = 0;                 // the group's first collective
  std::map<uint32_t, uint64_t> first_seqs;  // the algorithm's sub-groups', by key
  std::optional<transport::CollectiveResult> in_flight;
  std::string curve_public_key, curve_secret_key;  // transport.curve (zmq)
  std::string store_prefix;  // gloo: a prefix of its own for its rendezvous keys ("": the default)
};

// The data plane of `t.kind` over `control`. Throws atl::UserError for a kind no row has.
std::unique_ptr<transport::NetGroup> make_data_plane(const config::TransportConfig& t,
                                                     transport::ControlPlane& control, DataPlaneStart start);

// The kinds with a row here, in order (the test against transport::kTransportKinds).
std::vector<std::string> data_plane_kinds();

}  // namespace atl::run
