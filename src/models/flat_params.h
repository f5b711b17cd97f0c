// Moves the parameters of a torch::nn::Module into one flat buffer (and their gradients into
// a second one), so that Model::params()/grads() are the model's real storage.
//
// After flatten_parameters(module, device):
//   params  [N] float32 contiguous on `device`, holding every parameter's initial value;
//   grads   [N] float32 contiguous on `device`, zero;
//   every parameter p of `module` is a view params[offset : offset + numel].view(shape)
//   (p.set_data), and p.grad() is the view grads[offset : offset + numel].view(shape).
// Autograd accumulates into an existing .grad in place (backward runs without grad mode), so
// gradients land in `grads` and stay there until the caller runs grads.zero_(). Never set a
// parameter's grad to undefined (set_to_none), nor run backward with create_graph=true (autograd
// then replaces .grad with a new tensor): the view would be lost.
//
// A parameter registered in two places (same TensorImpl) is stored once. Tied weights must
// be tied this way, or by using one parameter's tensor in two places in forward.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "src/models/model.h"

namespace torch::nn {
class Module;
}

namespace atl::models {

struct FlatBuffers {
  at::Tensor params;               // [N] float32, contiguous
  at::Tensor grads;                // [N] float32, contiguous, zero
  std::vector<ParamSlice> layout;  // one slice per parameter, in named_parameters() order
  std::vector<at::Tensor> parameters;  // the module's parameters, one per slice
};

// Flattens `module` (parameters may be on any device; they must be float32). Buffers of the
// module are moved to `device` as well. Throws c10::Error if a parameter is not float32.
FlatBuffers flatten_parameters(torch::nn::Module& module, c10::Device device);

// Transformer block index of a parameter name: "blocks.3.attn.qkv.weight" -> 3; -1 otherwise.
int block_index(const std::string& name);

}  // namespace atl::models
