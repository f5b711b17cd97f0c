// Simulated islands of one model size share one gradient buffer when the algorithm keeps
// nothing in it between steps (AlgorithmTraits::step_local_gradient, docs/simulator.md
// "Memory"): Model::use_gradients points every parameter's gradient into the shared buffer,
// and the memory estimate counts that buffer once.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "src/config/config.h"
#include "src/core/components.h"
#include "src/core/island_parts.h"
#include "src/core/validate.h"

namespace atl::core {
namespace {

config::Config tiny(const std::string& algorithm) {
  return config::parse_config(
      "run: {seed: 5, threads: 1}\n"
      "model: {name: mlp, hidden: [16, 8]}\n"
      "data: {kind: synthetic, synthetic_examples: 256, synthetic_dim: 6, synthetic_classes: 3}\n"
      "train: {batch_size: 8, optimizer: adamw}\n"
      "algorithm: {name: " + algorithm + "}\n"
      "islands: {count: 4}\n",
      "tiny.yaml");
}

// Island 1 computes into island 0's gradient buffer, bitwise what it computes into its own.
TEST(SharedGradient, EveryParametersGradientLandsInTheSharedBuffer) {
  const config::Config c = tiny("diloco");
  const RunData d = load_run_data(c);
  const auto options = algorithm_options(c, d.shard_sizes);
  IslandParts first = make_island_parts(c, d, options, 0);
  IslandParts sharing = make_island_parts(c, d, options, 1);
  IslandParts alone = make_island_parts(c, d, options, 1);
  at::Tensor shared = first.model->grads();
  sharing.model->use_gradients(shared);
  EXPECT_EQ(sharing.model->grads().data_ptr(), shared.data_ptr());

  const double loss_sharing = forward_backward(sharing, c.train);
  const double loss_alone = forward_backward(alone, c.train);
  EXPECT_EQ(loss_sharing, loss_alone);
  EXPECT_GT(alone.model->grads().abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(at::equal(shared, alone.model->grads())) << "the shared buffer holds island 1's gradient";
  EXPECT_TRUE(at::equal(first.model->grads(), alone.model->grads())) << "island 0 sees the same buffer";

  EXPECT_THROW(sharing.model->use_gradients(at::zeros({3})), c10::Error);
}

// The simulator's estimate counts the shared gradient once; a process of one island, and an
// algorithm that exchanges its gradient (ddp), count it per island; launch counts every rank.
TEST(SharedGradient, TheMemoryEstimateCountsTheSharedGradientOnce) {
  const config::Config diloco = tiny("diloco");
  const MemoryEstimate sim = estimate_memory(diloco, Target::kSimulate);
  EXPECT_EQ(sim.shared, 1);
  EXPECT_EQ(sim.islands, 4);
  EXPECT_EQ(sim.copies_text.find("gradients"), std::string::npos) << sim.copies_text;
  EXPECT_DOUBLE_EQ(sim.bytes, static_cast<double>(sim.params) * 4.0 * (sim.copies * 4 + 1));

  const MemoryEstimate island = estimate_memory(diloco, Target::kIsland);
  EXPECT_EQ(island.shared, 0);
  EXPECT_EQ(island.copies, sim.copies + 1);

  // launch: every rank of an island is a process of its own holding the whole model.
  config::Config ranks = diloco;
  ranks.islands.ranks = config::parse_config(
      "model: {name: mlp, hidden: [16, 8]}\n"
      "data: {kind: synthetic, synthetic_examples: 256, synthetic_dim: 6, synthetic_classes: 3}\n"
      "train: {batch_size: 8}\n"
      "islands: {count: 4, ranks: [1, 2, 2, 4]}\n", "ranks.yaml").islands.ranks;
  EXPECT_EQ(estimate_memory(diloco, Target::kLaunch).islands, 4);
  EXPECT_EQ(estimate_memory(ranks, Target::kLaunch).islands, 9);
  EXPECT_EQ(estimate_memory(ranks, Target::kIsland).islands, 1);

  const MemoryEstimate ddp = estimate_memory(tiny("ddp"), Target::kSimulate);
  EXPECT_EQ(ddp.shared, 0);
  EXPECT_NE(ddp.copies_text.find("gradients"), std::string::npos) << ddp.copies_text;
}

}  // namespace
}  // namespace atl::core
