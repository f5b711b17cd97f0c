// Builds the parts of a run from its config: algorithm options, the compression pipeline,
// the thread count. Shared by `atoll simulate` and real multi-process runs. Errors in the
// config's content are atl::UserError naming the key.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/options.h"
#include "compression/pipeline.h"
#include "src/config/config.h"
#include "src/core/config_options.h"

namespace atl::core {

// The outer-exchange pipeline of `config.compression` (empty list: raw fp32; its stages:
// stage_configs in config_options.h, with algorithm_options).
compression::Pipeline make_pipeline(const config::Config& config);

// When the server role's global model (fedavg, async_local_sgd) is evaluated, and under which
// step label: fedavg rounds map to nominal inner steps (round x local steps); async
// local-SGD reports local steps applied so far, summed over islands. Evaluations fall every
// train.eval_every of those steps and after the last round. Shared by the simulator and the
// coordinator of real runs.
class ServerEvalSchedule {
 public:
  ServerEvalSchedule(const algorithms::AlgorithmOptions& options, const config::TrainConfig& train,
                     int64_t train_examples);
  // Called for each completed server round: the step label to evaluate at, or -1.
  int64_t after_round(int64_t round);
  // The step label of server round `round`.
  int64_t label(int64_t round) const { return async_ ? round : round * round_steps_; }
  // A resumed run: `round` is the latest completed round (checkpoints).
  void resume(int64_t round) { prev_ = round; }
  // Rounds in this run count outer rounds (fedavg) rather than applied steps (async).
  bool counts_rounds() const { return !async_; }

 private:
  bool async_ = false;
  int64_t last_ = 0;          // the final round (fedavg) or applied-step total (async)
  int64_t round_steps_ = 0;   // fedavg: nominal inner steps per round
  int64_t every_ = 0;
  int64_t prev_ = 0;
};

// libtorch intra-op threads, and OpenBLAS's own pool when it is the BLAS, for `requested`
// (0 = all cores); returns the count set.
int configure_threads(int requested);

}  // namespace atl::core
