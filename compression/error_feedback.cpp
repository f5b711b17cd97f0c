#include "compression/error_feedback.h"

#include <ATen/ATen.h>

namespace atl::compression {

namespace {
void check_flat(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined() && t.scalar_type() == at::kFloat && t.dim() == 1 && t.device().is_cpu(),
              "error feedback: ", what, " must be a [n] float32 CPU tensor");
}
}  // namespace

void ErrorFeedback::compensate(at::Tensor& x) {
  check_flat(x, "the buffer");
  if (!residual_.defined()) {
    residual_ = at::zeros_like(x, at::MemoryFormat::Contiguous);
    return;  // x + 0 == x
  }
  TORCH_CHECK(residual_.numel() == x.numel(), "error feedback: buffer has ", x.numel(),
              " elements, the residual ", residual_.numel());
  x.add_(residual_);
}

void ErrorFeedback::update(const at::Tensor& compensated, const at::Tensor& transmitted) {
  check_flat(compensated, "compensated");
  check_flat(transmitted, "transmitted");
  TORCH_CHECK(compensated.numel() == transmitted.numel(), "error feedback: compensated has ",
              compensated.numel(), " elements, transmitted ", transmitted.numel());
  if (!residual_.defined() || residual_.numel() != compensated.numel()) {
    residual_ = at::empty_like(compensated, at::MemoryFormat::Contiguous);
  }
  // One fp32 subtraction per element: compensated == transmitted + residual up to that
  // rounding, and exactly (Sterbenz) whenever transmitted is within a factor 2 of compensated.
  at::sub_out(residual_, compensated, transmitted);
}

}  // namespace atl::compression
