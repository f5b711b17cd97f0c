// The simulator's compute model: virtual seconds each inner step of each island takes.
//   step_time(i, step) = base / speed_i * straggler factor * jitter
// Deterministic: each island draws from its own RNG seeded by (run seed, island id), and each
// island asks for its own steps in order, so the times do not depend on scheduling.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "src/config/config.h"

namespace atl::core {

class CostModel {
 public:
  // `flops_per_step`: FLOPs of one inner step (forward + backward, all micro-batches), used
  // when compute.step_time_s is 0. `islands` includes islands added by events.
  CostModel(const config::ComputeConfig& compute, double flops_per_step, int islands, uint64_t seed);

  // Seconds of the next inner step of `island` (advances that island's RNG).
  double next_step_s(int island);
  // Nominal seconds per step of `island` (no jitter, no straggling).
  double nominal_step_s(int island) const { return base_s_ / speeds_[static_cast<size_t>(island)]; }
  double base_step_s() const { return base_s_; }
  const std::vector<double>& speeds() const { return speeds_; }
  // Every island's RNG and straggling state as text, and back (checkpoints). load() of
  // text from another model's save() is a std::runtime_error.
  std::string save() const;
  void load(const std::string& text);

 private:
  struct IslandState {
    std::mt19937_64 rng;
    int64_t straggling_left = 0;  // steps left in the current slow episode
  };
  config::ComputeConfig compute_;
  double base_s_ = 0;
  std::vector<double> speeds_;
  std::vector<IslandState> state_;
};

}  // namespace atl::core
