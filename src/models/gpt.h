// Decoder-only transformer language model, after nanoGPT (Karpathy, github.com/karpathy/nanoGPT).
//
//   x = tok_emb[tokens] + pos_emb[0:T]                        [B, T, dim]
//   for each block:  x = x + drop(attn(ln1(x)));  x = x + drop(mlp(ln2(x)))
//   logits = ln_f(x) @ head^T                                 [B, T, vocab]
//   attn: qkv = Linear(dim, 3 dim); per head softmax(causal_mask(q k^T / sqrt(hd))) v;
//         proj = Linear(dim, dim)
//   mlp:  Linear(dim, 4 dim) -> GELU -> Linear(4 dim, dim)
// With tie_embeddings the head is tok_emb.weight itself (one parameter, stored once in the
// flat buffer). Init: N(0, 0.02) for embeddings and Linear weights, N(0, 0.02/sqrt(2 layers))
// for the two residual projections (attn.proj, mlp.proj), zero biases, LayerNorm weight 1.
//
// Parameter names: tok_emb.weight, pos_emb.weight, blocks.<i>.{ln1,attn.qkv,attn.proj,ln2,
// mlp.fc,mlp.proj}.{weight,bias}, ln_f.{weight,bias}, head.weight (untied only).
//
// Owned by one island (thread); not thread-safe.
#pragma once

#include <memory>

#include "src/models/model.h"

namespace torch::nn {
class Module;
}

namespace atl::models {

struct GptNet;  // the torch::nn::Module (gpt.cpp)

class Gpt final : public Model {
 public:
  // Builds and initialises from `seed` on the CPU, then moves into the flat buffers on
  // `device`. Sizes are checked by make_model; here they are invariants (TORCH_CHECK).
  Gpt(const config::ModelConfig& config, c10::Device device, uint64_t seed);
  ~Gpt() override;

  std::string name() const override { return "gpt"; }
  // batch.input, batch.target: [B, T] int64 with T <= seq_len. Loss: mean cross-entropy over
  // the B*(T - batch.score_from) targets at positions >= batch.score_from; count = that.
  Output forward(const data::Batch& batch) override;
  void set_training(bool training) override;
  // Per token: 6 N + 12 layers seq_len dim (nanoGPT's estimate, PaLM appendix B), where N
  // counts the parameters that take part in matmuls or norms: everything except pos_emb, and
  // except tok_emb when it is not tied to the head (a lookup costs no FLOPs).
  double flops_per_example() const override;

  // [B, T] int64 tokens (any device, T <= seq_len) -> [B, T, vocab] float32 logits on the
  // model's device.
  at::Tensor logits(const at::Tensor& tokens);
  // [B, T] int64 tokens -> the last transformer block's output [B, T, dim] (before the final
  // norm) on the model's device: a data router routes sequences by its mean over a prefix.
  at::Tensor hidden(const at::Tensor& tokens);
  // The module whose parameters are views of params() (tests, debugging).
  torch::nn::Module& module();

  // Parameter count for `config` (the formula the layout must match):
  // vocab dim + seq_len dim + layers (12 dim^2 + 13 dim) + 2 dim (+ vocab dim if untied).
  static int64_t expected_numel(const config::ModelConfig& config);

 private:
  config::ModelConfig config_;
  c10::Device device_;
  std::shared_ptr<GptNet> net_;
};

}  // namespace atl::models
