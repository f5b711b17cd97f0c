// What every process of a run builds the same way from the config: the data splits and
// shards, one island's compute parts and the evaluator. Shared by `atoll simulate` (all
// islands in one process) and real island processes (src/core/island_runtime.h runs them).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "src/config/config.h"
#include "src/data/dataset.h"
#include "src/models/model.h"
#include "src/core/evaluator.h"
#include "src/train/inner_optimizer.h"

namespace atl::core {

// Derived identically by every process from (config, seed).
struct RunData {
  data::Splits splits;
  std::vector<std::vector<int64_t>> shards;  // shards[i]: island i's training examples (DiPaCo with
                                             // fewer islands than paths: path i's)
  std::vector<int64_t> shard_sizes;
  models::DataShape shape;
  bool classifier = false;
};

// Throws atl::UserError for data problems.
RunData load_run_data(const config::Config& config);

// One island's compute.
struct IslandParts {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<data::Sampler> sampler;
  std::unique_ptr<train::InnerOptimizer> optimizer;
  std::unique_ptr<algorithms::Algorithm> algorithm;
  int path = 0;                     // DiPaCo: the path this island trains (0 otherwise)
  std::vector<int> block_modules;   // DiPaCo: module of block b at [b + 1] (b = -1: embeddings,
                                    // final norm, head) on this path; empty: every parameter in 0
  // DiPaCo with fewer islands than paths (docs/dipaco.md "Fewer islands than paths"; set only
  // then): `parts` takes up `path`: its sampler becomes the path's shard's stream (the same
  // seed whichever island trains it) after its first `examples` examples, and with
  // `fresh_inner` the inner optimizer starts afresh. RunData's shards are then the paths'.
  std::function<void(IslandParts& parts, int path, int64_t examples, bool fresh_inner)> use_path;
};

IslandParts make_island_parts(const config::Config& config, const RunData& data,
                              const algorithms::AlgorithmOptions& options, int island);

// One inner step's forward + backward (with gradient accumulation) into the model's flat
// gradient buffer; returns the mean training loss.
double forward_backward(IslandParts& parts, const config::TrainConfig& train);

// The evaluator of the global model: its own model instance and the fixed validation batches.
std::unique_ptr<Evaluator> make_evaluator(const config::Config& config, const RunData& data);

}  // namespace atl::core
