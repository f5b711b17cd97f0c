#include "transport/star.h"

#include <ATen/ATen.h>

namespace atl::transport::star {

at::Tensor mean(std::vector<at::Tensor>& values, const std::vector<double>& weights) {
  TORCH_CHECK(!values.empty() && values.size() == weights.size(), "star::mean: one weight per value");
  bool uniform = true;
  double weight_sum = 0;
  for (double w : weights) {
    uniform = uniform && w == weights[0];
    weight_sum += w;
  }
  at::Tensor sum = at::zeros_like(values[0]);
  for (size_t i = 0; i < values.size(); ++i) sum.add_(uniform ? values[i] : values[i].mul_(weights[i]));
  return sum.div_(uniform ? static_cast<double>(values.size()) : weight_sum);
}

}  // namespace atl::transport::star
