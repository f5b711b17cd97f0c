// A sweep file (`atoll sweep SWEEP.yaml`): a complete base experiment plus a `sweep:` section
// that says which keys vary. YAML reaches these structs here, once; src/sweep expands them into
// runs. The format is documented in docs/sweeps.md:
//
//   run: {name: demo, threads: 1}        # ... every section of a normal config (the base)
//   sweep:
//     name: demo                          # sweeps/<name>/; default: the file name's stem
//     seeds: [1, 2, 3]                    # run.seed of each run; default: the base's seed
//     grid:                               # cartesian product over these keys
//       algorithm.name: [ddp, diloco]
//       train.lr: [0.001, 0.002]
//     zip:                                # keys varied together (equal-length lists); a
//       compression: [[], [{quantize: int8}]]   #  list of such mappings for several groups
//       algorithm.error_feedback: [false, true]
//     per_algorithm:                      # only for runs with that algorithm.name
//       diloco:
//         set: {algorithm.outer_lr: 0.7}  # fixed keys
//         grid: {algorithm.inner_steps: [10, 50]}   # and grid/zip like above
//         smoke: {algorithm.inner_steps: 2}        # this algorithm's part of the smoke run
//     smoke: {train.steps: 4}             # `atoll sweep --smoke`: a tiny run per algorithm
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace atl::config {

// One value of a swept key.
struct SweepValue {
  std::string text;   // YAML flow text, for a "key=text" override: "0.001", "[{quantize: int8}]"
  std::string label;  // short name for run ids, tables and legends: "0.001", "int8"
};

// One swept dimension: a single grid key, or the keys of one zip group varied together.
struct SweepAxis {
  std::vector<std::string> keys;                 // config keys: "algorithm.inner_steps"
  std::vector<std::vector<SweepValue>> points;   // points[i][k]: the value of keys[k] at point i
  std::string where;                             // "FILE:LINE" of the axis, for messages
};

// What the sweep, or one algorithm's part of it, adds to the base config.
struct SweepBlock {
  std::vector<std::pair<std::string, SweepValue>> set;  // fixed keys (per_algorithm only)
  std::vector<SweepAxis> axes;  // crossed with each other, in file order (grid keys first)
  // `smoke:` keys: set over a run's own values in `atoll sweep --smoke` (plan.h), which runs
  // one tiny run per algorithm to check that the file still runs. They may repeat a swept or
  // set key (shrinking what the sweep varies is their point).
  std::vector<std::pair<std::string, SweepValue>> smoke;
};

struct SweepSpec {
  std::string source;            // the sweep file
  std::string name;              // sweep.name, or the file name's stem
  // The file's text with the `sweep:` lines blanked out: a normal config whose errors keep
  // their FILE:LINE.
  std::string base_yaml;
  std::vector<uint64_t> seeds;   // empty: one run per point, with the base's run.seed
  SweepBlock common;             // sweep.grid / sweep.zip
  std::map<std::string, SweepBlock> per_algorithm;  // algorithm.name -> its keys
  // FILE:LINE of "per_algorithm.NAME" and of each smoke key ("sweep.smoke.KEY",
  // "sweep.per_algorithm.NAME.smoke.KEY").
  std::map<std::string, std::string> where;
};

// Parses a sweep file. Checked here, before anything runs, each as a one-line atl::UserError
// "FILE:LINE: key 'sweep.grid.algorithm.inner_step': unknown config key (did you mean
// 'algorithm.inner_steps'?)":
// - the file has a block-style `sweep:` mapping; its keys are name, seeds, grid, zip,
//   per_algorithm, smoke (a per_algorithm entry: set, grid, zip, smoke);
// - every varied or set key is a config key ("section.key" or "compression"), other than
//   run.name, run.out_dir (the sweep places runs) and run.seed (use `seeds:`);
// - a key is varied or set at most once for a given run (per_algorithm keys may not repeat
//   the common ones; algorithm.name cannot be set per algorithm);
// - lists are non-empty and the lists of one zip group have the same length;
// - seeds are distinct non-negative integers; the name is a plain directory name.
// Values are checked later, when each run's config is resolved (src/sweep/plan.h).
SweepSpec parse_sweep_spec(const std::string& yaml_text, const std::string& source);
SweepSpec load_sweep_spec(const std::string& path);

}  // namespace atl::config
