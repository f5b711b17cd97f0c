// DiPaCo's DiLoCo per module (algorithms/dipaco.cpp) through the real island loop, scheduler
// and in-process group, on quadratics (quadratic_harness.h), against oracles: DiLoCo itself,
// independent DiLoCo runs, and module averages recomputed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "algorithms/builtin.h"
#include "tests/algorithms/quadratic_harness.h"

namespace atl {
namespace {

using algorithms::AlgorithmOptions;
using algorithms::ParamRange;

constexpr int64_t kN = 40;

// Four ranges of 10: the embeddings (block -1), block 0, block 1, the head (block -1).
std::vector<ParamRange> four_ranges() {
  return {{0, 10, -1, {10}, 0}, {10, 10, 0, {10}, 0}, {20, 10, 1, {10}, 0}, {30, 10, -1, {10}, 0}};
}

testing::HarnessHooks dipaco_hooks(std::function<void(algorithms::IslandContext&)> setup = {}) {
  testing::HarnessHooks h;
  h.make = algorithms::make_dipaco;
  h.setup_context = std::move(setup);
  return h;
}

AlgorithmOptions nesterov(int64_t h) {
  algorithms::DipacoOptions p;
  p.inner_steps = h;
  return AlgorithmOptions::of(p);
}

// The same options for DiLoCo (dipaco's keys are DiLoCo's without overlap).
AlgorithmOptions as_diloco(AlgorithmOptions o) {
  const algorithms::DipacoOptions p = o.get<algorithms::DipacoOptions>();
  algorithms::DilocoOptions d;
  d.inner_steps = p.inner_steps;
  d.outer = p.outer;
  d.weight_by_shard = p.weight_by_shard;
  d.error_feedback = p.error_feedback;
  o.name = "diloco";
  o.params = d;
  return o;
}

// One path, every parameter in the shared module: DiPaCo is DiLoCo with P islands, bitwise.
TEST(DiPaCo, OneSharedModuleIsDiLoCoBitwise) {
  const auto targets = testing::random_targets(4, kN);
  const at::Tensor theta0 = at::zeros({kN});
  const auto train = testing::sgd_train(0.1, 23);  // the last round is a partial one
  AlgorithmOptions o = nesterov(5);
  o.get<algorithms::DipacoOptions>().weight_by_shard = true;
  o.module_islands = {{0, 1, 2, 3}};
  o.module_paths = {1};
  const std::vector<int64_t> shards{10, 20, 30, 40};
  const auto dipaco = testing::run_quadratic(o, train, targets, theta0, shards, nullptr, four_ranges(), dipaco_hooks());
  o = as_diloco(o);
  const auto diloco = testing::run_quadratic(o, train, targets, theta0, shards, nullptr, four_ranges());
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(at::equal(dipaco.params[i], diloco.params[i])) << i;
    EXPECT_TRUE(at::equal(dipaco.globals[i], diloco.globals[i])) << i;
    EXPECT_EQ(dipaco.bytes[i].sent, diloco.bytes[i].sent) << i;
    ASSERT_EQ(dipaco.rounds[i].size(), 5u);
    EXPECT_EQ(dipaco.rounds[i].back().contributors, 4);
  }
  EXPECT_FALSE(at::equal(dipaco.globals[0], theta0));
}

// Every module path-specific (each island its own path): four independent DiLoCo runs of one
// island each, and nothing on the wire.
TEST(DiPaCo, PathSpecificModulesAreIndependentDiLoCoRuns) {
  const auto targets = testing::random_targets(4, kN);
  const at::Tensor theta0 = at::zeros({kN});
  const auto train = testing::sgd_train(0.1, 20);
  AlgorithmOptions o = nesterov(5);
  o.module_islands = {{0}, {1}, {2}, {3}};  // module i: island i's path-specific parameters
  o.module_paths = {1, 1, 1, 1};
  const auto dipaco = testing::run_quadratic(o, train, targets, theta0, {}, nullptr, four_ranges(),
                                             dipaco_hooks([](algorithms::IslandContext& ctx) {
                                               for (ParamRange& r : ctx.layout) r.module = ctx.island;
                                             }));
  o = as_diloco(o);
  for (int i = 0; i < 4; ++i) {
    const auto alone = testing::run_quadratic(o, train, {targets[i]}, theta0);
    EXPECT_TRUE(at::equal(dipaco.globals[i], alone.globals[0])) << i;
    EXPECT_TRUE(at::equal(dipaco.params[i], alone.params[0])) << i;
    EXPECT_EQ(dipaco.bytes[i].sent, 0u) << i;
  }
  EXPECT_FALSE(at::equal(dipaco.globals[0], dipaco.globals[1]));
}

// A 2x2: the embeddings and head shared by all four paths (module 0), block 0 in level 0
// (modules 1, 2), block 1 in level 1 (modules 3, 4); island i trains path i, whose choices are
// (i / 2, i % 2). With a plain outer step (SGD, lr 1, no momentum) one round sets every
// module to theta0 minus the shard-weighted mean of the deltas of the islands through it, and
// of no other island; with norm rescaling that mean times sqrt(paths through the module).
void two_by_two(bool rescale) {
  const auto targets = testing::random_targets(4, kN);
  const at::Tensor theta0 = at::zeros({kN});
  const int64_t h = 3;
  const double lr = 0.1;
  const auto train = testing::sgd_train(lr, h);
  AlgorithmOptions o = nesterov(h);
  o.get<algorithms::DipacoOptions>().outer.kind = algorithms::OuterKind::kSgd;
  o.get<algorithms::DipacoOptions>().outer.lr = 1.0;
  o.get<algorithms::DipacoOptions>().outer.momentum = 0.0;
  o.get<algorithms::DipacoOptions>().weight_by_shard = true;
  o.module_islands = {{0, 1, 2, 3}, {0, 1}, {2, 3}, {0, 2}, {1, 3}};
  o.module_paths = {4, 2, 2, 2, 2};
  o.norm_rescale = rescale;
  const std::vector<int64_t> shards{100, 300, 50, 550};
  auto module_of = [](int island, const ParamRange& r) {
    if (r.block < 0) return 0;
    return r.block == 0 ? 1 + island / 2 : 3 + island % 2;
  };
  const auto run = testing::run_quadratic(o, train, targets, theta0, shards, nullptr, four_ranges(),
                                          dipaco_hooks([&](algorithms::IslandContext& ctx) {
                                            for (ParamRange& r : ctx.layout) r.module = module_of(ctx.island, r);
                                          }));
  // The oracle, in double: each island's delta after h SGD steps, averaged per module.
  std::vector<at::Tensor> delta;
  for (int i = 0; i < 4; ++i) delta.push_back((theta0 - testing::sgd_by_hand(theta0, targets[i], lr, h)).to(at::kDouble));
  for (int i = 0; i < 4; ++i) {
    for (const ParamRange& r : four_ranges()) {
      const int m = module_of(i, r);
      at::Tensor mean = at::zeros({r.numel}, at::kDouble);
      double total = 0;
      for (int j : o.module_islands[m]) {
        mean += static_cast<double>(shards[j]) * delta[j].narrow(0, r.offset, r.numel);
        total += static_cast<double>(shards[j]);
      }
      mean /= total;
      if (rescale) mean *= std::sqrt(static_cast<double>(o.module_paths[m]));
      const at::Tensor expected = theta0.to(at::kDouble).narrow(0, r.offset, r.numel) - mean;
      EXPECT_TRUE(at::allclose(run.globals[i].narrow(0, r.offset, r.numel).to(at::kDouble), expected, 1e-6, 1e-6))
          << "island " << i << ", module " << m;
    }
    EXPECT_TRUE(at::equal(run.params[i], run.globals[i]));
  }
  // Islands share exactly the modules their paths share: 0 and 1 agree on module 0 and 1, not 3.
  EXPECT_TRUE(at::equal(run.globals[0].narrow(0, 0, 20), run.globals[1].narrow(0, 0, 20)));
  EXPECT_FALSE(at::equal(run.globals[0].narrow(0, 20, 10), run.globals[1].narrow(0, 20, 10)));
  EXPECT_TRUE(at::equal(run.globals[0].narrow(0, 20, 10), run.globals[2].narrow(0, 20, 10)));
  EXPECT_TRUE(at::equal(run.globals[0].narrow(0, 30, 10), run.globals[3].narrow(0, 30, 10)));
}

TEST(DiPaCo, AModuleAveragesOnlyTheIslandsThroughItWeightedByShard) { two_by_two(false); }
TEST(DiPaCo, NormRescalingMultipliesByTheRootOfThePathsThroughAModule) { two_by_two(true); }

// Fewer islands than paths (docs/dipaco.md "Fewer islands than paths"): a 2x2 (module 0 the
// embeddings and head, block 0 in modules 1 | 2, block 1 in modules 3 | 4) on 2 islands. In
// round r island i trains path (i + 2r) mod 4, so paths 0, 1 train in even rounds and 2, 3 in
// odd ones, each on its own target, weighted by its shard. Every island keeps every module;
// a module's outer step (Nesterov, its own momentum) uses only the paths trained through it
// that round, and a module no path trained keeps its parameters and momentum. Oracle: the
// same rounds recomputed in double, path by path; checked on the model each island loads at
// every task switch (the globals of every module, after each round) and at the end.
TEST(DiPaCo, FewerIslandsThanPathsTakePathsInTurn) {
  const int P = 4, I = 2;
  const auto targets = testing::random_targets(P, kN);
  const at::Tensor theta0 = at::zeros({kN});
  const int64_t h = 3, rounds = 5;
  const double lr = 0.1;
  const auto train = testing::sgd_train(lr, h * rounds);
  AlgorithmOptions o = nesterov(h);
  o.islands = I;
  o.get<algorithms::DipacoOptions>().weight_by_shard = true;
  o.shard_sizes = {100, 300, 50, 550};  // the paths' shards
  auto module_of = [](int path, int block) { return block < 0 ? 0 : block == 0 ? 1 + path / 2 : 3 + path % 2; };
  for (int p = 0; p < P; ++p) o.path_modules.push_back({module_of(p, -1), module_of(p, 0), module_of(p, 1)});
  struct Switch {
    int island, path;
    int64_t examples;
    bool fresh;
    at::Tensor params;
  };
  std::vector<Switch> switches;
  testing::HarnessHooks hooks = dipaco_hooks([&](algorithms::IslandContext& ctx) {
    algorithms::IslandContext* c = &ctx;
    ctx.switch_path = [&switches, c](int path, int64_t examples, bool fresh) {
      EXPECT_EQ(c->path, path);
      switches.push_back({c->island, path, examples, fresh, c->params.clone()});
    };
  });
  hooks.islands = I;
  hooks.target_by_path = true;
  std::map<int, std::vector<at::Tensor>> path_models;  // island -> path_global_params(p) at the end
  hooks.at_end = [&](int island, const algorithms::Algorithm& a) {
    for (int p = 0; p < P; ++p) path_models[island].push_back(a.path_global_params(p));
  };
  const auto run = testing::run_quadratic(o, train, targets, theta0, {}, nullptr, four_ranges(), hooks);

  // The oracle: one global copy and one momentum buffer per module, in double.
  const double mu = o.get<algorithms::DipacoOptions>().outer.momentum, outer_lr = o.get<algorithms::DipacoOptions>().outer.lr;
  std::vector<at::Tensor> global(5), buf(5);
  for (int m = 0; m < 5; ++m) {
    global[m] = theta0.to(at::kDouble).clone();
    buf[m] = at::zeros({kN}, at::kDouble);
  }
  auto compose = [&](int path) {
    at::Tensor t = at::empty({kN}, at::kDouble);
    for (const ParamRange& r : four_ranges())
      t.narrow(0, r.offset, r.numel).copy_(global[module_of(path, r.block)].narrow(0, r.offset, r.numel));
    return t;
  };
  std::vector<std::vector<at::Tensor>> after_round;  // after_round[r][p]: path p's model after round r
  std::vector<int> steps_of_module(5, 0);
  for (int64_t r = 0; r < rounds; ++r) {
    std::vector<int> trained;
    for (int i = 0; i < I; ++i) trained.push_back(static_cast<int>((i + r * I) % P));
    std::map<int, at::Tensor> delta;
    for (int p : trained) {
      const at::Tensor start = compose(p);
      delta[p] = start - testing::sgd_by_hand(start, targets[p].to(at::kDouble), lr, h);
    }
    for (int m = 0; m < 5; ++m) {
      at::Tensor mean = at::zeros({kN}, at::kDouble);
      double total = 0;
      for (int p : trained) {
        const bool through = module_of(p, -1) == m || module_of(p, 0) == m || module_of(p, 1) == m;
        if (!through) continue;
        mean += static_cast<double>(o.shard_sizes[p]) * delta[p];
        total += static_cast<double>(o.shard_sizes[p]);
      }
      if (total == 0) continue;  // no path through m trained this round
      mean /= total;
      buf[m] = mu * buf[m] + mean;
      global[m] = global[m] - outer_lr * (mean + mu * buf[m]);
      ++steps_of_module[m];
    }
    after_round.push_back({});
    for (int p = 0; p < P; ++p) after_round.back().push_back(compose(p));
  }
  // Modules 1 and 2 (level 0) alternate: each trained every other round, as are paths.
  EXPECT_EQ(steps_of_module, (std::vector<int>{5, 3, 2, 5, 5}));

  // Task switches after rounds 0..3: island i to path (i + 2(r + 1)) mod 4, its data after
  // the examples its path consumed (h per round it was trained, batch 1), inner state fresh.
  ASSERT_EQ(switches.size(), static_cast<size_t>(I * (rounds - 1)));
  std::map<int, int> seen;  // island -> switches so far
  for (const Switch& s : switches) {
    const int r = seen[s.island]++;
    const int path = static_cast<int>((s.island + (r + 1) * I) % P);
    EXPECT_EQ(s.path, path) << "island " << s.island << " round " << r;
    // the path trained in rounds r + 1 - 2k >= 0 before this one
    EXPECT_EQ(s.examples, h * ((r + 1) / 2)) << "island " << s.island << " round " << r;
    EXPECT_TRUE(s.fresh);
    EXPECT_TRUE(at::allclose(s.params.to(at::kDouble), after_round[r][path], 1e-5, 1e-5))
        << "island " << s.island << " after round " << r << ", path " << path;
  }
  // The end: each island reports its last path (rounds - 1 = 4: paths 0 and 1).
  for (int i = 0; i < I; ++i) {
    EXPECT_TRUE(at::allclose(run.globals[i].to(at::kDouble), after_round[rounds - 1][i], 1e-5, 1e-5)) << i;
    EXPECT_TRUE(at::equal(run.params[i], run.globals[i])) << i;
    ASSERT_EQ(run.rounds[i].size(), static_cast<size_t>(rounds));
    EXPECT_EQ(run.rounds[i].back().contributors, I);
  }
  // Every island holds every path's model, composed from its module copies (routed
  // evaluation and final_params.path<p>.bin use them): the oracle's, bitwise the same on both
  // islands, and the island's own path's is its global model.
  for (int i = 0; i < I; ++i) {
    ASSERT_EQ(path_models[i].size(), static_cast<size_t>(P));
    for (int p = 0; p < P; ++p) {
      ASSERT_TRUE(path_models[i][p].defined()) << "island " << i << " path " << p;
      EXPECT_TRUE(at::allclose(path_models[i][p].to(at::kDouble), after_round[rounds - 1][p], 1e-5, 1e-5))
          << "island " << i << " path " << p;
      EXPECT_TRUE(at::equal(path_models[i][p], path_models[0][p])) << "island " << i << " path " << p;
    }
    EXPECT_TRUE(at::equal(path_models[i][i], run.globals[i])) << i;
  }
  EXPECT_FALSE(at::equal(path_models[0][2], path_models[0][3]));
  // Paths 0 and 1 share modules 0 and 1: bitwise the same on both islands.
  EXPECT_TRUE(at::equal(run.globals[0].narrow(0, 0, 20), run.globals[1].narrow(0, 0, 20)));
  EXPECT_TRUE(at::equal(run.globals[0].narrow(0, 30, 10), run.globals[1].narrow(0, 30, 10)));
  EXPECT_FALSE(at::equal(run.globals[0].narrow(0, 20, 10), run.globals[1].narrow(0, 20, 10)));
}

// Fewer islands than paths with weighting shard_size: the weights are the paths' shard sizes
// the context gives (ctx.path_shard_sizes, which a re-sharding changes), else the options'.
// A run whose options say {1, 1, 1, 1} but whose context says {100, 300, 50, 550} is bitwise
// the run whose options say {100, 300, 50, 550}, and not the one without the context's.
TEST(DiPaCo, FewerIslandsThanPathsWeighTheContextsShardSizes) {
  const int P = 4, I = 2;
  const auto targets = testing::random_targets(P, kN);
  const at::Tensor theta0 = at::zeros({kN});
  const auto train = testing::sgd_train(0.1, 12);
  AlgorithmOptions o = nesterov(3);
  o.islands = I;
  o.get<algorithms::DipacoOptions>().weight_by_shard = true;
  for (int p = 0; p < P; ++p) o.path_modules.push_back({0, 1 + p / 2, 3 + p % 2});
  const std::vector<int64_t> sizes{100, 300, 50, 550};
  auto run = [&](const std::vector<int64_t>& options_sizes, const std::vector<int64_t>* context_sizes) {
    AlgorithmOptions oo = o;
    oo.shard_sizes = options_sizes;
    testing::HarnessHooks hooks =
        dipaco_hooks([context_sizes](algorithms::IslandContext& ctx) { ctx.path_shard_sizes = context_sizes; });
    hooks.islands = I;
    hooks.target_by_path = true;
    return testing::run_quadratic(oo, train, targets, theta0, {}, nullptr, four_ranges(), hooks);
  };
  const auto by_options = run(sizes, nullptr);
  const auto by_context = run({1, 1, 1, 1}, &sizes);
  const auto uniform = run({1, 1, 1, 1}, nullptr);
  for (int i = 0; i < I; ++i) {
    EXPECT_TRUE(at::equal(by_context.globals[i], by_options.globals[i])) << i;
    EXPECT_FALSE(at::equal(uniform.globals[i], by_options.globals[i])) << i;
  }
}

}  // namespace
}  // namespace atl
