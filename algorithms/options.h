// Options of the outer-loop algorithms. Plain structs; src/ fills them from the config.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::algorithms {

enum class OuterKind : uint8_t { kNesterov, kSgd, kAdam };
// diloco: how the outer all-reduce overlaps the next round (ALGORITHMS.md §3).
enum class Overlap : uint8_t { kNone, kDelayed, kEager };
// streaming_diloco: how transformer blocks are dealt to fragments (ALGORITHMS.md §2.1).
enum class FragmentMode : uint8_t { kStrided, kSequential };
// async_local_sgd: what the server does with each arriving pseudo-gradient (§5).
enum class AsyncUpdate : uint8_t { kDelayedNesterov, kNaive };

struct OuterOptimizerOptions {
  OuterKind kind = OuterKind::kNesterov;
  double lr = 0.7;          // outer learning rate
  double momentum = 0.9;    // nesterov / sgd
  double beta1 = 0.9;       // adam
  double beta2 = 0.999;     // adam
  double eps = 1e-1;        // adam
};

struct AlgorithmOptions {
  std::string name = "diloco";   // registry name
  int islands = 1;               // configured number of islands (fedavg: clients K)
  uint64_t seed = 0;             // fedavg client sampling
  int64_t inner_steps = 50;      // diloco: H
  OuterOptimizerOptions outer;
  bool weight_by_shard = false;  // weight each island by its shard size instead of 1
  bool error_feedback = true;    // lossy codecs: carry the compression error to the next round
  // fedavg
  double client_fraction = 0.1;  // C
  int64_t rounds = 1;            // R
  int64_t local_steps = 0;       // per selected client per round; 0 = local_epochs passes
  int local_epochs = 1;          // E
  int batch_size = 1;            // B (for local_epochs: steps = E * ceil(n_k / B))
  std::vector<int64_t> shard_sizes;  // n_k of every client (fedavg planning)
  // diloco
  Overlap overlap = Overlap::kNone;  // delayed / eager: the all-reduce of round t completes
                                     // at the end of round t+1
  // streaming_diloco
  int fragments = 2;                 // P
  FragmentMode fragment_mode = FragmentMode::kStrided;
  int64_t overlap_steps = 1;         // tau: inner steps between a fragment's send and receive
  double mix_alpha = 0.5;            // merge: alpha * local + (1 - alpha) * global
  // async_local_sgd
  AsyncUpdate async_update = AsyncUpdate::kDelayedNesterov;
  int buffer_size = 0;               // DN: N arrivals per momentum update; 0 = islands
  double dn_c = 0;                   // DN: activation c in [0, 1/N]
  bool dynamic_local_updates = true; // DyLU: local steps per task proportional to speed
  int64_t min_local_steps = 5;       // DyLU: floor on a task's local steps
  double grace_s = 0;                // seconds a worker waits after a push before pulling
  int64_t train_steps = 0;           // train.steps (async: each island's share of it)
  std::vector<double> speeds;        // compute speed factor of every island; empty = all 1
};

// A rule of the options that does not hold ("algorithm.fragments", what is wrong).
using OptionProblem = KeyProblem;

// The rules make_algorithm and make_server would throw for, checked on the options alone
// (algorithms/registry.cpp: each algorithm's check). Empty when they hold; an unknown name
// is a problem of "algorithm.name" that lists the valid names. Pure.
std::optional<OptionProblem> check_options(const AlgorithmOptions& options);

}  // namespace atl::algorithms
