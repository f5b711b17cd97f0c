#include "src/models/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "src/models/flat_params.h"
#include "src/models/layers.h"

namespace atl::models {

namespace {

constexpr double kInitStd = 0.02;  // nanoGPT / GPT-2

// Causal self-attention, written out (libtorch 1.13 has no fused attention kernel anyway).
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(int64_t dim, int64_t heads, double dropout, double proj_std, at::Generator& gen)
      : dim_(dim), heads_(heads), dropout_(dropout) {
    qkv_ = register_module("qkv", layers::dense_normal(dim, 3 * dim, true, kInitStd, gen));
    proj_ = register_module("proj", layers::dense_normal(dim, dim, true, proj_std, gen));
  }

  // x [B, T, dim]; future [T, T] float: 0 where key j <= query i, -inf where j > i.
  // The scale and the causal mask are folded into one baddbmm (att = future + s * q k^T),
  // which saves two passes over the [B*H, T, T] scores against matmul + mul + masked_fill.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future) {
    const int64_t B = x.size(0), T = x.size(1), hd = dim_ / heads_;
    auto qkv = qkv_->forward(x).split(dim_, /*dim=*/2);  // 3 x [B, T, dim]
    auto heads = [&](const torch::Tensor& t) {           // -> [B*H, T, hd]
      return t.view({B, T, heads_, hd}).transpose(1, 2).reshape({B * heads_, T, hd});
    };
    auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    auto att = torch::baddbmm(future, q, k.transpose(1, 2), /*beta=*/1, /*alpha=*/scale);
    att = torch::softmax(att, -1);  // [B*H, T, T]
    att = torch::dropout(att, dropout_, is_training());
    auto y = torch::bmm(att, v);    // [B*H, T, hd]
    y = y.view({B, heads_, T, hd}).transpose(1, 2).contiguous().view({B, T, dim_});
    return torch::dropout(proj_->forward(y), dropout_, is_training());
  }

 private:
  int64_t dim_, heads_;
  double dropout_;
  layers::Dense qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(Attention);

class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, double dropout, double proj_std, at::Generator& gen)
      : dropout_(dropout) {
    fc_ = register_module("fc", layers::dense_normal(dim, 4 * dim, true, kInitStd, gen));
    proj_ = register_module("proj", layers::dense_normal(4 * dim, dim, true, proj_std, gen));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::dropout(proj_->forward(torch::gelu(fc_->forward(x))), dropout_, is_training());
  }

 private:
  double dropout_;
  layers::Dense fc_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(FeedForward);

class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(int64_t dim, int64_t heads, double dropout, double proj_std, at::Generator& gen) {
    ln1_ = register_module("ln1", layers::Norm(dim));
    attn_ = register_module("attn", Attention(dim, heads, dropout, proj_std, gen));
    ln2_ = register_module("ln2", layers::Norm(dim));
    mlp_ = register_module("mlp", FeedForward(dim, dropout, proj_std, gen));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& future) {
    x = x + attn_->forward(ln1_->forward(x), future);
    return x + mlp_->forward(ln2_->forward(x));
  }

 private:
  layers::Norm ln1_{nullptr}, ln2_{nullptr};
  Attention attn_{nullptr};
  FeedForward mlp_{nullptr};
};
TORCH_MODULE(Block);

}  // namespace

struct GptNet : torch::nn::Module {
  GptNet(const config::ModelConfig& c, at::Generator& gen) : dropout(c.dropout) {
    const double proj_std = kInitStd / std::sqrt(2.0 * c.layers);
    auto table = [&](int64_t rows) {
      return layers::Weight(layers::normal({rows, c.dim}, kInitStd, gen));
    };
    tok_emb = register_module("tok_emb", table(c.vocab));
    pos_emb = register_module("pos_emb", table(c.seq_len));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < c.layers; ++i) {
      Block block(c.dim, c.heads, c.dropout, proj_std, gen);
      blocks->push_back(block);
      block_list.push_back(block);
    }
    ln_f = register_module("ln_f", layers::Norm(c.dim));
    if (!c.tie_embeddings) {
      head = register_module("head", table(c.vocab));
    }
    future = torch::full({c.seq_len, c.seq_len}, -std::numeric_limits<float>::infinity()).triu(1);
  }

  // tokens [B, T] int64 on the model's device -> logits [B, T, vocab].
  torch::Tensor forward(const torch::Tensor& tokens) {
    auto x = ln_f->forward(hidden(tokens));
    return torch::linear(x, head.is_empty() ? tok_emb->weight() : head->weight());  // tied: the head is tok_emb
  }

  // tokens [B, T] -> the last block's output [B, T, dim] (before the final norm).
  torch::Tensor hidden(const torch::Tensor& tokens) {
    TORCH_CHECK(tokens.dim() == 2, "gpt: input must be [B, T], got ", tokens.sizes());
    const int64_t T = tokens.size(1);
    const torch::Tensor& wte = tok_emb->weight();  // [vocab, dim]
    const torch::Tensor& wpe = pos_emb->weight();  // [seq_len, dim]
    TORCH_CHECK(T <= wpe.size(0), "gpt: input length ", T, " > seq_len ", wpe.size(0));
    auto x = torch::embedding(wte, tokens) + wpe.narrow(0, 0, T);  // [B, T, dim]
    x = torch::dropout(x, dropout, is_training());
    auto mask = future.narrow(0, 0, T).narrow(1, 0, T);
    for (auto& block : block_list) x = block->forward(x, mask);
    return x;
  }

  double dropout;
  layers::Weight tok_emb{nullptr}, pos_emb{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  std::vector<Block> block_list;
  layers::Norm ln_f{nullptr};
  torch::Tensor future;  // [seq_len, seq_len] float, -inf above the diagonal, else 0; on the model's device
};

// Gpt::expected_numel: src/models/spec.cpp (no libtorch).
Gpt::Gpt(const config::ModelConfig& config, c10::Device device, uint64_t seed)
    : config_(config), device_(device) {
  TORCH_CHECK(config.layers > 0 && config.heads > 0 && config.dim > 0 && config.seq_len > 0 &&
                  config.vocab > 0 && config.dim % config.heads == 0,
              "gpt: invalid sizes");
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  net_ = std::make_shared<GptNet>(config, gen);
  FlatBuffers flat = flatten_parameters(*net_, device);
  adopt(std::move(flat));
  net_->future = net_->future.to(device);
}

Gpt::~Gpt() = default;

at::Tensor Gpt::logits(const at::Tensor& tokens) {
  return net_->forward(tokens.to(device_, /*non_blocking=*/true));
}

at::Tensor Gpt::hidden(const at::Tensor& tokens) {
  return net_->hidden(tokens.to(device_, /*non_blocking=*/true));
}

Output Gpt::forward(const data::Batch& batch) {
  auto target = batch.target.to(device_, /*non_blocking=*/true);
  auto logits = this->logits(batch.input);  // [B, T, V]
  if (batch.score_from > 0) {  // the first score_from targets are context only
    const int64_t T = target.size(1);
    TORCH_CHECK(batch.score_from < T, "gpt: score_from ", batch.score_from, " >= sequence length ", T);
    logits = logits.narrow(1, batch.score_from, T - batch.score_from);
    target = target.narrow(1, batch.score_from, T - batch.score_from);
  }
  Output out;
  out.loss = torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                  target.reshape({-1}));
  out.count = target.numel();
  return out;
}

void Gpt::set_training(bool training) { net_->train(training); }

torch::nn::Module& Gpt::module() { return *net_; }

double Gpt::flops_per_example() const {
  int64_t n = numel() - int64_t{config_.seq_len} * config_.dim;            // minus pos_emb
  if (!config_.tie_embeddings) n -= int64_t{config_.vocab} * config_.dim;  // minus tok_emb lookup
  return 6.0 * static_cast<double>(n) +
         12.0 * config_.layers * static_cast<double>(config_.seq_len) * config_.dim;
}

}  // namespace atl::models
