// The path structure of a DiPaCo modular model (docs/dipaco.md "Modules and paths").
//
// The model's transformer blocks are grouped into levels; level l has K_l alternative modules
// (K_l = 1: one module that every path shares). A path takes one module per level, so there
// are P = prod K_l paths, numbered in mixed radix (path = sum_l e_l * prod_{l'>l} K_l', e_l the
// module it takes at level l). Every parameter belongs to exactly one module for a given path:
//
//   - module 0, "shared": the blocks in no level and the embeddings, final norm and head
//     (block -1), unless they are path-specific; every path goes through it;
//   - modules 1 .. sum K_l: level l's module e is 1 + sum_{l'<l} K_l' + e ("level1.module0");
//   - then one module per path for the path-specific parameters (the blocks listed in
//     `path_specific`, and block -1 with `path_specific_embeddings`), "path3.specific": only
//     that path goes through it, so it is never averaged with another path's.
//
// Only paths are ever materialised: an island holds one path's parameters, and the modules it
// goes through are slices of that vector (module_of() per ParamRange block).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/base/status.h"

namespace atl::dipaco {

struct PathSpec {
  std::vector<std::vector<int>> levels;  // transformer blocks of each level (disjoint)
  std::vector<int> modules;              // alternative modules of each level (>= 1)
  std::vector<int> path_specific;        // blocks whose parameters each path keeps for itself
  bool path_specific_embeddings = false; // embeddings, final norm and head per path too
};

class Paths {
 public:
  // Checks `spec` against a model of `blocks` transformer blocks: as many module counts as
  // levels, every level non-empty, blocks in range and in at most one level, path-specific
  // blocks in range, at most 65536 paths. kInvalidArgument names what is wrong.
  static StatusOr<Paths> make(const PathSpec& spec, int blocks);

  int paths() const { return paths_; }
  int modules() const { return modules_; }
  int levels() const { return static_cast<int>(spec_.modules.size()); }
  // The module path `path` takes at each level.
  std::vector<int> choices(int path) const;
  // The module holding block `block`'s parameters (-1: embeddings, final norm, head) on path
  // `path`.
  int module_of(int block, int path) const;
  // Paths through `module`, ascending.
  std::vector<int> paths_through(int module) const;
  // The modules `path` goes through, ascending.
  std::vector<int> modules_of(int path) const;
  // "shared", "level1.module0", "path3.specific".
  std::string module_name(int module) const;
  // Each path's weight in `module`'s outer gradient, in paths_through() order: its shard's
  // share of the data of the paths through the module, |D_i| / sum |D_i'| (uniform when the
  // shards are all empty). `shard_sizes` has one entry per path.
  std::vector<double> weights(int module, const std::vector<int64_t>& shard_sizes) const;

 private:
  PathSpec spec_;
  int blocks_ = 0, paths_ = 1, modules_ = 1;
  std::vector<int> level_of_block_;   // -1: no level
  std::vector<bool> specific_block_;
  std::vector<int> level_first_;      // first module id of each level
  int specific_first_ = 0;            // first path-specific module id
  bool has_specific_ = false;
};

}  // namespace atl::dipaco
