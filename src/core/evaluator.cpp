#include "src/core/evaluator.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>

#include "src/models/gpt.h"

namespace atl::core {

Evaluator::Evaluator(std::unique_ptr<models::Model> model, std::vector<data::Batch> batches, bool classifier)
    : model_(std::move(model)), classifier_(classifier) {
  routings_.push_back({0, {std::move(batches)}, {}});
}

Evaluator::Evaluator(std::unique_ptr<models::Model> model, std::vector<std::vector<data::Batch>> batches_by_path,
                     std::vector<int64_t> train_sizes, bool classifier)
    : model_(std::move(model)), classifier_(classifier), routed_(true) {
  TORCH_CHECK(!batches_by_path.empty() && batches_by_path.size() == train_sizes.size(),
              "Evaluator: one batch list and one shard size per path");
  routings_.push_back({0, std::move(batches_by_path), std::move(train_sizes)});
}

void Evaluator::reroute(int64_t from_step, std::vector<std::vector<data::Batch>> batches_by_path,
                        std::vector<int64_t> train_sizes) {
  TORCH_CHECK(routed_ && batches_by_path.size() == routings_.front().batches.size() &&
                  train_sizes.size() == batches_by_path.size(),
              "Evaluator::reroute: one batch list and one shard size per path of a routed evaluator");
  for (const Routing& r : routings_)
    if (r.from_step == from_step) return;
  TORCH_CHECK(from_step > routings_.back().from_step, "Evaluator::reroute: from_step ", from_step,
              " is not after the latest routing's");
  routings_.push_back({from_step, std::move(batches_by_path), std::move(train_sizes)});
}

EvalResult Evaluator::evaluate(const at::Tensor& params, int path, int64_t step) {
  TORCH_CHECK(routed_ ? path >= 0 && path < paths() : path < 0, "Evaluator::evaluate: path ", path,
              routed_ ? " outside the routed paths" : " given to a whole-split evaluator");
  const Routing* routing = &routings_.front();
  for (const Routing& r : routings_)
    if (r.from_step <= step) routing = &r;
  at::NoGradGuard no_grad;
  model_->params().copy_(params);
  model_->set_training(false);
  double loss_sum = 0;
  int64_t count = 0, correct = 0, sequences = 0;
  for (const auto& batch : routing->batches[routed_ ? static_cast<size_t>(path) : 0]) {
    models::Output out = model_->forward(batch);
    loss_sum += out.loss.item<double>() * static_cast<double>(out.count);
    count += out.count;
    correct += out.correct;
    sequences += batch.target.size(0);
  }
  EvalResult r;
  r.count = count;
  r.loss = count > 0 ? loss_sum / static_cast<double>(count) : (routed_ ? NAN : 0);
  if (classifier_ && count > 0) r.accuracy = static_cast<double>(correct) / static_cast<double>(count);
  if (routed_) {
    r.path = path;
    r.paths = paths();
    r.sequences = sequences;
    r.train_sequences = routing->train_sizes[static_cast<size_t>(path)];
  }
  return r;
}

std::vector<double> Evaluator::sequence_losses(const at::Tensor& params, const std::vector<data::Batch>& batches) {
  auto* gpt = dynamic_cast<models::Gpt*>(model_.get());
  TORCH_CHECK(gpt != nullptr, "Evaluator::sequence_losses: the model is not a gpt");
  at::NoGradGuard no_grad;
  model_->params().copy_(params);
  model_->set_training(false);
  std::vector<double> out;
  for (const auto& batch : batches) {
    at::Tensor logits = gpt->logits(batch.input);  // [B, T, V]
    at::Tensor target = batch.target.to(logits.device());
    const int64_t T = target.size(1), from = batch.score_from;
    logits = logits.narrow(1, from, T - from);
    target = target.narrow(1, from, T - from);
    // [B, T'] per-token cross-entropy, then the mean of each row, in double on the CPU.
    const at::Tensor nll = -at::log_softmax(logits, -1).gather(-1, target.unsqueeze(-1)).squeeze(-1);
    const at::Tensor rows = nll.to(at::kCPU, at::kDouble).mean(1).contiguous();
    out.insert(out.end(), rows.data_ptr<double>(), rows.data_ptr<double>() + rows.numel());
  }
  return out;
}

}  // namespace atl::core
