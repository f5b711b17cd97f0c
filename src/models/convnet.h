// The small image classifiers of the papers atoll reproduces (docs/reproductions.md), on one
// flat buffer like every model:
//   cnn     the FedAvg paper's MNIST CNN (McMahan et al. 2017, arXiv 1602.05629): two 5x5
//           convolutions of 32 and 64 channels ('same' padding), each followed by ReLU and
//           2x2 max pooling, a 512-unit fully connected layer with ReLU, and the output layer
//           (softmax in the loss): 1,663,370 parameters on 28x28 images, 10 classes;
//   lenet5  LeNet-5 (LeCun et al. 1998) as usually written today, with ReLU and max pooling:
//           5x5 convolutions of 6 ('same') and 16 (valid) channels, each followed by 2x2 max
//           pooling, fully connected 120-84-classes: 61,706 parameters on 28x28, 10 classes.
// Input: square single-channel images given flat (batch.input [B, side*side] or [B, 1, side,
// side]); `side` must leave something after the poolings (cnn: >= 4; lenet5: >= 12).
// Init: PyTorch's default for Conv2d and Linear, weight and bias ~ U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) (fan_in = in_channels * 25 for a convolution), from the seeded generator.
// Parameter names: conv1, conv2, fc1, (fc2,) out, each .weight and .bias, in that order.
//
// Owned by one island (thread); not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "src/models/model.h"

namespace torch::nn {
class Module;
}

namespace atl::models {

struct ConvNetModule;  // the torch::nn::Module (convnet.cpp)

class ConvNet final : public Model {
 public:
  enum class Kind { kCnn, kLenet5 };
  // Sizes are invariants here (TORCH_CHECK); make_model resolves and checks them.
  ConvNet(Kind kind, int64_t input_dim, int classes, c10::Device device, uint64_t seed);
  ~ConvNet() override;

  // Parameters for images of `side` x `side` and `classes` classes.
  static int64_t expected_numel(Kind kind, int64_t side, int64_t classes);
  // The image side for `input_dim` features, or 0 when they are not a square image this kind
  // can pool down.
  static int64_t image_side(Kind kind, int64_t input_dim);
  // One architecture's sizes on images of `side` (pure, like the two above: src/models/spec.cpp).
  static constexpr int64_t kKernel = 5;
  struct Shape {
    int64_t c1, c2, pad2;          // channels of the two convolutions; the second's padding
    int64_t s1, s2, flat;          // spatial side after conv1, after conv2; features into fc1
    std::vector<int64_t> hidden;   // fully connected widths before the output layer
  };
  static Shape shape_of(Kind kind, int64_t side);

  std::string name() const override { return kind_ == Kind::kCnn ? "cnn" : "lenet5"; }
  // Loss: mean cross-entropy; correct = argmax hits; count = B.
  Output forward(const data::Batch& batch) override;
  void set_training(bool training) override;
  // 2 x (multiply-adds of the forward pass) x 3 (forward and backward).
  double flops_per_example() const override { return flops_; }

  at::Tensor logits(const at::Tensor& input);
  torch::nn::Module& module();

 private:
  Kind kind_;
  int64_t side_;
  c10::Device device_;
  double flops_ = 0;
  std::shared_ptr<ConvNetModule> net_;
};

}  // namespace atl::models
