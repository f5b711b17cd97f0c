// What a run derives from its config before anything is built, without libtorch: the
// algorithm's options, the stages of the compression pipeline, the evaluation keys' rules.
// validate_config runs them (in the `atoll` front end too); the run builds its parts from
// them (src/core/components.h). Errors are atl::UserError naming the key.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/options.h"
#include "compression/stage.h"
#include "src/config/config.h"

namespace atl::core {

// The algorithm options a config describes; `shard_sizes` are the islands' training
// examples.
algorithms::AlgorithmOptions algorithm_options(const config::Config& config,
                                               const std::vector<int64_t>& shard_sizes);

// The stages of `config.compression` in the canonical form a pipeline keeps (empty list:
// raw fp32); a list whose order or parameters do not make a chain is a UserError at the
// `compression` key.
std::vector<compression::StageConfig> stage_configs(const config::Config& config);

// The rules of data.loss_after (<= model.seq_len; language models only) and of the paths'
// keys that the config alone decides: atl::UserError naming the key. validate_config and
// load_run_data run them.
void check_eval_keys(const config::Config& config);

}  // namespace atl::core
