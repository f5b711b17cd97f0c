// The algorithm catalog (algorithms/catalog.cpp), the factories (algorithms/registry.cpp)
// and the key table of the `algorithm:` section (algorithms/options.h) describe the same
// algorithms, and every key of the table is a key of the section.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "algorithms/algorithm.h"
#include "algorithms/options.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

// Collects the keys of AlgorithmOptions::fields().
struct KeyNames {
  std::vector<std::string> keys;
  template <class T, class... Rest>
  void field(const char* key, T&, Rest&&...) {
    keys.emplace_back(key);
  }
  template <class E>
  void choice(const char* key, E&, std::initializer_list<fields::Choice<E>>) {
    keys.emplace_back(key);
  }
};

TEST(AlgorithmRegistry, EveryAlgorithmHasItsKeysAndEveryKeyIsOneOfTheSection) {
  std::vector<std::string> table;
  for (const auto& row : algorithm_keys()) table.emplace_back(row.name);
  EXPECT_EQ(table, algorithm_names());

  AlgorithmOptions options;
  KeyNames names;
  options.fields(names);
  const std::set<std::string> section(names.keys.begin(), names.keys.end());
  std::set<std::string> used;
  for (const auto& row : algorithm_keys()) {
    std::vector<std::string> keys(row.keys.begin(), row.keys.end());
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size()) << row.name << ": a key twice";
    for (const auto& k : keys) {
      EXPECT_EQ(section.count(k), 1u) << row.name << ": '" << k << "' is not a key of the algorithm section";
      EXPECT_NE(k, "name") << row.name;
      used.insert(k);
    }
    // In the section's order, as the resolved config writes them.
    std::vector<size_t> at;
    for (const auto& k : keys) at.push_back(std::find(names.keys.begin(), names.keys.end(), k) - names.keys.begin());
    EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << row.name;
    EXPECT_NO_THROW(algorithm_traits(row.name)) << row.name;
  }
  // Every key of the section but `name` belongs to some algorithm: none is read by nobody.
  for (const auto& k : names.keys)
    if (k != "name") {
      EXPECT_EQ(used.count(k), 1u) << k;
    }
  EXPECT_EQ(keys_of_algorithm("dilogo"), nullptr);
  EXPECT_THROW(algorithm_traits("dilogo"), UserError);
}

// Every catalog row has a factory, and what the row says of the algorithm holds of the one
// the factory builds: a server role exactly when the trait says so, its checkpoint cut.
TEST(AlgorithmRegistry, TheCatalogAndTheFactoriesAgree) {
  for (const std::string& name : algorithm_names()) {
    AlgorithmOptions o;
    o.name = name;
    o.islands = 2;
    o.train_steps = 10;
    o.local_steps = 1;
    o.rounds = 2;
    o.module_islands = {{0, 1}};  // dipaco: one module through both islands
    o.module_paths = {1};
    std::unique_ptr<Algorithm> a;
    ASSERT_NO_THROW(a = make_algorithm(o, 0)) << name;
    EXPECT_EQ(a->name(), name);
    const AlgorithmTraits& t = algorithm_traits(name);
    EXPECT_EQ(a->checkpoint_cut(), t.checkpoint_cut) << name;
    const bool server = make_server(o, at::zeros({4}), [](const ServerRound&) {}) != nullptr;
    EXPECT_EQ(server, t.server_role) << name;
  }
  AlgorithmOptions unknown;
  unknown.name = "dilogo";
  EXPECT_THROW(make_algorithm(unknown, 0), UserError);
}

// An algorithm's own defaults of shared keys (algorithms::algorithm_keys' `defaults`): sparseloco
// steps with outer_lr 1.0, top-64 and decay 0.95 where DiLoCo / DeMo default to 0.7, 32 and
// 0.999; a key the text or an override sets wins; the resolved text reads back the same.
TEST(AlgorithmKeys, AnAlgorithmsOwnDefaultsApplyToTheKeysLeftOut) {
  const config::Config s = config::parse_config("algorithm: {name: sparseloco}\n", "s.yaml");
  EXPECT_EQ(s.algorithm.outer.lr, 1.0);
  EXPECT_EQ(s.algorithm.topk, 64);
  EXPECT_EQ(s.algorithm.decay, 0.95);
  EXPECT_EQ(s.algorithm.chunk, 64);
  EXPECT_EQ(s.algorithm.aggregation, algorithms::Aggregation::kMeanAll);
  EXPECT_EQ(config::parse_config("algorithm: {name: sparseloco, topk: 8}\n", "s.yaml").algorithm.topk, 8);
  EXPECT_EQ(config::parse_config("algorithm: {name: sparseloco}\n", "s.yaml", {"algorithm.outer_lr=0.5"}).algorithm.outer.lr,
            0.5);
  const config::Config d = config::parse_config("algorithm: {name: diloco}\n", "d.yaml");
  EXPECT_EQ(d.algorithm.outer.lr, 0.7);
  EXPECT_EQ(config::parse_config("algorithm: {name: demo}\n", "d.yaml").algorithm.topk, 32);
  // Switching algorithms by override: the new one's defaults.
  const config::Config o = config::parse_config("algorithm: {name: diloco}\n", "d.yaml", {"algorithm={name: sparseloco}"});
  EXPECT_EQ(o.algorithm.outer.lr, 1.0);
  EXPECT_EQ(o.algorithm.decay, 0.95);
  EXPECT_EQ(config::to_yaml(config::parse_config(config::to_yaml(s), "resolved.yaml")), config::to_yaml(s));
}

}  // namespace
}  // namespace atl::algorithms
