#include "src/models/convnet.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "src/models/flat_params.h"
#include "src/models/layers.h"

namespace atl::models {

namespace {

// y = conv2d(x, W, b) with stride 1 and `padding` on each side; weight [out, in, k, k].
class ConvImpl : public torch::nn::Module {
 public:
  ConvImpl(torch::Tensor weight, torch::Tensor bias, int64_t padding) : padding_(padding) {
    weight_ = register_parameter("weight", std::move(weight));
    bias_ = register_parameter("bias", std::move(bias));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::conv2d(x, weight_, bias_, 1, padding_); }

 private:
  torch::Tensor weight_, bias_;
  int64_t padding_;
};
TORCH_MODULE(Conv);

// PyTorch's Conv2d default init: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
Conv conv_uniform(int64_t in, int64_t out, int64_t kernel, int64_t padding, at::Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in * kernel * kernel));
  torch::Tensor w = layers::uniform({out, in, kernel, kernel}, bound, gen);
  torch::Tensor b = layers::uniform({out}, bound, gen);
  return Conv(w, b, padding);
}

}  // namespace

struct ConvNetModule : torch::nn::Module {
  using Shape = ConvNet::Shape;
  static constexpr int64_t kKernel = ConvNet::kKernel;
  ConvNetModule(const Shape& s, int classes, at::Generator& gen) {
    conv1 = register_module("conv1", conv_uniform(1, s.c1, kKernel, 2, gen));
    conv2 = register_module("conv2", conv_uniform(s.c1, s.c2, kKernel, s.pad2, gen));
    int64_t in = s.flat;
    for (size_t i = 0; i < s.hidden.size(); ++i) {
      fc.push_back(register_module("fc" + std::to_string(i + 1), layers::dense_uniform(in, s.hidden[i], gen)));
      in = s.hidden[i];
    }
    out = register_module("out", layers::dense_uniform(in, classes, gen));
  }

  torch::Tensor forward(torch::Tensor x) {  // [B, 1, side, side] -> [B, classes]
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = x.flatten(1);
    for (auto& layer : fc) x = torch::relu(layer->forward(x));
    return out->forward(x);
  }

  Conv conv1{nullptr}, conv2{nullptr};
  std::vector<layers::Dense> fc;
  layers::Dense out{nullptr};
};

// image_side, expected_numel and shape_of: src/models/spec.cpp (no libtorch).
ConvNet::ConvNet(Kind kind, int64_t input_dim, int classes, c10::Device device, uint64_t seed)
    : kind_(kind), side_(image_side(kind, input_dim)), device_(device) {
  TORCH_CHECK(side_ > 0 && classes > 0, name(), ": input_dim must be a square image the poolings leave room in");
  const Shape s = shape_of(kind, side_);
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  net_ = std::make_shared<ConvNetModule>(s, classes, gen);
  FlatBuffers flat = flatten_parameters(*net_, device);
  adopt(std::move(flat));
  // Multiply-adds of one forward pass; x 2 FLOPs, x 3 for forward and backward.
  double macs = static_cast<double>(s.s1 * s.s1 * s.c1 * kKernel * kKernel) +
                static_cast<double>(s.s2 * s.s2 * s.c2 * s.c1 * kKernel * kKernel);
  int64_t in = s.flat;
  for (int64_t width : s.hidden) {
    macs += static_cast<double>(in * width);
    in = width;
  }
  macs += static_cast<double>(in * classes);
  flops_ = 6.0 * macs;
}

ConvNet::~ConvNet() = default;

at::Tensor ConvNet::logits(const at::Tensor& input) {
  auto x = input.to(device_, torch::kFloat, /*non_blocking=*/true);
  return net_->forward(x.reshape({x.size(0), 1, side_, side_}));
}

Output ConvNet::forward(const data::Batch& batch) {
  auto target = batch.target.to(device_, /*non_blocking=*/true);
  return layers::classify(logits(batch.input), target);
}

void ConvNet::set_training(bool training) { net_->train(training); }

torch::nn::Module& ConvNet::module() { return *net_; }

}  // namespace atl::models
