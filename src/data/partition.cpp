// partition(): shards of the training split, one per island.
//
//  iid         seeded shuffle, then equal-size shards (sizes differ by at most one: the
//              first N % islands islands get one more).
//  contiguous  index ranges in order, same sizes as iid. LM windows are in file order, so
//              island 0 reads the start of the corpus (Genesis), the last island the end.
//  dirichlet   Hsu et al. 2019 ("Measuring the effects of non-identical data distribution"):
//              for every class, proportions p ~ Dirichlet(alpha) over the islands; the
//              class's examples (shuffled) are cut at round(cumsum(p) * n_class). Smaller
//              alpha = more skew. An island left empty takes one example from the largest
//              island (its most recently assigned one), repeated until none is empty.
//  shards      McMahan et al. 2017 (FedAvg), pathological non-IID: examples sorted by label
//              (stable, so ties keep index order), cut into islands * shards_per_island
//              shards of equal size, each island gets shards_per_island random shards. When
//              the count does not divide, the first N % S shards are one example longer, so
//              every example is still used exactly once.
//
// Every shard is returned in ascending index order (the Sampler shuffles anyway).
// dirichlet and shards need labels; they are UserErrors for language-model data.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/base/status.h"
#include "src/data/dataset.h"
#include "src/data/partition_rules.h"
#include "src/data/rng.h"
#include "src/data/kinds.h"

namespace atl::data {

namespace {

using Shards = std::vector<std::vector<int64_t>>;

// Sizes of `parts` near-equal parts of n: the first n % parts are one larger.
int64_t part_size(int64_t n, int64_t parts, int64_t i) { return n / parts + (i < n % parts); }

// Cuts `order` into `parts` consecutive near-equal pieces.
Shards deal(const std::vector<int64_t>& order, int64_t parts) {
  Shards out(static_cast<size_t>(parts));
  auto it = order.begin();
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t size = part_size(static_cast<int64_t>(order.size()), parts, i);
    out[static_cast<size_t>(i)].assign(it, it + size);
    it += size;
  }
  return out;
}

const std::vector<int64_t>& require_labels(const Dataset& train, const std::string& kind) {
  if (train.labels().empty() || train.num_classes() < 1) throw UserError("data.partition: " + needs_labels(kind));
  return train.labels();
}

Shards dirichlet(const Dataset& train, int islands, double alpha, Rng& rng) {
  if (!(alpha > 0.0)) {
    throw UserError("data.dirichlet_alpha: must be > 0, got " + std::to_string(alpha));
  }
  const std::vector<int64_t>& labels = require_labels(train, "dirichlet");
  Shards by_class(static_cast<size_t>(train.num_classes()));
  for (size_t i = 0; i < labels.size(); ++i) {
    by_class[static_cast<size_t>(labels[i])].push_back(static_cast<int64_t>(i));
  }
  Shards out(static_cast<size_t>(islands));
  std::vector<double> log_g(static_cast<size_t>(islands));
  for (std::vector<int64_t>& members : by_class) {
    if (members.empty()) continue;
    shuffle(members, rng);
    // p_i = g_i / sum g, g_i ~ Gamma(alpha); normalised in log space (tiny alpha).
    for (double& g : log_g) g = rng.log_gamma(alpha);
    const double top = *std::max_element(log_g.begin(), log_g.end());
    double total = 0.0;
    for (double g : log_g) total += std::exp(g - top);
    const auto n = static_cast<double>(members.size());
    double cum = 0.0;
    int64_t begin = 0;
    for (int i = 0; i < islands; ++i) {
      cum += std::exp(log_g[static_cast<size_t>(i)] - top) / total;
      const int64_t end = i + 1 == islands ? static_cast<int64_t>(members.size())
                                           : std::min<int64_t>(std::llround(cum * n),
                                                               static_cast<int64_t>(members.size()));
      for (int64_t k = begin; k < end; ++k) {
        out[static_cast<size_t>(i)].push_back(members[static_cast<size_t>(k)]);
      }
      begin = std::max(begin, end);
    }
  }
  // No island may be empty: islands <= N, so the largest island has >= 2 examples whenever
  // one is empty.
  for (std::vector<int64_t>& shard : out) {
    if (!shard.empty()) continue;
    auto largest = std::max_element(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return a.size() < b.size();
    });
    shard.push_back(largest->back());
    largest->pop_back();
  }
  return out;
}

Shards label_shards(const Dataset& train, int islands, int per_island, Rng& rng) {
  const std::vector<int64_t>& labels = require_labels(train, "shards");
  const auto n = static_cast<int64_t>(labels.size());
  const int64_t count = static_cast<int64_t>(islands) * per_island;
  if (per_island < 1) {
    throw UserError("data.shards_per_island: must be >= 1, got " + std::to_string(per_island));
  }
  if (count > n) {
    throw UserError("data.shards_per_island: " + std::to_string(islands) + " islands x " +
                    std::to_string(per_island) + " = " + std::to_string(count) +
                    " shards, more than the " + std::to_string(n) + " training examples");
  }
  std::vector<int64_t> by_label(static_cast<size_t>(n));
  std::iota(by_label.begin(), by_label.end(), int64_t{0});
  std::stable_sort(by_label.begin(), by_label.end(),
                   [&](int64_t a, int64_t b) { return labels[a] < labels[b]; });
  const Shards shards = deal(by_label, count);
  const std::vector<int64_t> pick = random_permutation(count, rng);
  Shards out(static_cast<size_t>(islands));
  for (int64_t s = 0; s < count; ++s) {
    const std::vector<int64_t>& shard = shards[static_cast<size_t>(pick[static_cast<size_t>(s)])];
    auto& island = out[static_cast<size_t>(s / per_island)];
    island.insert(island.end(), shard.begin(), shard.end());
  }
  return out;
}

}  // namespace

// check_partition: src/data/partition_rules.cpp (no libtorch).

std::vector<std::vector<int64_t>> partition(const Dataset& train, int islands,
                                            const config::DataConfig& config, uint64_t seed) {
  const int64_t n = train.size();
  if (islands < 1) throw UserError("islands.count: must be >= 1, got " + std::to_string(islands));
  if (islands > n) {
    throw UserError("islands.count: " + std::to_string(islands) +
                    " islands but the training split has only " + std::to_string(n) +
                    " examples (" + train.describe() + ")");
  }
  Rng rng(derive_seed(seed, SeedStream::kPartition));
  Shards out;
  if (config.partition == "iid") {
    out = deal(random_permutation(n, rng), islands);
  } else if (config.partition == "contiguous") {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    out = deal(order, islands);
  } else if (config.partition == "dirichlet") {
    out = dirichlet(train, islands, config.dirichlet_alpha, rng);
  } else if (config.partition == "shards") {
    out = label_shards(train, islands, config.shards_per_island, rng);
  } else {
    throw UserError("data.partition: unknown '" + config.partition +
                    "' (valid: iid, contiguous, dirichlet, shards)");
  }
  for (std::vector<int64_t>& shard : out) std::sort(shard.begin(), shard.end());
  return out;
}

}  // namespace atl::data
