#include "transport/tensor_pool.h"

#include <ATen/ATen.h>

namespace atl::transport {

at::Tensor TensorPool::take(int64_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = tensors_.begin(); it != tensors_.end(); ++it) {
      if (it->numel() == n) {
        at::Tensor t = std::move(*it);
        tensors_.erase(it);
        return t;
      }
    }
  }
  return at::empty({n}, at::kFloat);
}

void TensorPool::give(at::Tensor t) {
  if (!t.defined() || t.use_count() != 1) return;  // someone else still holds it
  std::lock_guard<std::mutex> lock(mu_);
  if (tensors_.size() >= max_tensors_) tensors_.erase(tensors_.begin());
  tensors_.push_back(std::move(t));
}

}  // namespace atl::transport
