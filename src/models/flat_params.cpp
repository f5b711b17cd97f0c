#include "src/models/flat_params.h"

#include <torch/torch.h>

#include <unordered_set>

namespace atl::models {

int block_index(const std::string& name) {
  static const std::string kPrefix = "blocks.";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  size_t pos = kPrefix.size();
  size_t end = name.find('.', pos);
  if (end == std::string::npos || end == pos) return -1;
  int index = 0;
  for (size_t i = pos; i < end; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    index = index * 10 + (name[i] - '0');
  }
  return index;
}

FlatBuffers flatten_parameters(torch::nn::Module& module, c10::Device device) {
  torch::NoGradGuard no_grad;

  // Distinct parameters, in registration order (a tensor registered twice counts once).
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    TORCH_CHECK(p.scalar_type() == torch::kFloat, "flatten_parameters: parameter ", item.key(),
                " is ", p.scalar_type(), ", expected float32");
    if (!seen.insert(p.unsafeGetTensorImpl()).second) continue;
    params.emplace_back(item.key(), p);
  }

  FlatBuffers flat;
  int64_t total = 0;
  for (auto& [name, p] : params) {
    ParamSlice slice;
    slice.name = name;
    slice.offset = total;
    slice.numel = p.numel();
    slice.shape = p.sizes().vec();
    slice.block = block_index(name);
    flat.layout.push_back(std::move(slice));
    total += p.numel();
  }

  auto options = torch::TensorOptions().dtype(torch::kFloat).device(device);
  flat.params = torch::empty({total}, options);
  flat.grads = torch::zeros({total}, options);

  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor& p = params[i].second;
    const ParamSlice& slice = flat.layout[i];
    torch::Tensor value = flat.params.narrow(0, slice.offset, slice.numel).view(slice.shape);
    torch::Tensor grad = flat.grads.narrow(0, slice.offset, slice.numel).view(slice.shape);
    value.copy_(p.detach());  // may cross devices (init happens on the CPU)
    p.set_data(value);        // p now shares the flat storage (with an offset)
    p.mutable_grad() = grad;  // autograd accumulates into this view in place
    flat.parameters.push_back(p);
  }
  for (auto& buffer : module.buffers(/*recurse=*/true)) {
    buffer.set_data(buffer.to(device));
  }
  return flat;
}

void Model::adopt(FlatBuffers&& flat) {
  params_ = std::move(flat.params);
  grads_ = std::move(flat.grads);
  layout_ = std::move(flat.layout);
  parameters_ = std::move(flat.parameters);
}

void Model::use_gradients(const at::Tensor& grads) {
  TORCH_CHECK(grads.numel() == numel() && grads.is_contiguous() && grads.scalar_type() == at::kFloat &&
                  grads.device() == params_.device(),
              "use_gradients: a gradient buffer of ", numel(), " float32 values on ", params_.device(),
              " is needed");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const ParamSlice& slice = layout_[i];
    parameters_[i].mutable_grad() = grads.view({-1}).narrow(0, slice.offset, slice.numel).view(slice.shape);
  }
  grads_ = grads.view({-1});
}

}  // namespace atl::models
