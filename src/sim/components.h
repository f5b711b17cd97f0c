// Builds the parts of a run from its config: algorithm options, the compression pipeline,
// the thread count. Shared by `atoll simulate` and real multi-process runs. Errors in the
// config's content are atl::UserError naming the key.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/options.h"
#include "compression/pipeline.h"
#include "src/config/config.h"

namespace atl::sim {

// The algorithm options a config describes; `shard_sizes` are the islands' training
// examples.
algorithms::AlgorithmOptions algorithm_options(const config::Config& config,
                                               const std::vector<int64_t>& shard_sizes);

// The outer-exchange pipeline of `config.compression` (empty list: raw fp32).
compression::Pipeline make_pipeline(const config::Config& config);

// libtorch intra-op threads for `requested` (0 = all cores); returns the count set.
int configure_threads(int requested);

}  // namespace atl::sim
