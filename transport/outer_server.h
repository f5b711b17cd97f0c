// The server side of star / parameter-server algorithms (FedAvg with client sampling,
// async local-SGD). The algorithm implements it; the transport hosts it: inside the
// simulator's process, or inside the coordinator in real runs.
//
// Called by the transport one message at a time (never concurrently).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace atl::transport {

class OuterServer {
 public:
  virtual ~OuterServer() = default;
  // An island pushed `payload` ([n] float32, decoded) with `weight` under `tag`.
  virtual void on_push(int island, uint64_t tag, const at::Tensor& payload, double weight) = 0;
  // An island asks for `tag`; nullopt = not available yet (the transport asks again after
  // the next push). The returned tensor is only read by the transport.
  virtual std::optional<at::Tensor> on_pull(int island, uint64_t tag) = 0;
};

}  // namespace atl::transport
