// Inner-step throughput of atoll's models on their flat buffers, to compare with the same loop
// in PyTorch Python (tests/bench/inner_step_pytorch.py; scripts/bench_inner.sh runs both).
// --model gpt (default) or one of the papers' image classifiers, cnn or lenet5, on random
// 28x28 images of 10 classes (then seq_len counts as 1: tokens_per_s is examples per second).
//
// One inner step = zero grads, forward on a random batch ([batch, seq_len] bytes), backward,
// global grad-norm clip to 1.0, AdamW (lr 1e-3, betas 0.9/0.95, eps 1e-8, wd 0.1) written as
// a handful of whole-buffer ops on params()/grads() -- the way the trainer updates a model.
// Prints one JSON line: {"impl":"atoll", ..., "tokens_per_s": ...}.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <thread>

#include "src/models/model.h"

namespace {

struct Options {
  std::string model = "gpt";
  int layers = 4, heads = 4, dim = 128, seq_len = 128, vocab = 256, batch = 16;
  int warmup = 5;   // untimed steps first (allocator, thread pool)
  int steps = 20;   // timed steps
  int threads = 0;  // torch::set_num_threads; 0 = hardware threads
  std::string device = "cpu";
  uint64_t seed = 0;
};

// AdamW on the flat buffers (decoupled weight decay, bias-corrected moments).
struct FlatAdamW {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  torch::Tensor m, v;  // [N], like params
  int64_t step = 0;

  void update(torch::Tensor& params, const torch::Tensor& grads) {
    if (!m.defined()) {
      m = torch::zeros_like(params);
      v = torch::zeros_like(params);
    }
    ++step;
    const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    m.mul_(beta1).add_(grads, 1.0 - beta1);
    v.mul_(beta2).addcmul_(grads, grads, 1.0 - beta2);
    params.mul_(1.0 - lr * weight_decay);
    params.addcdiv_(m, (v / bc2).sqrt_().add_(eps), -lr / bc1);
  }
};

// grads *= min(1, max_norm / (||grads|| + 1e-6)), without a host sync (like clip_grad_norm_).
void clip_grad_norm(torch::Tensor& grads, double max_norm) {
  auto coef = (max_norm / (grads.norm() + 1e-6)).clamp_max_(1.0);
  grads.mul_(coef);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("atoll inner-step throughput (GPT, flat-buffer AdamW)");
  app.add_option("--model", o.model, "gpt, cnn or lenet5");
  app.add_option("--layers", o.layers);
  app.add_option("--heads", o.heads);
  app.add_option("--dim", o.dim);
  app.add_option("--seq-len", o.seq_len);
  app.add_option("--vocab", o.vocab);
  app.add_option("--batch", o.batch);
  app.add_option("--warmup", o.warmup);
  app.add_option("--steps", o.steps);
  app.add_option("--threads", o.threads, "0 = hardware threads");
  app.add_option("--device", o.device);
  app.add_option("--seed", o.seed);
  CLI11_PARSE(app, argc, argv);

  const int threads =
      o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency());
  torch::set_num_threads(threads);

  atl::config::ModelConfig config;
  config.name = o.model;
  const bool image = o.model != "gpt";
  if (image) o.seq_len = 1;
  config.layers = o.layers;
  config.heads = o.heads;
  config.dim = o.dim;
  config.seq_len = o.seq_len;
  config.vocab = o.vocab;
  config.dropout = 0.0;
  config.tie_embeddings = true;
  const c10::Device device(o.device);
  auto model = atl::models::make_model(
      config, image ? atl::models::DataShape{0, 10, 784} : atl::models::DataShape{o.vocab, 0, 0}, device, o.seed);
  model->set_training(true);

  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed + 1);
  FlatAdamW adamw;
  float loss = 0.0f;
  auto start = std::chrono::steady_clock::now();
  for (int step = 0; step < o.warmup + o.steps; ++step) {
    if (step == o.warmup) {
      (void)model->params().sum().item<float>();  // drain queued device work before timing
      start = std::chrono::steady_clock::now();
    }
    atl::data::Batch batch;
    if (image) {
      batch = {torch::randn({o.batch, 784}, gen), torch::randint(10, {o.batch}, gen, torch::kLong)};
    } else {
      auto tokens = torch::randint(o.vocab, {o.batch, o.seq_len + 1}, gen, torch::kLong);
      batch = {tokens.narrow(1, 0, o.seq_len), tokens.narrow(1, 1, o.seq_len)};
    }
    model->grads().zero_();
    auto out = model->forward(batch);
    out.loss.backward();
    torch::NoGradGuard no_grad;
    clip_grad_norm(model->grads(), 1.0);
    adamw.update(model->params(), model->grads());
    if (step + 1 == o.warmup + o.steps) loss = out.loss.item<float>();  // also a device sync
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double tokens = static_cast<double>(o.steps) * o.batch * o.seq_len;

  std::printf(
      "{\"impl\":\"atoll\",\"model\":\"%s\",\"threads\":%d,\"device\":\"%s\",\"params\":%lld,\"batch\":%d,"
      "\"seq_len\":%d,\"steps\":%d,\"seconds\":%.4f,\"ms_per_step\":%.3f,\"tokens_per_s\":%.1f,"
      "\"final_loss\":%.4f}\n",
      o.model.c_str(), threads, o.device.c_str(), static_cast<long long>(model->numel()), o.batch, o.seq_len,
      o.steps, seconds, 1e3 * seconds / o.steps, tokens / seconds, loss);
  return 0;
}
