#include "src/models/mlp.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "src/models/flat_params.h"
#include "src/models/layers.h"

namespace atl::models {

struct MlpNet : torch::nn::Module {
  MlpNet(int64_t input_dim, const std::vector<int>& hidden, int classes, at::Generator& gen) {
    auto list = register_module("layers", torch::nn::ModuleList());
    int64_t in = input_dim;
    for (int width : hidden) {
      dense.push_back(layers::dense_uniform(in, width, gen));
      in = width;
    }
    dense.push_back(layers::dense_uniform(in, classes, gen));
    for (auto& layer : dense) list->push_back(layer);
  }

  torch::Tensor forward(torch::Tensor x) {  // [B, input_dim] -> [B, classes]
    for (size_t i = 0; i + 1 < dense.size(); ++i) x = torch::relu(dense[i]->forward(x));
    return dense.back()->forward(x);
  }

  std::vector<layers::Dense> dense;  // hidden layers, then the output layer
};

Mlp::Mlp(int64_t input_dim, const std::vector<int>& hidden, int classes, c10::Device device,
         uint64_t seed)
    : device_(device) {
  TORCH_CHECK(input_dim > 0 && classes > 0, "mlp: input_dim and classes must be positive");
  for (int width : hidden) TORCH_CHECK(width > 0, "mlp: hidden widths must be positive");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  net_ = std::make_shared<MlpNet>(input_dim, hidden, classes, gen);
  FlatBuffers flat = flatten_parameters(*net_, device);
  adopt(std::move(flat));
}

Mlp::~Mlp() = default;

at::Tensor Mlp::logits(const at::Tensor& input) {
  auto x = input.to(device_, torch::kFloat, /*non_blocking=*/true);
  return net_->forward(x.reshape({x.size(0), -1}));
}

Output Mlp::forward(const data::Batch& batch) {
  auto target = batch.target.to(device_, /*non_blocking=*/true);
  return layers::classify(logits(batch.input), target);
}

void Mlp::set_training(bool training) { net_->train(training); }

torch::nn::Module& Mlp::module() { return *net_; }

double Mlp::flops_per_example() const { return 6.0 * static_cast<double>(numel()); }

}  // namespace atl::models
