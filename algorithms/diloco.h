// DiLoCo (arXiv 2311.08105; docs/algorithms.md §1) and its overlapped variants (eager updates,
// arXiv 2502.12996; docs/algorithms.md §3): the pieces exposed for tests. The algorithm is in diloco.cpp.
#pragma once

#include <ATen/core/Tensor.h>

namespace atl::algorithms::diloco {

// The eager outer gradient of island m (docs/algorithms.md §3):
//   Delta(t-1) + share * (delta_m(t) - delta_m(t-1))
// i.e. the last completed average with this island's stale contribution replaced by its
// fresh one; share = w_m / sum_i w_i (1/M for uniform weights). Evaluated as
// (mean_prev - share * own_prev) + share * own_now, so that with one island (share 1,
// mean_prev == own_prev) the result is bitwise own_now. All [N] float32, same device.
at::Tensor eager_delta(const at::Tensor& mean_prev, const at::Tensor& own_prev,
                       const at::Tensor& own_now, double share);

}  // namespace atl::algorithms::diloco
