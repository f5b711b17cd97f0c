// Asynchronous local-SGD with Delayed Nesterov and Dynamic Local Updates (Liu et al., arXiv
// 2401.09135; docs/algorithms.md §5): the planning rules and the server's update, exposed for
// tests and for the simulator. The workers and the server role are in async_local_sgd.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

#include "algorithms/options.h"

namespace atl::algorithms::async_local_sgd {

// DyLU (eq. 6): max(floor(speed / max_speed * H), min_steps) local steps per task.
int64_t dylu_local_steps(double speed, double max_speed, int64_t h, int64_t min_steps);

// Speed factor of `island` (options.speeds; 1 when empty) and the largest one.
double speed(const AlgorithmOptions& options, int island);
double max_speed(const AlgorithmOptions& options);

// Local steps of each of `island`'s tasks: DyLU when on, else H.
int64_t task_steps(const AlgorithmOptions& options, int island);

// [impl choice] Inner steps `island` runs in total: floor(train_steps * speed / max_speed),
// at least 1, so that every island trains for about the same virtual time as the fastest
// one running train_steps.
int64_t island_steps(const AlgorithmOptions& options, int island, int64_t train_steps);

// The Delayed Nesterov activation rule: dn_c in [0, 1/N] with N = buffer_size (0: the
// islands). Empty when it holds (or when the update is naive).
std::optional<OptionProblem> check_dn_c(const AlgorithmOptions& options);

// Local steps the server will have applied once every configured island has finished.
int64_t total_steps(const AlgorithmOptions& options);

// The Delayed Nesterov server update (paper Algorithm 3), eps = lr, beta = momentum:
//   D <- D + g
//   every N-th arrival: m <- beta m + D / N;  theta -= eps ((1 - cN + c) beta m + g / N);  D <- 0
//   otherwise:                               theta -= eps (c beta m + g / N)
// With c = 0 the N arrivals of a cycle move theta by one Nesterov step on their mean.
// State: momentum m [n], buffer D [n], arrival count. Not thread-safe.
class DelayedNesterov {
 public:
  DelayedNesterov(double lr, double momentum, int buffer, double c);
  // theta -= update for one arriving pseudo-gradient g. Both [n] float32. Under no-grad.
  void apply(at::Tensor& theta, const at::Tensor& g);
  const at::Tensor& momentum() const { return m_; }
  // For checkpoints: the buffer D (undefined, like m, before the first arrival), the
  // arrival count, and all three back.
  const at::Tensor& buffer() const { return d_; }
  int64_t arrivals() const { return arrivals_; }
  void load(int64_t arrivals, const at::Tensor& m, const at::Tensor& d);

 private:
  double lr_, beta_, c_;
  int n_;
  int64_t arrivals_ = 0;
  at::Tensor m_, d_;
};

}  // namespace atl::algorithms::async_local_sgd
