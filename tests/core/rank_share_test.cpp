// An island's inner step split over its ranks (islands.ranks, src/core/island_parts.h): each
// rank's share of a batch, and the simulator's execution of every share of an island.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "src/config/config.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"

namespace atl::core {
namespace {

// A small classifier with dropout-free layers; batches of `batch` rows, `accum` micro-batches.
config::Config tiny(int batch, int accum) {
  return config::parse_config(
      "run: {seed: 11, threads: 1}\n"
      "model: {name: mlp, hidden: [16, 8]}\n"
      "data: {kind: synthetic, synthetic_examples: 256, synthetic_dim: 6, synthetic_classes: 3}\n"
      "train: {batch_size: " + std::to_string(batch) + ", grad_accum: " + std::to_string(accum) + "}\n"
      "islands: {count: 2}\n",
      "tiny.yaml");
}

struct Island {
  explicit Island(const config::Config& c, const RunData& d)
      : parts(make_island_parts(c, d, algorithm_options(c, d.shard_sizes), 1)) {}
  at::Tensor grads() const { return parts.model->grads().clone(); }
  IslandParts parts;
};

// The simulator's island of two ranks: its gradient is bitwise the mean of the two ranks'
// own gradients (each computed alone from the same stream, as two processes would), summed in
// one order; its loss the mean of theirs; every share draws the same batches.
TEST(RankShare, TwoRanksAreTheMeanOfTheirShares) {
  const config::Config c = tiny(8, 2);
  const RunData d = load_run_data(c);
  Island rank0(c, d), rank1(c, d), island(c, d);
  const double l0 = forward_backward(rank0.parts, c.train, {0, 2});
  const double l1 = forward_backward(rank1.parts, c.train, {1, 2});
  at::Tensor sum;
  const double loss = forward_backward_ranks(island.parts, c.train, 2, sum);
  const at::Tensor want = (rank0.grads() + rank1.grads()) / 2;
  EXPECT_TRUE(at::equal(island.grads(), want)) << "not bitwise the mean of the two ranks' gradients";
  EXPECT_FALSE(at::equal(rank0.grads(), rank1.grads())) << "the two ranks computed the same rows";
  EXPECT_EQ(loss, (l0 + l1) / 2);
  EXPECT_EQ(rank0.parts.sampler->position().pos, island.parts.sampler->position().pos);
  EXPECT_EQ(rank1.parts.sampler->position().pos, island.parts.sampler->position().pos);
}

// R ranks at batch b train like one rank at batch R·b: the same gradient and loss up to the
// order of float sums (docs/ranks.md).
TEST(RankShare, RanksComputeTheWholeBatchsGradient) {
  for (int ranks : {2, 4}) {
    SCOPED_TRACE(ranks);
    const config::Config c = tiny(8, 3);
    const RunData d = load_run_data(c);
    Island whole(c, d), split(c, d);
    const double l = forward_backward(whole.parts, c.train);
    at::Tensor sum;
    const double ls = forward_backward_ranks(split.parts, c.train, ranks, sum);
    EXPECT_TRUE(at::allclose(split.grads(), whole.grads(), 1e-5, 1e-7));
    EXPECT_GT(whole.grads().abs().sum().item<double>(), 0.0);
    EXPECT_NEAR(ls, l, 1e-6 * std::abs(l));
  }
}

}  // namespace
}  // namespace atl::core
