// DiPaCo's discriminative re-sharding (docs/dipaco.md "Discriminative re-sharding"), run by
// every island at the outer-round boundary dipaco.reshard_at:
//   1. the island scores every sequence of the router split (RunData::router_rows, held out of
//      training) with its path's global model (fewer islands than paths: with every path's,
//      composed from its module copies): the mean loss per token after the prefix;
//   2. the scores are exchanged with Group::allgather, so every island holds the same
//      [router sequences x paths] matrix (path p's column: the lowest contributing island
//      that scored p; +inf for a path no live island scored, which then labels nothing);
//   3. each router sequence is labelled with its best path (dipaco::best_paths), a linear
//      router is fitted from the features to the labels with its biases balanced to the
//      paths' current shares of the training data (dipaco::fit_linear_router);
//   4. the training sequences (without the router split) and the validation sequences are
//      routed by it; the islands of each path deal its training sequences round-robin (fewer
//      islands than paths: each path's sequences are its shard).
// Plain double arithmetic in a fixed order on bitwise the same inputs in every process: the
// same re-sharding in the simulator and in a real run.
//
// Not thread-safe: used by one island's thread (the simulator's islands each hold one).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "src/config/config.h"
#include "src/core/evaluator.h"
#include "src/core/island_parts.h"
#include "transport/group.h"

namespace atl::core {

class Resharder {
 public:
  // `config` and `data` must outlive it.
  Resharder(const config::Config& config, const RunData& data, int island);

  int64_t step() const { return config_.dipaco.reshard_at; }

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
  // Collective over `group`: every live island calls it at step() with its path's global
  // model `models` ([N]; fewer islands than paths: every path's, [P * N] path after path,
  // IslandRuntime's eval models); `scorer` computes the losses (Evaluator::sequence_losses).
  // Throws c10::Error when the exchange fails for another reason than lost islands.
  Outcome run(transport::Group& group, Evaluator& scorer, const at::Tensor& models);

  // A sampler over `shard` for this island, seeded as make_island_parts seeds it.
  std::unique_ptr<data::Sampler> sampler(const std::vector<int64_t>& shard) const;

 private:
  const config::Config& config_;
  const RunData& data_;
  const int island_;
  const int path_;
};

}  // namespace atl::core
