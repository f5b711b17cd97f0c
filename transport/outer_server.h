// The server side of star / parameter-server algorithms (FedAvg with client sampling,
// async local-SGD). The algorithm implements it; the transport hosts it: inside the
// simulator's process, or inside the coordinator in real runs.
//
// Called by the transport one message at a time (never concurrently).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "src/base/named_state.h"

namespace atl::transport {

class OuterServer {
 public:
  virtual ~OuterServer() = default;
  // An island pushed `payload` ([n] float32, decoded) with `weight` under `tag`.
  virtual void on_push(int island, uint64_t tag, const at::Tensor& payload, double weight) = 0;
  // An island asks for `tag`; nullopt = not available yet (the transport asks again after
  // the next push). The returned tensor is only read by the transport.
  virtual std::optional<at::Tensor> on_pull(int island, uint64_t tag) = 0;

  // Faults and deadlines (FedAvg drops lost and late clients from a round; docs/algorithms.md
  // §7). The defaults ignore them, as a server without rounds may.
  //
  // The transport's membership lost `island` (it failed or left); `at_s` is when that was
  // noticed, on the clock of on_time(). True when this changed the server's answers (a round
  // that waited only for it completed).
  virtual bool on_member_lost(int /*island*/, double /*at_s*/) { return false; }
  // The clock reads `now_s`: virtual seconds in the simulator, wall seconds since the
  // coordinator started in real runs. The transport calls it before each on_push (with the
  // push's arrival time) and on_pull, and in real runs periodically while pulls wait. A server
  // with deadlines acts on those that have passed; returns the latest deadline it acted on
  // (the time its answers changed), or a negative number when nothing changed.
  virtual double on_time(double /*now_s*/) { return -1; }
  // When the server's answers last changed, on the clock of on_time() (fedavg: when its
  // latest round closed, which may be after the push that closed it: a lost client counts
  // as gone only once noticed); negative when it keeps no such time (the simulator then
  // takes the latest push's arrival).
  virtual double changed_at() const { return -1; }
  // The earliest time at which on_time() would change an answer (fedavg: the open round's
  // deadline); infinity when none. The simulator wakes a waiting pull then.
  virtual double next_deadline() const { return std::numeric_limits<double>::infinity(); }

  // Checkpoints (docs/checkpoints.md, section `server`): the server's state between
  // messages, and back into a server made with the same options (before any message), as
  // named state (src/base/named_state.h; each server documents its names). Default: nothing
  // to save.
  using State = NamedState;
  virtual State state() const { return {}; }
  virtual void load(const State& /*state*/) {}
};

}  // namespace atl::transport
