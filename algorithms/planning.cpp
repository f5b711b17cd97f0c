// The pure planning rules of the algorithms that have them: fedavg's client selection and
// local steps, async local-SGD's step counts (DyLU), streaming DiLoCo's schedule rule. Plain
// integers and doubles, no libtorch: the catalog's checks (algorithms/catalog.cpp) run them
// in the `atoll` front end, and the algorithms themselves plan with them.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/async_local_sgd.h"
#include "algorithms/fedavg.h"
#include "algorithms/streaming_diloco.h"
#include "src/base/hash.h"

namespace atl::algorithms {
namespace fedavg {

int clients_per_round(double fraction, int clients) {
  const int m = static_cast<int>(std::floor(fraction * clients + 1e-9));
  return std::clamp(m, 1, clients);
}

std::vector<int> select_clients(uint64_t seed, int64_t round, int clients, int m) {
  std::vector<int> all(static_cast<size_t>(clients));
  std::iota(all.begin(), all.end(), 0);
  uint64_t state = seed * 0x2545f4914f6cdd1dULL + static_cast<uint64_t>(round) + 0x51ed27ULL;
  // Partial Fisher-Yates: the first m entries are a uniform sample without replacement.
  for (int i = 0; i < m; ++i) {
    const int j = i + static_cast<int>(splitmix64_next(state) % static_cast<uint64_t>(clients - i));
    std::swap(all[i], all[j]);
  }
  all.resize(static_cast<size_t>(m));
  std::sort(all.begin(), all.end());
  return all;
}

int64_t local_steps(const AlgorithmOptions& options, int64_t shard_size) {
  const FedAvgOptions& own = options.get<FedAvgOptions>();
  if (own.local_steps > 0) return own.local_steps;
  const int64_t b = std::max(1, options.batch_size);
  return own.local_epochs * ((shard_size + b - 1) / b);
}

std::optional<OptionProblem> check(const AlgorithmOptions& options) {
  const FedAvgOptions& own = options.get<FedAvgOptions>();
  const int m = clients_per_round(own.client_fraction, options.islands);
  if (own.min_clients > m)
    return OptionProblem{"algorithm.min_clients", std::to_string(own.min_clients) +
                                                      " is more than the clients selected per round (" +
                                                      std::to_string(m) + " = max(floor(client_fraction x " +
                                                      std::to_string(options.islands) +
                                                      " islands), 1)): every round would be skipped"};
  return std::nullopt;
}

}  // namespace fedavg

namespace async_local_sgd {

int64_t dylu_local_steps(double speed, double max_speed, int64_t h, int64_t min_steps) {
  // +1e-9: a ratio meant to be exact (0.29 * 100) must not floor one below.
  const auto steps = static_cast<int64_t>(std::floor(speed / max_speed * static_cast<double>(h) + 1e-9));
  return std::max(steps, min_steps);
}

double speed(const AlgorithmOptions& options, int island) {
  return island < static_cast<int>(options.speeds.size()) ? options.speeds[island] : 1.0;
}

double max_speed(const AlgorithmOptions& options) {
  double m = 0;
  for (int i = 0; i < options.islands; ++i) m = std::max(m, speed(options, i));
  for (double s : options.speeds) m = std::max(m, s);
  return m;
}

int64_t task_steps(const AlgorithmOptions& options, int island) {
  const AsyncLocalSgdOptions& own = options.get<AsyncLocalSgdOptions>();
  if (!own.dynamic_local_updates) return own.inner_steps;
  return dylu_local_steps(speed(options, island), max_speed(options), own.inner_steps, own.min_local_steps);
}

int64_t island_steps(const AlgorithmOptions& options, int island, int64_t train_steps) {
  const double share = speed(options, island) / max_speed(options);
  const auto steps = static_cast<int64_t>(std::floor(static_cast<double>(train_steps) * share + 1e-9));
  return std::max<int64_t>(steps, 1);
}

int64_t total_steps(const AlgorithmOptions& options) {
  int64_t total = 0;
  for (int i = 0; i < options.islands; ++i) total += island_steps(options, i, options.train_steps);
  return total;
}

std::optional<OptionProblem> check_dn_c(const AlgorithmOptions& options) {
  const AsyncLocalSgdOptions& own = options.get<AsyncLocalSgdOptions>();
  const int n = own.buffer_size > 0 ? own.buffer_size : options.islands;
  if (own.async_update == AsyncUpdate::kDelayedNesterov && own.dn_c > 1.0 / n + 1e-12) {
    return OptionProblem{"algorithm.dn_c", std::to_string(own.dn_c) +
                                               " must be in [0, 1/N] with N = buffer_size = " +
                                               std::to_string(n) + " (0: islands.count)"};
  }
  return std::nullopt;
}

}  // namespace async_local_sgd

namespace streaming_diloco {

std::optional<OptionProblem> Schedule::check(int64_t inner_steps, int fragments,
                                             int64_t overlap_steps) {
  if (fragments > inner_steps) {
    return OptionProblem{"algorithm.fragments", std::to_string(fragments) +
                                                    " fragments must not exceed algorithm.inner_steps (" +
                                                    std::to_string(inner_steps) + ")"};
  }
  int64_t min_gap = inner_steps, previous = 0;
  for (int p = 1; p < fragments; ++p) {
    const int64_t offset = static_cast<int64_t>(p) * inner_steps / fragments;
    min_gap = std::min(min_gap, offset - previous);
    previous = offset;
  }
  min_gap = std::min(min_gap, inner_steps - previous);
  if (overlap_steps >= min_gap) {
    return OptionProblem{"algorithm.overlap_steps",
                         std::to_string(overlap_steps) +
                             " must be smaller than the steps between two fragment syncs (" +
                             std::to_string(min_gap) +
                             " = inner_steps / fragments): at most one fragment may be in flight"};
  }
  return std::nullopt;
}

}  // namespace streaming_diloco
}  // namespace atl::algorithms
