#include "transport/zmq/buffer_pool.h"

#include <ATen/ATen.h>

namespace atl::transport::dataplane {

std::shared_ptr<Bytes> BufferPool::take_bytes() {
  std::unique_ptr<Bytes> b;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!bytes_.empty()) {
      b = std::move(bytes_.back());
      bytes_.pop_back();
    }
  }
  if (!b) b = std::make_unique<Bytes>();
  std::shared_ptr<BufferPool> self = shared_from_this();
  return std::shared_ptr<Bytes>(b.release(), [self](Bytes* p) { self->give_bytes(p); });
}

std::shared_ptr<Bytes> BufferPool::bytes(size_t size) {
  std::shared_ptr<Bytes> b = take_bytes();
  b->resize(size);
  return b;
}

void BufferPool::give_bytes(Bytes* b) {
  std::unique_ptr<Bytes> owned(b);
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_.size() < max_buffers_) bytes_.push_back(std::move(owned));
}

at::Tensor BufferPool::tensor(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (tensors_[i].numel() == n) {
        at::Tensor t = std::move(tensors_[i]);
        tensors_.erase(tensors_.begin() + static_cast<std::ptrdiff_t>(i));
        return t;
      }
    }
  }
  return at::empty({n}, at::kFloat);
}

void BufferPool::give(at::Tensor t) {
  if (!t.defined() || t.use_count() != 1) return;  // someone else still holds it
  std::lock_guard<std::mutex> lock(mu_);
  if (tensors_.size() >= max_tensors_) tensors_.erase(tensors_.begin());
  tensors_.push_back(std::move(t));
}

}  // namespace atl::transport::dataplane
