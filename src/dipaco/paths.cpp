#include "src/dipaco/paths.h"

#include <algorithm>

namespace atl::dipaco {

namespace {

std::string str(int v) { return std::to_string(v); }

}  // namespace

StatusOr<Paths> Paths::make(const PathSpec& spec, int blocks) {
  if (spec.levels.size() != spec.modules.size()) {
    return invalid_argument(str(static_cast<int>(spec.levels.size())) + " levels but " +
                            str(static_cast<int>(spec.modules.size())) + " module counts");
  }
  Paths p;
  p.spec_ = spec;
  p.blocks_ = blocks;
  p.level_of_block_.assign(static_cast<size_t>(blocks), -1);
  p.specific_block_.assign(static_cast<size_t>(blocks), false);
  int64_t paths = 1;
  int next = 1;
  for (size_t l = 0; l < spec.levels.size(); ++l) {
    const std::string where = "level " + str(static_cast<int>(l));
    if (spec.levels[l].empty()) return invalid_argument(where + " has no blocks");
    if (spec.modules[l] < 1) return invalid_argument(where + " has " + str(spec.modules[l]) + " modules (at least 1)");
    for (int b : spec.levels[l]) {
      if (b < 0 || b >= blocks) {
        return invalid_argument(where + ": block " + str(b) + " is not a block of the model (0.." + str(blocks - 1) + ")");
      }
      if (p.level_of_block_[b] >= 0) {
        return invalid_argument(where + ": block " + str(b) + " is already in level " + str(p.level_of_block_[b]));
      }
      p.level_of_block_[b] = static_cast<int>(l);
    }
    paths *= spec.modules[l];
    if (paths > 65536) return invalid_argument("more than 65536 paths");
    p.level_first_.push_back(next);
    next += spec.modules[l];
  }
  for (int b : spec.path_specific) {
    if (b < 0 || b >= blocks) {
      return invalid_argument("path-specific block " + str(b) + " is not a block of the model (0.." + str(blocks - 1) + ")");
    }
    p.specific_block_[b] = true;
  }
  p.paths_ = static_cast<int>(paths);
  p.has_specific_ = !spec.path_specific.empty() || spec.path_specific_embeddings;
  p.specific_first_ = next;
  p.modules_ = next + (p.has_specific_ ? p.paths_ : 0);
  return p;
}

std::vector<int> Paths::choices(int path) const {
  std::vector<int> out(spec_.modules.size());
  for (size_t l = spec_.modules.size(); l-- > 0;) {
    out[l] = path % spec_.modules[l];
    path /= spec_.modules[l];
  }
  return out;
}

int Paths::module_of(int block, int path) const {
  const bool specific = block < 0 ? spec_.path_specific_embeddings : specific_block_.at(static_cast<size_t>(block));
  if (specific) return specific_first_ + path;
  if (block < 0 || level_of_block_[block] < 0) return 0;
  const int l = level_of_block_[block];
  return level_first_[l] + choices(path)[l];
}

std::vector<int> Paths::paths_through(int module) const {
  std::vector<int> out;
  for (int p = 0; p < paths_; ++p) {
    const std::vector<int> m = modules_of(p);
    if (std::binary_search(m.begin(), m.end(), module)) out.push_back(p);
  }
  return out;
}

std::vector<int> Paths::modules_of(int path) const {
  std::vector<int> out{0};
  const std::vector<int> c = choices(path);
  for (size_t l = 0; l < c.size(); ++l) out.push_back(level_first_[l] + c[l]);
  if (has_specific_) out.push_back(specific_first_ + path);
  return out;
}

std::string Paths::module_name(int module) const {
  if (module == 0) return "shared";
  if (module >= specific_first_) return "path" + str(module - specific_first_) + ".specific";
  int l = 0;
  while (l + 1 < static_cast<int>(level_first_.size()) && module >= level_first_[l + 1]) ++l;
  return "level" + str(l) + ".module" + str(module - level_first_[l]);
}

std::vector<double> Paths::weights(int module, const std::vector<int64_t>& shard_sizes) const {
  const std::vector<int> through = paths_through(module);
  double total = 0;
  for (int p : through) total += static_cast<double>(shard_sizes.at(static_cast<size_t>(p)));
  std::vector<double> out;
  for (int p : through) {
    out.push_back(total > 0 ? static_cast<double>(shard_sizes[p]) / total : 1.0 / static_cast<double>(through.size()));
  }
  return out;
}

}  // namespace atl::dipaco
