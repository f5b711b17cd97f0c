// The algorithm catalog (algorithms/catalog.cpp), the factories (algorithms/registry.cpp)
// and the options structs of the `algorithm:` section (algorithms/options.h) describe the same
// algorithms; a key several algorithms have has one rule.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <typeinfo>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "algorithms/algorithm.h"
#include "algorithms/options.h"
#include "src/base/status.h"

namespace atl::algorithms {
namespace {

// Collects the keys of an options struct's fields(), with each key's rule.
struct KeyRules {
  std::vector<std::string> keys;
  std::map<std::string, std::string> rules;  // key -> its rule, as text
  template <class T>
  void field(const char* key, T&, const fields::Rule& r = {}) {
    keys.emplace_back(key);
    std::ostringstream text;
    text << (r.lo ? std::to_string(*r.lo) : "-") << (r.lo_open ? "(" : "[") << (r.hi ? std::to_string(*r.hi) : "-")
         << (r.hi_open ? ")" : "]") << " " << typeid(T).name();
    for (const auto& n : r.names) text << " " << n;
    rules[key] = text.str();
  }
  template <class E>
  void choice(const char* key, E&, std::initializer_list<fields::Choice<E>> names) {
    keys.emplace_back(key);
    std::string text = typeid(E).name();
    for (const auto& n : names) text += std::string(" ") + n.name + "=" + std::to_string(static_cast<int>(n.value));
    rules[key] = text;
  }
};

// The options structs (AlgorithmParams), the catalog and the factories name the same
// algorithms; each struct's keys are unique and not `name`; a key two algorithms share has
// one rule (the config section checks a value by it before it knows the algorithm).
TEST(AlgorithmRegistry, EveryAlgorithmHasItsOptionsAndASharedKeyHasOneRule) {
  EXPECT_EQ(params_names(), algorithm_names());
  std::map<std::string, std::pair<std::string, std::string>> rule_of;  // key -> (algorithm, rule)
  for (const std::string& name : algorithm_names()) {
    std::optional<AlgorithmParams> params = default_params(name);
    ASSERT_TRUE(params) << name;
    KeyRules k;
    std::visit([&](auto& p) { p.fields(k); }, *params);
    EXPECT_EQ(std::set<std::string>(k.keys.begin(), k.keys.end()).size(), k.keys.size()) << name << ": a key twice";
    EXPECT_EQ(k.keys, params_keys(*params)) << name;
    for (const auto& key : k.keys) {
      EXPECT_NE(key, "name") << name;
      auto [it, first] = rule_of.emplace(key, std::make_pair(name, k.rules[key]));
      EXPECT_EQ(it->second.second, k.rules[key]) << "'" << key << "' of " << name << " and of " << it->second.first;
    }
    EXPECT_NO_THROW(algorithm_traits(name)) << name;
    AlgorithmOptions chosen;
    chosen.choose(name);
    EXPECT_EQ(chosen.name, name);
    EXPECT_EQ(chosen.params.index(), params->index());
  }
  // Inner steps per round, for what asks any algorithm (a signal's checkpoint proposal).
  DilocoOptions h7;
  h7.inner_steps = 7;
  SparseLocoOptions h9;
  h9.inner_steps = 9;
  EXPECT_EQ(AlgorithmOptions::of(h7).round_steps(), 7);
  EXPECT_EQ(AlgorithmOptions::of(h9).round_steps(), 9);
  EXPECT_EQ(AlgorithmOptions::of(DdpOptions{}).round_steps(), 1);
  EXPECT_EQ(AlgorithmOptions::of(DemoOptions{}).round_steps(), 1);
  EXPECT_FALSE(default_params("dilogo"));
  EXPECT_THROW(AlgorithmOptions().choose("dilogo"), std::logic_error);
  EXPECT_THROW(algorithm_traits("dilogo"), UserError);
  // Asking for another algorithm's options is a programming error, named.
  const AlgorithmOptions diloco;
  EXPECT_NO_THROW(diloco.get<DilocoOptions>());
  try {
    diloco.get<DemoOptions>();
    ADD_FAILURE() << "diloco's options read as demo's";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()), "algorithm 'diloco' has no options of algorithm 'demo'");
  }
}

// Every catalog row has a factory, and what the row says of the algorithm holds of the one
// the factory builds: a server role exactly when the trait says so, its checkpoint cut.
TEST(AlgorithmRegistry, TheCatalogAndTheFactoriesAgree) {
  for (const std::string& name : algorithm_names()) {
    AlgorithmOptions o;
    o.choose(name);
    o.islands = 2;
    o.train_steps = 10;
    if (auto* f = std::get_if<FedAvgOptions>(&o.params)) {
      f->local_steps = 1;
      f->rounds = 2;
    }
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

// An algorithm's own defaults of shared keys (its options struct's): sparseloco steps with
// outer_lr 1.0, top-64 and decay 0.95 where DiLoCo / DeMo default to 0.7, 32 and 0.999; a key
// the text or an override sets wins; the resolved text reads back the same.
TEST(AlgorithmKeys, AnAlgorithmsOwnDefaultsApplyToTheKeysLeftOut) {
  const config::Config s = config::parse_config("algorithm: {name: sparseloco}\n", "s.yaml");
  const SparseLocoOptions& sl = s.algorithm.get<SparseLocoOptions>();
  EXPECT_EQ(sl.outer_lr, 1.0);
  EXPECT_EQ(sl.topk, 64);
  EXPECT_EQ(sl.decay, 0.95);
  EXPECT_EQ(sl.chunk, 64);
  EXPECT_EQ(sl.aggregation, algorithms::Aggregation::kMeanAll);
  EXPECT_EQ(config::parse_config("algorithm: {name: sparseloco, topk: 8}\n", "s.yaml").algorithm.get<SparseLocoOptions>().topk,
            8);
  EXPECT_EQ(config::parse_config("algorithm: {name: sparseloco}\n", "s.yaml", {"algorithm.outer_lr=0.5"})
                .algorithm.get<SparseLocoOptions>()
                .outer_lr,
            0.5);
  const config::Config d = config::parse_config("algorithm: {name: diloco}\n", "d.yaml");
  EXPECT_EQ(d.algorithm.get<DilocoOptions>().outer.lr, 0.7);
  EXPECT_EQ(config::parse_config("algorithm: {name: demo}\n", "d.yaml").algorithm.get<DemoOptions>().topk, 32);
  // Switching algorithms by override: the new one's defaults.
  const config::Config o = config::parse_config("algorithm: {name: diloco}\n", "d.yaml", {"algorithm={name: sparseloco}"});
  EXPECT_EQ(o.algorithm.get<SparseLocoOptions>().outer_lr, 1.0);
  EXPECT_EQ(o.algorithm.get<SparseLocoOptions>().decay, 0.95);
  // ... also by the name alone, with the file's keys that the new one has kept, whatever
  // their order in the text.
  const config::Config renamed =
      config::parse_config("algorithm: {inner_steps: 7, name: diloco}\n", "d.yaml", {"algorithm.name=sparseloco"});
  EXPECT_EQ(renamed.algorithm.get<SparseLocoOptions>().inner_steps, 7);
  EXPECT_EQ(renamed.algorithm.get<SparseLocoOptions>().outer_lr, 1.0);
  EXPECT_EQ(config::to_yaml(config::parse_config(config::to_yaml(s), "resolved.yaml")), config::to_yaml(s));
}

}  // namespace
}  // namespace atl::algorithms
