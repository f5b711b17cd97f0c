// Building blocks shared by the models (internal to src/models; includes <torch/torch.h>).
//
// Layers are written with register_parameter on tensors that the caller initialises, instead
// of torch::nn::Linear & co., because those draw their default init from the global RNG:
// atoll initialises every parameter from a local, seeded CPU generator (same seed -> bitwise
// same parameters, and building a model leaves the global RNG untouched).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "src/models/model.h"

namespace atl::models::layers {

// Init draws on the CPU from `gen` (float32); the flat buffer copies them to the device.
inline torch::Tensor normal(std::vector<int64_t> shape, double std, at::Generator& gen) {
  return torch::empty(shape, torch::kFloat).normal_(0.0, std, gen);
}
inline torch::Tensor uniform(std::vector<int64_t> shape, double bound, at::Generator& gen) {
  return torch::empty(shape, torch::kFloat).uniform_(-bound, bound, gen);
}

// y = x W^T + b. weight [out, in], bias [out] (or undefined for no bias).
class DenseImpl : public torch::nn::Module {
 public:
  DenseImpl(torch::Tensor weight, torch::Tensor bias) {
    weight_ = register_parameter("weight", std::move(weight));
    if (bias.defined()) bias_ = register_parameter("bias", std::move(bias));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::linear(x, weight_, bias_); }

 private:
  torch::Tensor weight_;
  torch::Tensor bias_;
};
TORCH_MODULE(Dense);

// Linear layer with nanoGPT init: weight ~ N(0, std), zero bias.
inline Dense dense_normal(int64_t in, int64_t out, bool bias, double std, at::Generator& gen) {
  torch::Tensor w = normal({out, in}, std, gen);
  return Dense(w, bias ? torch::zeros({out}) : torch::Tensor());
}

// Linear layer with PyTorch's default init: weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)).
inline Dense dense_uniform(int64_t in, int64_t out, at::Generator& gen) {
  double bound = 1.0 / std::sqrt(static_cast<double>(in));
  torch::Tensor w = uniform({out, in}, bound, gen);
  torch::Tensor b = uniform({out}, bound, gen);
  return Dense(w, b);
}

// A module holding one parameter named "weight" (embedding tables, an untied LM head), so
// that its name reads "tok_emb.weight" (parameter names cannot contain dots).
class WeightImpl : public torch::nn::Module {
 public:
  explicit WeightImpl(torch::Tensor weight) {
    weight_ = register_parameter("weight", std::move(weight));
  }
  const torch::Tensor& weight() const { return weight_; }

 private:
  torch::Tensor weight_;
};
TORCH_MODULE(Weight);

// LayerNorm over the last dimension, weight 1 and bias 0 at init.
class NormImpl : public torch::nn::Module {
 public:
  explicit NormImpl(int64_t dim) : dim_(dim) {
    weight_ = register_parameter("weight", torch::ones({dim}));
    bias_ = register_parameter("bias", torch::zeros({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::layer_norm(x, {dim_}, weight_, bias_, 1e-5);
  }

 private:
  int64_t dim_;
  torch::Tensor weight_;
  torch::Tensor bias_;
};
TORCH_MODULE(Norm);

// A classifier's output for `logits` [B, classes] and `target` [B] (on the logits' device):
// mean cross-entropy, argmax hits, B.
inline Output classify(const torch::Tensor& logits, const torch::Tensor& target) {
  Output out;
  out.loss = torch::nn::functional::cross_entropy(logits, target);
  out.correct = logits.argmax(1).eq(target).sum().item<int64_t>();
  out.count = target.size(0);
  return out;
}

}  // namespace atl::models::layers
