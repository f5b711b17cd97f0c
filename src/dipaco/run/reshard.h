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

// The Rerouter of a run with dipaco.reshard_at.
class Resharder final : public Rerouter {
 public:
  // `config` and `data` must outlive it.
  Resharder(const config::Config& config, const RunData& data, int island);

  int64_t step() const override { return config_.dipaco.reshard_at; }
  Outcome run(transport::Group& group, Evaluator& scorer, const at::Tensor& models) override;
  std::unique_ptr<data::Sampler> sampler(const std::vector<int64_t>& shard) const override;

 private:
  const config::Config& config_;
  const RunData& data_;
  const int island_;
  const int path_;
};

}  // namespace atl::core
