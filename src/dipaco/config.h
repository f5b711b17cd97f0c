// The `dipaco:` section of a config (docs/dipaco.md "Config"): DiPaCo's modular model and the
// routing of its data. A plain struct with its fields() table, included by src/config/config.h
// (as src/data/kinds.h is), so that the algorithm's own section lives with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/fields.h"

namespace atl::config {

// DiPaCo's modular model (docs/dipaco.md): levels of transformer blocks, each with its
// alternative modules; a path takes one module per level. Used with algorithm.name: dipaco.
struct ModuleLevel {
  std::vector<int> blocks;      // transformer blocks of the level
  int modules = 1;              // alternative modules (1 = one module every path shares)
  bool operator==(const ModuleLevel&) const = default;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("blocks", blocks, at_least(0));
    v.field("modules", modules, at_least(1));
  }
};

struct DipacoConfig {
  std::vector<ModuleLevel> levels;       // empty: no modular model
  std::vector<int> path_specific;        // blocks each path keeps for itself (never averaged)
  bool path_specific_embeddings = false; // embeddings, final norm and head per path too
  bool norm_rescale = false;             // a module's averaged outer gradient times
                                         // sqrt(paths through it)
  // How training sequences are dealt to paths, once before training (docs/dipaco.md):
  // kmeans / product_kmeans on the base model's features (the mean of the last block's hidden
  // states over the first `prefix` tokens; the base model is the initial one, or
  // model.init_from), or none (each island keeps its data.partition share).
  std::string routing = "kmeans";
  int prefix = 32;                       // tokens of a sequence the router sees
  // Discriminative re-sharding (docs/dipaco.md): at this inner step (an outer-round boundary;
  // 0 = never) every path scores the router split, and a linear router fitted on the best
  // paths re-shards train and validation. router_fraction: the training sequences held out
  // for the router split (not trained on) when reshard_at is set.
  int64_t reshard_at = 0;
  double router_fraction = 0.05;

  template <class V>
  void fields(V& v) {
    using namespace atl::fields;
    v.field("levels", levels);
    v.field("path_specific", path_specific, at_least(0));
    v.field("path_specific_embeddings", path_specific_embeddings);
    v.field("norm_rescale", norm_rescale);
    v.field("routing", routing, one_of({"none", "kmeans", "product_kmeans"}));
    v.field("prefix", prefix, at_least(1));
    v.field("reshard_at", reshard_at, at_least(0));
    v.field("router_fraction", router_fraction, open_open(0, 1));
  }
};

}  // namespace atl::config
