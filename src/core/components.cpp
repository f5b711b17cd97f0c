// Config -> the components a run is built from. Shared by the simulator and real runs.
#include "src/core/components.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <utility>
#include <thread>

#include "algorithms/algorithm.h"
#include "compression/stage.h"
#include "src/base/status.h"
#include "src/dipaco/run/options.h"
#include "src/models/model.h"

namespace atl::core {

int configure_threads(int requested) {
  int n = requested > 0 ? requested : static_cast<int>(std::thread::hardware_concurrency());
  n = std::max(1, n);
  at::set_num_threads(n);
  // OpenBLAS keeps its own pool of threads, as many as the machine has cores, and Debian's
  // libtorch calls it through the generic libblas.so.3, so at::set_num_threads does not reach
  // it: a run of `run.threads: 1` still multiplied matrices on every core, its idle BLAS
  // threads yielding in a loop, and two such runs of a sweep fought over two cores. When the
  // selected BLAS is OpenBLAS, its pool is sized here too (docs/benchmarks.md).
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(n);
  return n;
}

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

compression::Pipeline make_pipeline(const config::Config& c) {
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
  auto pipeline = compression::Pipeline::make(std::move(stages));
  if (!pipeline.is_ok()) {
    auto it = c.origins.find("compression");
    const std::string where = it != c.origins.end() ? it->second : c.source;
    throw UserError(where + ": key 'compression': " + pipeline.status().message());
  }
  return std::move(pipeline).value();
}

ServerEvalSchedule::ServerEvalSchedule(const algorithms::AlgorithmOptions& options,
                                       const config::TrainConfig& train, int64_t train_examples)
    : every_(train.eval_every) {
  const algorithms::ServerRounds r =
      algorithms::server_rounds(options, train_examples / std::max(1, options.islands));
  async_ = r.counts_steps;
  last_ = r.last;
  round_steps_ = r.steps_per_round;
}

int64_t ServerEvalSchedule::after_round(int64_t round) {
  const int64_t step = label(round);
  const int64_t prev = async_ ? std::exchange(prev_, round) : label(round - 1);
  const bool due = round == last_ || (every_ > 0 && step / every_ != prev / every_);
  return due ? step : -1;
}

}  // namespace atl::core
