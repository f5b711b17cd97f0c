// The algorithm registry (algorithms/registry.cpp) and the key table of the `algorithm:`
// section (algorithms/options.h) describe the same algorithms, and every key of the table is
// a key of the section.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace atl::algorithms
