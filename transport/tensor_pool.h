// Recycled [n] float32 tensors for the networked groups' all-reduces (their result tensors
// and the results they keep for hand-overs), so that steady-state collectives neither map
// fresh pages nor fault them in again.
//
// Thread-safe. A tensor given back while anything else still holds it (a send in flight, a
// kept result) is not taken: it must not be handed out and overwritten.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace atl::transport {

class TensorPool {
 public:
  explicit TensorPool(size_t max_tensors) : max_tensors_(max_tensors) {}
  // An uninitialised [n] float32 CPU tensor, reused when one of that size was given back.
  at::Tensor take(int64_t n);
  void give(at::Tensor t);

 private:
  const size_t max_tensors_;
  std::mutex mu_;
  std::vector<at::Tensor> tensors_;
};

}  // namespace atl::transport
