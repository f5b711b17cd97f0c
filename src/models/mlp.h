// Multi-layer perceptron classifier (the FedAvg paper's "2NN" with hidden = {200, 200}).
//
//   x [B, input_dim] -> (Linear -> ReLU) per hidden width -> Linear -> logits [B, classes]
// Init: PyTorch's Linear default, weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn
// from the seeded local generator.
// Parameter names: layers.<i>.{weight,bias}, the last one being the output layer.
//
// Owned by one island (thread); not thread-safe.
#pragma once

#include <memory>

#include "src/models/model.h"

namespace torch::nn {
class Module;
}

namespace atl::models {

struct MlpNet;  // the torch::nn::Module (mlp.cpp)

class Mlp final : public Model {
 public:
  // Sizes are invariants here (TORCH_CHECK); make_model resolves and checks them.
  Mlp(int64_t input_dim, const std::vector<int>& hidden, int classes, c10::Device device,
      uint64_t seed);
  ~Mlp() override;

  std::string name() const override { return "mlp"; }
  // batch.input [B, ...] float32 (flattened to [B, input_dim]), batch.target [B] int64.
  // Loss: mean cross-entropy; correct = argmax hits; count = B.
  Output forward(const data::Batch& batch) override;
  void set_training(bool training) override;
  // 6 N: every parameter is used once in a multiply-add forward, twice backward.
  double flops_per_example() const override;

  // [B, input_dim] float32 (any device) -> [B, classes] logits on the model's device.
  at::Tensor logits(const at::Tensor& input);
  torch::nn::Module& module();

 private:
  c10::Device device_;
  std::shared_ptr<MlpNet> net_;
};

}  // namespace atl::models
