// Recycled frame buffers (one per wire message payload) for the data plane's hot path, so
// that steady-state collectives neither map fresh pages nor fault them in again. (An
// all-reduce's result tensors come from a TensorPool: transport/tensor_pool.h.)
//
// Thread-safe: buffers come back from ZeroMQ's I/O thread (zero-copy sends). A buffer handed
// out keeps its pool alive.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace atl::transport::dataplane {

using Bytes = std::vector<uint8_t>;

class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  // Create with std::make_shared (buffers hold a reference to the pool).
  explicit BufferPool(size_t max_buffers) : max_buffers_(max_buffers) {}

  // A byte buffer of exactly `size` bytes with unspecified contents, back in the pool when the
  // last reference is dropped: only bytes beyond its earlier size are zero-filled, so
  // steady-state reuse writes nothing before the caller.
  std::shared_ptr<Bytes> bytes(size_t size);

 private:
  void give_bytes(Bytes* b);

  const size_t max_buffers_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Bytes>> bytes_;
};

}  // namespace atl::transport::dataplane
