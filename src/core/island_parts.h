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
#include "transport/group.h"

namespace atl::core {

// The data router's input of a run of several models (features of every training and
// validation sequence); defined by the algorithm's run-level parts that build the router.
struct RouterInput;

// Derived identically by every process from (config, seed).
struct RunData {
  data::Splits splits;
  std::vector<std::vector<int64_t>> shards;  // shards[i]: island i's training examples (fewer
                                             // islands than paths: path i's)
  std::vector<int64_t> shard_sizes;
  models::DataShape shape;
  bool classifier = false;
  int loss_after = 0;  // data.loss_after resolved: the tokens of a validation sequence that are context

  // A run of several models, the paths (docs/architecture.md "Runs of several models"): the
  // data router's answer; empty (paths 0) for one model.
  int paths = 0;                          // P
  std::vector<int> train_path;            // path of every training sequence (-1: not trained on)
  std::vector<int> val_path;              // path of every validation sequence
  std::vector<int64_t> path_train_sizes;  // training sequences per path
  std::shared_ptr<const RouterInput> router;  // the router's input (null: routing none)
  std::vector<int64_t> router_rows;       // a re-routing's router split (ascending training
                                          // sequences, not trained on)
};

// Throws atl::UserError for data problems (and check_eval_keys' config errors).
RunData load_run_data(const config::Config& config);

// Re-routing a run of several models at one step (docs/architecture.md "Runs of several
// models"): the islands score the paths, and the router deals train and validation anew.
class Rerouter {
 public:
  struct Outcome {
    std::vector<int64_t> shard;             // this island's training sequences from now on
                                            // (empty with fewer islands than paths)
    std::vector<std::vector<int64_t>> path_shards;  // fewer islands than paths: each path's
                                                    // training sequences (ascending)
    std::vector<int64_t> path_train_sizes;  // training sequences per path
    std::vector<int> val_path;              // path of every validation sequence
    std::vector<std::vector<data::Batch>> val_batches;  // routed_validation_batches() of it
    std::vector<int64_t> path_val_sequences;  // the evaluation's sequences per path
    std::vector<int64_t> labels;            // router sequences whose best path is p
    int64_t moved = 0;                      // training sequences now on another path
    double balance_error = 0;               // largest |share - target| on the router split
    std::vector<int> contributors;          // islands whose scores were gathered, ascending
  };
  virtual ~Rerouter() = default;
  // The inner step at whose end it runs.
  virtual int64_t step() const = 0;
  // Collective over `group`: every live island calls it at step() with its path's global
  // model `models` ([N]; fewer islands than paths: every path's, [P * N] path after path,
  // IslandRuntime's eval models); `scorer` computes the losses (Evaluator::sequence_losses).
  // Throws c10::Error when the exchange fails for another reason than lost islands.
  virtual Outcome run(transport::Group& group, Evaluator& scorer, const at::Tensor& models) = 0;
  // A sampler over `shard` for this island, seeded as make_island_parts seeds it.
  virtual std::unique_ptr<data::Sampler> sampler(const std::vector<int64_t>& shard) const = 0;
};

// One island's compute.
struct IslandParts {
  std::unique_ptr<models::Model> model;
  std::unique_ptr<data::Sampler> sampler;
  std::unique_ptr<train::InnerOptimizer> optimizer;
  std::unique_ptr<algorithms::Algorithm> algorithm;
  int path = 0;                     // the path this island trains (0: one model)
  std::vector<int> block_modules;   // module of block b at [b + 1] (b = -1: embeddings, final
                                    // norm, head) on this path; empty: every parameter in 0
  // Fewer islands than paths (docs/architecture.md "Runs of several models"; set only then):
  // `parts` takes up `path`: its sampler becomes the path's shard's stream (the same seed
  // whichever island trains it) after its first `examples` examples, and with `fresh_inner`
  // the inner optimizer starts afresh. RunData's shards are then the paths'.
  std::function<void(IslandParts& parts, int path, int64_t examples, bool fresh_inner)> use_path;
  // With use_path: each path's training sequences, which use_path reads (a re-sharding
  // replaces them).
  std::shared_ptr<std::vector<std::vector<int64_t>>> path_shards;
  int eval_path = -1;               // eval_path_of() this island (kEveryPath: every path)
  std::shared_ptr<Rerouter> rerouter;  // null: the routing stays; holds references to the
                                       // config and RunData
};

// model.init_from: overwrite the seeded initialisation of `model` with an earlier run's final
// parameters. A missing, corrupt or differently shaped file is the user's error (UserError).
void warm_start(const config::ModelConfig& model_config, models::Model& model);

IslandParts make_island_parts(const config::Config& config, const RunData& data,
                              const algorithms::AlgorithmOptions& options, int island);

// The share of every batch one process of an island computes (islands.ranks, docs/ranks.md):
// rank `rank` of `ranks` takes rows [rank·b, (rank+1)·b) of each micro-batch, b =
// train.batch_size / ranks.
struct RankShare {
  int rank = 0;
  int ranks = 1;
};

// One inner step's forward + backward (with gradient accumulation) into the model's flat
// gradient buffer; returns the mean training loss. Every rank draws the island's whole
// micro-batches from its one sampler stream, so that all ranks' samplers stay alike, and
// computes its rows of each.
double forward_backward(IslandParts& parts, const config::TrainConfig& train, RankShare share = {});

// The simulator's island of `ranks` ranks: their shares of the same micro-batches one after
// the other, the gradients summed in rank order and divided by `ranks` (what a real island's
// all-reduce gives: bitwise for 2 ranks, whose sum has one order), the loss their mean.
// `sum`: scratch space the size of the gradient, kept between calls.
double forward_backward_ranks(IslandParts& parts, const config::TrainConfig& train, int ranks, at::Tensor& sum);

// The evaluator of the global model: its own model instance and the fixed validation batches
// (data.loss_after's window); for several paths, routed: the batches of every path.
std::unique_ptr<Evaluator> make_evaluator(const config::Config& config, const RunData& data);

// The validation batches of every path, the evaluation's sequences (the same ones a run of
// one model evaluates) dealt by `val_path` (one path per validation sequence), in the
// evaluation's order, with data.loss_after's window.
std::vector<std::vector<data::Batch>> routed_validation_batches(const config::Config& config, const RunData& data,
                                                                const std::vector<int>& val_path);
// The file of a run's final parameters: "final_params.bin", or path `path`'s
// "final_params.path<path>.bin" (path >= 0).
std::string final_params_name(int path = -1);

// eval_path_of() of an island that evaluates every path (fewer islands than paths: every
// island keeps every module's global parameters, so the lead composes each path's model and
// evaluates it on that path's routed sequences).
constexpr int kEveryPath = -2;

// The path whose routed validation sequences island `island` evaluates (the path it trains;
// kEveryPath with fewer islands than paths), or -1: the whole split (every other
// algorithm). Every process agrees.
int eval_path_of(const config::Config& config, int island);

}  // namespace atl::core
