#include "transport/zmq/buffer_pool.h"

namespace atl::transport::dataplane {

std::shared_ptr<Bytes> BufferPool::bytes(size_t size) {
  std::unique_ptr<Bytes> b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!bytes_.empty()) {
      b = std::move(bytes_.back());
      bytes_.pop_back();
    }
  }
  if (!b) b = std::make_unique<Bytes>();
  b->resize(size);
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<Bytes>(b.release(), [self](Bytes* p) { self->give_bytes(p); });
}

void BufferPool::give_bytes(Bytes* b) {
  std::unique_ptr<Bytes> owned(b);
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_.size() < max_buffers_) bytes_.push_back(std::move(owned));
}

}  // namespace atl::transport::dataplane
