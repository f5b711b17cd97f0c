// Error feedback for lossy compression (owned by the algorithm, checkpointable).
//
//   e = x + residual          before encoding: compensate(x) adds the residual in place
//   send encode(e)
//   residual = e - decode(encode(e))   after: update(e, transmitted)
//
// The caller passes what the receivers actually decoded from its contribution, so the
// residual is exact whatever the codec or the collective's chunking.
// Owned by one island; not thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

namespace atl::compression {

class ErrorFeedback {
 public:
  // x += residual (x: [n] float32). The first call sizes the residual (zeros).
  void compensate(at::Tensor& x);
  // residual = compensated - transmitted (both [n] float32).
  void update(const at::Tensor& compensated, const at::Tensor& transmitted);
  const at::Tensor& residual() const { return residual_; }
  void load(const at::Tensor& residual) { residual_ = residual.clone(); }

 private:
  at::Tensor residual_;
};

}  // namespace atl::compression
