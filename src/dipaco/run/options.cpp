#include "src/dipaco/run/options.h"

#include <algorithm>
#include <string>

#include "src/base/status.h"
#include "src/models/model.h"

namespace atl::core {

dipaco::Paths dipaco_paths(const config::Config& c) {
  if (models::model_blocks(c.model) == 0) {
    std::string names;
    for (const auto& n : models::block_model_names()) names += (names.empty() ? "" : ", ") + n;
    config::fail_key(c, "model.name", "algorithm dipaco needs a model with transformer blocks (" + names + "), got " +
                                          c.model.name, "algorithm.name");
  }
  if (c.dipaco.levels.empty()) {
    config::fail_key(c, "dipaco.levels", "algorithm dipaco needs the levels of its modular model, e.g. "
                                         "[{blocks: [0, 1], modules: 2}, {blocks: [2, 3], modules: 2}]",
                     "algorithm.name");
  }
  if (c.dipaco.routing != "none" && c.dipaco.prefix > c.model.seq_len) {
    config::fail_key(c, "dipaco.prefix", std::to_string(c.dipaco.prefix) + " tokens, longer than model.seq_len (" +
                                             std::to_string(c.model.seq_len) + ")");
  }
  dipaco::PathSpec spec;
  for (const auto& l : c.dipaco.levels) {
    spec.levels.push_back(l.blocks);
    spec.modules.push_back(l.modules);
  }
  spec.path_specific = c.dipaco.path_specific;
  spec.path_specific_embeddings = c.dipaco.path_specific_embeddings;
  StatusOr<dipaco::Paths> paths = dipaco::Paths::make(spec, c.model.layers);
  if (!paths.is_ok()) config::fail_key(c, "dipaco.levels", paths.status().message());
  return std::move(paths).value();
}

int run_paths(const config::Config& config) {
  return config.algorithm.name == "dipaco" ? dipaco_paths(config).paths() : 0;
}

int default_loss_after(const config::Config& config) {
  return config.algorithm.name == "dipaco" && config.dipaco.routing != "none" ? config.dipaco.prefix : 0;
}

void check_path_keys(const config::Config& config) {
  if (config.algorithm.name != "dipaco" || config.dipaco.reshard_at == 0) return;
  const int64_t at = config.dipaco.reshard_at, h = config.algorithm.get<algorithms::DipacoOptions>().inner_steps;
  if (config.dipaco.routing == "none")
    config::fail_key(config, "dipaco.reshard_at", "re-sharding needs the router's features (dipaco.routing kmeans or "
                     "product_kmeans, not none)");
  if (at % h != 0 || at >= config.train.steps)
    config::fail_key(config, "dipaco.reshard_at", std::to_string(at) + ": must be an outer-round boundary (a multiple "
                     "of algorithm.inner_steps " + std::to_string(h) + ") before the last step (" +
                     std::to_string(config.train.steps) + ")");
  if (config.checkpoint.every > 0)
    config::fail_key(config, "dipaco.reshard_at", "checkpoints of a run that re-shards are not supported yet "
                     "(set checkpoint.every: 0)");
}

void path_options(const config::Config& c, algorithms::AlgorithmOptions& o) {
  const auto& a = c.algorithm;
  if (a.name == "dipaco") {
    const dipaco::Paths paths = dipaco_paths(c);
    int islands = c.islands.count;  // and the ones that events add, numbered after them
    for (const auto& e : c.islands.events) islands += e.add;
    if (c.islands.count < paths.paths() && islands > c.islands.count) {
      config::fail_key(c, "islands.events", "adds islands to a DiPaCo run with fewer islands (" +
                                                std::to_string(c.islands.count) + ") than paths (" +
                                                std::to_string(paths.paths()) +
                                                "): its islands take the paths in turn, and a new one cannot join "
                                                "that schedule yet");
    }
    // Every path's module of every block (fewer islands than paths: island i trains path
    // (i + r * islands) mod P in round r; docs/dipaco.md "Fewer islands than paths").
    o.path_modules.assign(static_cast<size_t>(paths.paths()), {});
    for (int p = 0; p < paths.paths(); ++p) {
      for (int b = -1; b < c.model.layers; ++b) o.path_modules[static_cast<size_t>(p)].push_back(paths.module_of(b, p));
    }
    o.module_islands.assign(static_cast<size_t>(paths.modules()), {});
    o.module_paths.assign(static_cast<size_t>(paths.modules()), 0);
    for (int m = 0; m < paths.modules(); ++m) {
      const std::vector<int> through = paths.paths_through(m);
      o.module_paths[m] = static_cast<int>(through.size());
      for (int i = 0; i < islands; ++i) {
        if (std::binary_search(through.begin(), through.end(), i % paths.paths())) o.module_islands[m].push_back(i);
      }
    }
    o.norm_rescale = c.dipaco.norm_rescale;
  } else if (!c.dipaco.levels.empty()) {
    config::fail_key(c, "dipaco.levels", "set, but algorithm.name is " + a.name +
                                             " (the dipaco section describes the model of algorithm dipaco)");
  }
}

}  // namespace atl::core
