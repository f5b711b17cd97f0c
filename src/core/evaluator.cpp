#include "src/core/evaluator.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

namespace atl::core {

Evaluator::Evaluator(std::unique_ptr<models::Model> model, std::vector<data::Batch> batches,
                     bool classifier)
    : model_(std::move(model)), batches_(std::move(batches)), classifier_(classifier) {}

EvalResult Evaluator::evaluate(const at::Tensor& params) {
  at::NoGradGuard no_grad;
  model_->params().copy_(params);
  model_->set_training(false);
  double loss_sum = 0;
  int64_t count = 0, correct = 0;
  for (const auto& batch : batches_) {
    models::Output out = model_->forward(batch);
    loss_sum += out.loss.item<double>() * static_cast<double>(out.count);
    count += out.count;
    correct += out.correct;
  }
  EvalResult r;
  r.count = count;
  r.loss = count > 0 ? loss_sum / static_cast<double>(count) : 0;
  if (classifier_ && count > 0) r.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  return r;
}

}  // namespace atl::core
