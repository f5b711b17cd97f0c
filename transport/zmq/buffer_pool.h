// Recycled memory for the data plane's hot path, so that steady-state collectives neither
// map fresh pages nor fault them in again: frame buffers (one per wire message payload) and
// the [n] float32 tensors an all-reduce keeps (its saved input, then its retained result).
//
// Thread-safe: buffers come back from ZeroMQ's I/O thread (zero-copy sends) and tensors are
// taken on the island thread. A buffer handed out keeps its pool alive.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace atl::transport::dataplane {

using Bytes = std::vector<uint8_t>;

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Create with std::make_shared (buffers hold a reference to the pool).
  BufferPool(size_t max_buffers, size_t max_tensors) : max_buffers_(max_buffers), max_tensors_(max_tensors) {}

  // A byte buffer of exactly `size` bytes with unspecified contents, back in the pool when the
  // last reference is dropped: only bytes beyond its earlier size are zero-filled, so
  // steady-state reuse writes nothing before the caller.
  std::shared_ptr<Bytes> bytes(size_t size);
  // An uninitialised [n] float32 tensor, reused when one of that size was given back.
  at::Tensor tensor(int64_t n);
  void give(at::Tensor t);

 private:
  std::shared_ptr<Bytes> take_bytes();  // pooled or new, as it was given back
  void give_bytes(Bytes* b);

  const size_t max_buffers_, max_tensors_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Bytes>> bytes_;
  std::vector<at::Tensor> tensors_;
};

}  // namespace atl::transport::dataplane
