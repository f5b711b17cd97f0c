// The data planes a real run can use (transport.kind) and what each can do: the torch-free
// half of the transport registry, read by src/config (the key's allowed names), validation
// and the island process (the capabilities, never the names). The other half, how each
// builds its Group, is src/run/data_plane.cpp, one row per kind in the same order.
//
// A capability a kind lacks is the reason it lacks it, as the user's error reads it
// ("transport.curve: not available with transport.kind gloo (REASON)"); nullptr = it has it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace atl::transport {

struct TransportKind {
  const char* name;
  const char* no_curve;     // transport.curve: CurveZMQ encryption and an allow-list of keys
  const char* no_star;      // transport.collective star: all-reduce through the coordinator
  const char* no_handover;  // an island rejoins a running run with a state hand-over
  const char* no_relays;    // launch --emulate-wan routes the data plane through WAN relays
};

inline constexpr TransportKind kTransportKinds[] = {
    {"zmq", nullptr, nullptr, nullptr, nullptr},
    {"gloo", "gloo's TCP data plane is neither encrypted nor authenticated; use zmq for untrusted networks",
     "gloo's pairs connect islands to each other only; use zmq", "use zmq",
     "gloo's pairs connect to ephemeral ports, which relays cannot stand between; use zmq"},
};

// The row of `name`, or nullptr.
inline const TransportKind* find_transport_kind(std::string_view name) {
  for (const auto& k : kTransportKinds)
    if (name == k.name) return &k;
  return nullptr;
}

inline std::vector<std::string> transport_kind_names() {
  std::vector<std::string> names;
  for (const auto& k : kTransportKinds) names.emplace_back(k.name);
  return names;
}

}  // namespace atl::transport
