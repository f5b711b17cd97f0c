// Config -> the components a run is built from. Shared by the simulator and real runs.
#include "src/core/components.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>

#include <algorithm>
#include <string>
#include <utility>
#include <thread>

#include "algorithms/catalog.h"
#include "src/base/status.h"

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

compression::Pipeline make_pipeline(const config::Config& c) {
  // stage_configs has checked the chain: the pipeline of a valid chain always builds.
  auto pipeline = compression::Pipeline::make(stage_configs(c));
  if (!pipeline.is_ok()) throw UserError("compression: " + pipeline.status().message());
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
