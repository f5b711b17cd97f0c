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
#include "src/dipaco/routing.h"
#include "src/train/inner_optimizer.h"

namespace atl::core {

class Resharder;

// Derived identically by every process from (config, seed).
struct RunData {
  data::Splits splits;
  std::vector<std::vector<int64_t>> shards;  // shards[i]: island i's training examples (DiPaCo with
                                             // fewer islands than paths: path i's)
  std::vector<int64_t> shard_sizes;
  models::DataShape shape;
  bool classifier = false;
  int loss_after = 0;  // data.loss_after resolved: the tokens of a validation sequence that are context

  // DiPaCo (docs/dipaco.md "Routing", "Routed evaluation"); empty (paths 0) otherwise.
  int paths = 0;                          // P
  std::vector<int> train_path;            // path of every training sequence (-1: not trained on)
  std::vector<int> val_path;              // path of every validation sequence
  std::vector<int64_t> path_train_sizes;  // training sequences per path
  dipaco::Matrix train_features, val_features;  // the router's input (routing none: empty)
  std::vector<int64_t> router_rows;       // dipaco.reshard_at: the router split (ascending training
                                          // sequences, not trained on)
};

// Throws atl::UserError for data problems (and check_eval_keys' config errors).
RunData load_run_data(const config::Config& config);

// The rules of data.loss_after (<= model.seq_len; language models only) and of
// dipaco.reshard_at (a routed dipaco run, an outer-round boundary before the last step, no
// checkpoints) that the config alone decides: atl::UserError naming the key. validate_config
// and load_run_data run them.
void check_eval_keys(const config::Config& config);

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
  // With use_path: each path's training sequences, which use_path reads (a re-sharding
  // replaces them).
  std::shared_ptr<std::vector<std::vector<int64_t>>> path_shards;
  int eval_path = -1;               // eval_path_of() this island (kEveryPath: every path)
  std::shared_ptr<Resharder> resharder;  // DiPaCo with dipaco.reshard_at (src/dipaco/run/reshard.h);
                                         // holds references to the config and RunData
};

// model.init_from: overwrite the seeded initialisation of `model` with an earlier run's final
// parameters. A missing, corrupt or differently shaped file is the user's error (UserError).
void warm_start(const config::ModelConfig& model_config, models::Model& model);

IslandParts make_island_parts(const config::Config& config, const RunData& data,
                              const algorithms::AlgorithmOptions& options, int island);

// One inner step's forward + backward (with gradient accumulation) into the model's flat
// gradient buffer; returns the mean training loss.
double forward_backward(IslandParts& parts, const config::TrainConfig& train);

// The evaluator of the global model: its own model instance and the fixed validation batches
// (data.loss_after's window); for DiPaCo, routed: the batches of every path.
std::unique_ptr<Evaluator> make_evaluator(const config::Config& config, const RunData& data);

// DiPaCo: the validation batches of every path, the evaluation's sequences (the same ones a
// dense run evaluates) dealt by `val_path` (one path per validation sequence), in the
// evaluation's order, with data.loss_after's window.
std::vector<std::vector<data::Batch>> routed_validation_batches(const config::Config& config, const RunData& data,
                                                                const std::vector<int>& val_path);
// The file of a run's final parameters: "final_params.bin", or DiPaCo path `path`'s
// "final_params.path<path>.bin" (path >= 0; docs/dipaco.md "Outputs").
std::string final_params_name(int path = -1);

// eval_path_of() of an island that evaluates every path (DiPaCo with fewer islands than
// paths: every island keeps every module's global parameters, so the lead composes each
// path's model and evaluates it on that path's routed sequences; docs/dipaco.md).
constexpr int kEveryPath = -2;

// The path whose routed validation sequences island `island` evaluates (DiPaCo: the path it
// trains; kEveryPath with fewer islands than paths), or -1: the whole split (every other
// algorithm). Every process agrees.
int eval_path_of(const config::Config& config, int island);

}  // namespace atl::core
