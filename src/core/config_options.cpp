// Config -> the options a run derives before anything is built (config_options.h). No
// libtorch: the `atoll` front end validates configs with it.
#include "src/core/config_options.h"

#include <string>

#include "algorithms/catalog.h"
#include "compression/chain.h"
#include "src/base/status.h"
#include "src/data/kinds.h"
#include "src/dipaco/run/options.h"
#include "src/models/model.h"

namespace atl::core {

algorithms::AlgorithmOptions algorithm_options(const config::Config& c,
                                               const std::vector<int64_t>& shard_sizes) {
  // The config keys are AlgorithmOptions' own (algorithms/options.h fields()); the rest
  // describes the run.
  algorithms::AlgorithmOptions o = c.algorithm;
  o.islands = c.islands.count;
  o.seed = c.run.seed;
  o.batch_size = c.train.batch_size * c.train.grad_accum;
  o.shard_sizes = shard_sizes;
  o.train_steps = c.train.steps;
  o.speeds = c.compute.speeds;
  o.weight_decay = c.train.weight_decay;
  o.model = c.model.name;
  o.model_blocks = models::model_blocks(c.model);
  path_options(c, o);  // the path structure's section
  // A key the config leaves out is placed at the algorithm's name.
  if (auto p = algorithms::resolve_options(o))
    config::fail_key(c, p->key, p->message, c.origins.count(p->key) ? "" : "algorithm.name");
  return o;
}

std::vector<compression::StageConfig> stage_configs(const config::Config& c) {
  std::vector<compression::StageConfig> stages;
  for (size_t i = 0; i < c.compression.size(); ++i) {
    const config::CompressionStage& s = c.compression[i];
    compression::StageConfig st;
    const std::string name = s.op == "quantize" ? s.format : s.op;
    if (!compression::stage_from_name(name, &st.id)) {
      throw UserError("compression[" + std::to_string(i) + "]: unknown stage '" + name + "'");
    }
    st.block = s.block;
    st.rounding = s.rounding == "stochastic" ? compression::Rounding::kStochastic
                                             : compression::Rounding::kNearest;
    st.fraction = s.fraction;
    st.count = s.count;
    st.chunk = s.chunk;
    st.level = s.level;
    stages.push_back(st);
  }
  StatusOr<compression::Chain> chain = compression::make_chain(stages);
  if (!chain.is_ok()) {
    auto it = c.origins.find("compression");
    const std::string where = it != c.origins.end() ? it->second : c.source;
    throw UserError(where + ": key 'compression': " + chain.status().message());
  }
  return {chain->stages.begin(), chain->stages.begin() + chain->size};
}

void check_eval_keys(const config::Config& config) {
  const int n = config.data.loss_after;
  if (const data::DataKind* kind = data::find_data_kind(config.data.kind); n > 0 && kind && !kind->language)
    config::fail_key(config, "data.loss_after", "applies to language models (data.kind " + config.data.kind +
                                                    " is a classifier's)");
  if (n > config.model.seq_len)
    config::fail_key(config, "data.loss_after", std::to_string(n) + " tokens, longer than model.seq_len (" +
                                                    std::to_string(config.model.seq_len) + ")");
  check_path_keys(config);  // the path structure's own keys
}

}  // namespace atl::core
