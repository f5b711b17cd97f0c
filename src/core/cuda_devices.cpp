// validate_config in the engine: check_config with libtorch's view of CUDA.
#include <ATen/Context.h>
#include <torch/cuda.h>

#include "src/core/validate.h"

namespace atl::core {
namespace {

CudaDevices libtorch_cuda() {
  CudaDevices d;
  d.built = at::hasCUDA();
  if (d.built) d.count = static_cast<int>(torch::cuda::device_count());
  return d;
}

}  // namespace

void validate_config(const config::Config& config, Target target) { check_config(config, target, libtorch_cuda); }

}  // namespace atl::core
