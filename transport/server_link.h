// The island side of the server role (transport/outer_server.h) in real runs: Group::push
// and Group::pull over ControlPlane::push/pull, for every networked group (ZmqGroup,
// GlooGroup). Frames are encoded exactly as InprocGroup encodes them (push seed
// (tag << 16) ^ island id), so a server in the coordinator sees what the simulator's sees.
//
// Thread-safe: push/pull run on the calling thread and block until the control plane
// answers; the byte counters are atomic.
#pragma once

#include <atomic>
#include <memory>

#include "transport/control_plane.h"
#include "transport/group.h"

namespace atl::transport {

class ServerLink {
 public:
  explicit ServerLink(ControlPlane& control) : control_(control) {}

  // Encodes `buffer` and hands the frame to ControlPlane::push; `transmitted` (optional)
  // receives what the server decodes. A done handle: ok with {self} and `weight`, or the
  // control plane's error.
  std::unique_ptr<Handle> push(uint64_t tag, const at::Tensor& buffer, const compression::Pipeline& codec,
                               double weight, at::Tensor transmitted);
  // ControlPlane::pull (waits until the server answers), decoded into `out`.
  std::unique_ptr<Handle> pull(uint64_t tag, at::Tensor out, const compression::Pipeline& codec);

  // The frames' bytes so far (sent: pushed frames; received: pulled frames).
  ByteCounters bytes() const;

 private:
  ControlPlane& control_;
  std::atomic<uint64_t> sent_{0}, received_{0}, raw_{0};
};

}  // namespace atl::transport
