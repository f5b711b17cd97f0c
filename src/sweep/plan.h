// A sweep expanded into runs. Each run is the base config of the sweep file plus "key=value"
// overrides (the swept values, its algorithm's `set:` keys, run.seed, run.name, run.out_dir),
// resolved and checked before anything runs, so that a bad value or combination is reported
// at once rather than when its turn comes.
//
// On disk: sweeps/<name>/plan.csv holds the runs (see write_plan), configs/<id>.yaml the
// resolved config each run is started from, runs/<id>/ the run directories.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "src/config/config.h"
#include "src/config/sweep_spec.h"

namespace atl::sweep {

struct PlannedRun {
  std::string id;      // directory name: "algorithm=diloco,inner_steps=50,seed=1"
  std::string group;   // the id without its seed: the runs one configuration averages over
  uint64_t seed = 0;
  std::string hash;    // core::config_hash of the resolved config
  std::vector<std::string> values;  // value label per SweepPlan::keys; "" = not swept here
};

struct SweepPlan {
  std::string name;               // sweep name
  std::string dir;                // sweeps/<name>
  std::vector<std::string> keys;  // swept keys in file order (common first, then per algorithm)
  std::vector<PlannedRun> runs;   // in expansion order: common points, per-algorithm points, seeds
  std::string run_dir(const PlannedRun& r) const { return dir + "/runs/" + r.id; }
};

// A plan together with the resolved config of each run (configs[i] is runs[i]'s).
struct ExpandedSweep {
  SweepPlan plan;
  std::vector<config::Config> configs;
};

// Checks one resolved config the way `atoll simulate` would before running it (registries,
// compression pipeline, data files); throws atl::UserError. Supplied by the CLI.
using ConfigCheck = std::function<void(const config::Config&)>;

// Expands `spec` into runs placed under <root>/<spec.name>/. Throws atl::UserError, before
// anything is written, when the base config is invalid, when a run's config does not resolve
// or fails `check` ("sweep run 'algorithm=ddp,seed=1': --set train.lr=-1: key 'train.lr':
// must be > 0 (got -1)"), when a per_algorithm entry names an algorithm no run uses, or when
// two runs resolve to the same config.
//
// `smoke` (`atoll sweep --smoke`): the smoke plan instead, placed under <root>/<name>-smoke/:
// for each algorithm of the sweep, its first run (the first point of the grid that uses it,
// the first seed) with the `sweep.smoke` keys and then its `per_algorithm` entry's `smoke`
// keys set over the run's own values. Checked like the real plan.
ExpandedSweep expand(const config::SweepSpec& spec, const std::string& root, const ConfigCheck& check,
                     bool smoke = false);

// True when runs/<id>/summary.json exists, carries the run's config hash and does not say
// "status": "failed".
bool run_finished(const SweepPlan& plan, const PlannedRun& run);

// The plan as `--dry-run` prints it: one line per run with its state (done / to run).
std::string plan_text(const SweepPlan& plan);

// plan.csv: columns run, group, seed, config_hash, then one per swept key.
void write_plan(const SweepPlan& plan);
// Reads <dir>/plan.csv (a sweep directory). Throws atl::UserError when it is missing or bad.
SweepPlan read_plan(const std::string& dir);

}  // namespace atl::sweep
