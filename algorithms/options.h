// Options of the outer-loop algorithms. Plain structs; src/ fills them from the config.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace atl::algorithms {

enum class OuterKind : uint8_t { kNesterov, kSgd, kAdam };

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
};

}  // namespace atl::algorithms
