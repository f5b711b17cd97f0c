// The island loop: the one place where inner training and the algorithm hooks meet
// (ARCHITECTURE.md "The island loop"). The same loop runs in the simulator (one thread per
// island under the cooperative scheduler) and in real island processes.
#pragma once

#include <cstdint>
#include <functional>

#include "algorithms/algorithm.h"
#include "src/config/config.h"
#include "src/train/inner_optimizer.h"

namespace atl::core {

struct IslandLoop {
  algorithms::Algorithm* algorithm = nullptr;   // not owned
  algorithms::IslandContext* context = nullptr; // not owned
  train::InnerOptimizer* optimizer = nullptr;   // not owned
  const config::TrainConfig* train = nullptr;   // inner schedule, clipping
  // Runs forward + backward for inner step `step` into context->grads (zeroed by the
  // loop) and returns the training loss.
  std::function<double(int64_t step)> forward_backward;
  // Called after forward + backward of every inner step, before any hook communicates
  // (the simulator charges the step's compute time here). May be empty. With
  // `compute_ends_after_step`, called after the inner optimizer's step instead, for an
  // algorithm that waits on no one before then (AlgorithmTraits::step_local_gradient): the
  // clock then moves while the gradient holds nothing, so that islands may share it.
  std::function<void(int64_t step)> after_compute;
  bool compute_ends_after_step = false;
  // A joiner (rejoin after a failure, new island) starts at a live island's next step and
  // receives its state after setup.
  int64_t first_step = 1;
  std::function<void()> after_setup;  // may be empty
  // Called after every completed inner step (logging, evaluation, progress). May be empty.
  std::function<void(int64_t step, int64_t total, double loss, double lr)> on_step;
};

// Runs setup, all planned inner steps with their hooks, and finish. Returns the number of
// inner steps run. Exceptions from hooks propagate.
int64_t run_island(IslandLoop& loop);

}  // namespace atl::core
