// DiPaCo's data side of a run (docs/dipaco.md "Routing"): the routing of training and
// validation sequences to paths, done once by every process from (config, seed) with the
// same bits, and the dealing of each path's sequences to the islands that train it.
// Compiled into atoll_core (src/dipaco/run/).
#pragma once

#include <cstdint>
#include <vector>

#include "src/config/config.h"
#include "src/core/island_parts.h"
#include "src/dipaco/routing.h"

namespace atl::core {

// The router's input (RunData::router): the base model's features of every training and
// validation sequence (routing none: no router).
struct RouterInput {
  dipaco::Matrix train_features, val_features;
};

// Fills `d`'s path fields (paths, train_path, val_path, path_train_sizes, the router's
// features and split) and deals the shards to the islands by path
// (algorithm.name: dipaco; load_run_data calls it).
void route_to_paths(const config::Config& config, RunData& d);

// Island `island`'s DiPaCo parts in `p`: its evaluation path, the path it trains (`tasks`:
// fewer islands than paths, the path of round 0), its blocks' modules on that path and, with
// dipaco.reshard_at, its re-sharder. `config` and `data` must outlive `p`.
void add_path_parts(const config::Config& config, const RunData& data, int island, bool tasks, IslandParts& p);

// The islands [0, islands) of each path deal the path's training sequences (`train_path`,
// -1: none) round-robin in index order; returns every island's shard.
std::vector<std::vector<int64_t>> deal_paths(const config::Config& config, const std::vector<int>& train_path,
                                             int paths, int islands);

}  // namespace atl::core
