// The path structure of a modular model (src/dipaco/paths.h), on the paper's layouts.
#include "src/dipaco/paths.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>

namespace atl::dipaco {
namespace {

Paths make(const PathSpec& spec, int blocks) {
  StatusOr<Paths> p = Paths::make(spec, blocks);
  EXPECT_TRUE(p.is_ok()) << p.status().to_string();
  return p.value();
}

TEST(Paths, TwoByTwo) {
  // Blocks 0-1 form level 0, blocks 2-3 level 1, two modules each: four paths.
  const Paths p = make({{{0, 1}, {2, 3}}, {2, 2}, {}, false}, 4);
  EXPECT_EQ(p.paths(), 4);
  EXPECT_EQ(p.modules(), 5);  // shared + 2 + 2
  EXPECT_EQ(p.choices(0), (std::vector<int>{0, 0}));
  EXPECT_EQ(p.choices(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(p.choices(2), (std::vector<int>{1, 0}));
  EXPECT_EQ(p.choices(3), (std::vector<int>{1, 1}));
  // Level 0's module 1 (id 2) holds blocks 0 and 1 of paths 2 and 3; level 1's module 0 (id 3)
  // blocks 2 and 3 of paths 0 and 2; embeddings and head are shared (module 0).
  EXPECT_EQ(p.module_of(0, 2), 2);
  EXPECT_EQ(p.module_of(1, 3), 2);
  EXPECT_EQ(p.module_of(2, 0), 3);
  EXPECT_EQ(p.module_of(3, 2), 3);
  EXPECT_EQ(p.module_of(-1, 3), 0);
  EXPECT_EQ(p.paths_through(0), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(p.paths_through(1), (std::vector<int>{0, 1}));
  EXPECT_EQ(p.paths_through(2), (std::vector<int>{2, 3}));
  EXPECT_EQ(p.paths_through(3), (std::vector<int>{0, 2}));
  EXPECT_EQ(p.paths_through(4), (std::vector<int>{1, 3}));
  EXPECT_EQ(p.modules_of(1), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(p.module_name(0), "shared");
  EXPECT_EQ(p.module_name(2), "level0.module1");
  EXPECT_EQ(p.module_name(4), "level1.module1");
  // Every module a path goes through holds it: module_of and modules_of agree.
  for (int path = 0; path < 4; ++path) {
    const std::vector<int> mods = p.modules_of(path);
    for (int b = -1; b < 4; ++b) EXPECT_TRUE(std::count(mods.begin(), mods.end(), p.module_of(b, path))) << b;
  }
}

TEST(Paths, ShardWeightsUseOnlyThePathsThroughTheModuleAndSumToOne) {
  const Paths p = make({{{0, 1}, {2, 3}}, {2, 2}, {}, false}, 4);
  const std::vector<int64_t> shards{100, 300, 50, 550};
  for (int m = 0; m < p.modules(); ++m) {
    const std::vector<double> w = p.weights(m, shards);
    ASSERT_EQ(w.size(), p.paths_through(m).size());
    EXPECT_NEAR(std::accumulate(w.begin(), w.end(), 0.0), 1.0, 1e-15) << p.module_name(m);
  }
  // level0.module1: paths 2 and 3, 50 and 550 sequences
  const std::vector<double> w = p.weights(2, shards);
  EXPECT_DOUBLE_EQ(w[0], 50.0 / 600.0);
  EXPECT_DOUBLE_EQ(w[1], 550.0 / 600.0);
  EXPECT_EQ(p.weights(1, {0, 0, 0, 0}), (std::vector<double>{0.5, 0.5}));
}

TEST(Paths, PathSpecificModulesBelongToOnePath) {
  // 2x4 on 12 blocks, with blocks 0, 5, 6, 11 and the embeddings path-specific (the paper's
  // path-specific experiment).
  const Paths p = make({{{1, 2, 3, 4}, {7, 8, 9, 10}}, {2, 4}, {0, 5, 6, 11}, true}, 12);
  EXPECT_EQ(p.paths(), 8);
  EXPECT_EQ(p.modules(), 1 + 2 + 4 + 8);
  for (int path = 0; path < 8; ++path) {
    for (int b : {-1, 0, 5, 6, 11}) {
      const int m = p.module_of(b, path);
      EXPECT_EQ(p.paths_through(m), (std::vector<int>{path})) << "block " << b;
      EXPECT_EQ(p.module_name(m), "path" + std::to_string(path) + ".specific");
      EXPECT_EQ(p.weights(m, std::vector<int64_t>(8, 10)), (std::vector<double>{1.0}));
    }
  }
  // A level-1 module is shared by the two paths that take it.
  EXPECT_EQ(p.paths_through(p.module_of(8, 5)).size(), 2u);
}

TEST(Paths, OneSharedModuleIsOnePathAndFlatMoEIsIndependentPaths) {
  // One level with one module: every island trains the same path (DiLoCo).
  const Paths one = make({{{0, 1, 2, 3}}, {1}, {}, false}, 4);
  EXPECT_EQ(one.paths(), 1);
  for (int b = -1; b < 4; ++b) EXPECT_EQ(one.paths_through(one.module_of(b, 0)), (std::vector<int>{0}));
  // Flat MoE: one level over every block with P modules and per-path embeddings: no module is
  // shared between two paths that holds any parameter.
  const Paths flat = make({{{0, 1, 2, 3}}, {8}, {}, true}, 4);
  EXPECT_EQ(flat.paths(), 8);
  std::set<int> used;
  for (int path = 0; path < 8; ++path)
    for (int b = -1; b < 4; ++b) {
      EXPECT_EQ(flat.paths_through(flat.module_of(b, path)).size(), 1u);
      used.insert(flat.module_of(b, path));
    }
  EXPECT_EQ(used.size(), 16u);  // 8 level modules + 8 path-specific ones
}

TEST(Paths, RefusesWhatCannotBe) {
  auto error = [](const PathSpec& s, int blocks) {
    StatusOr<Paths> p = Paths::make(s, blocks);
    return p.is_ok() ? std::string("ok") : p.status().message();
  };
  EXPECT_EQ(error({{{0, 1}, {1, 2}}, {2, 2}, {}, false}, 4), "level 1: block 1 is already in level 0");
  EXPECT_EQ(error({{{0, 4}}, {2}, {}, false}, 4), "level 0: block 4 is not a block of the model (0..3)");
  EXPECT_EQ(error({{{0}}, {2, 2}, {}, false}, 4), "1 levels but 2 module counts");
  EXPECT_EQ(error({{{}}, {2}, {}, false}, 4), "level 0 has no blocks");
  EXPECT_EQ(error({{{0}}, {0}, {}, false}, 4), "level 0 has 0 modules (at least 1)");
  EXPECT_EQ(error({{{0}}, {2}, {7}, false}, 4), "path-specific block 7 is not a block of the model (0..3)");
  EXPECT_EQ(error({{{0}, {1}}, {300, 300}, {}, false}, 4), "more than 65536 paths");
}

}  // namespace
}  // namespace atl::dipaco
