#include "src/core/roles.h"

#include "src/core/island_parts.h"

namespace atl::core {

Roles::Roles(const config::Config& config) : eval_path_([&config](int island) { return eval_path_of(config, island); }) {}

bool Roles::leads(int island, const std::vector<int>& running) const {
  const int path = eval_path(island);
  for (int j : running) {
    if (j >= island) break;
    if (eval_path(j) == path) return false;
  }
  return true;
}

int Roles::donor(int joiner, const std::vector<int>& running) const {
  for (int d : running)
    if (d != joiner && holds(d, joiner)) return d;
  return -1;
}

}  // namespace atl::core
