// Runs the runs of an expanded sweep as separate `atoll simulate` processes, a bounded
// number at a time, with one progress view for the whole sweep.
//
// Files, under sweeps/<name>/:
//   plan.csv            the runs (plan.h)
//   configs/<id>.yaml   the resolved config each run is started from
//   runs/<id>/          its run directory (config.yaml, metrics.jsonl, summary.json)
//   logs/<id>.log       its stdout and stderr
//   logs/<id>.json      how it ended: {"run", "status": ok|failed|diverged|interrupted,
//                       "reason", "exit_code", "wall_time_s", "config_hash"}
//
// Resuming: a run whose summary.json carries its config hash is finished and skipped; every
// other run (never started, interrupted, failed, diverged) runs again from the start.
//
// Divergence: the runner reads each run's metrics.jsonl as it grows; a training or validation
// loss that is not finite (written as null) stops the run at once (SIGTERM to its process
// group) and marks it diverged, as does a run that ends with a non-finite final loss.
//
// Interruption: SIGINT or SIGTERM to the sweep stops its runs (SIGTERM, then SIGKILL after
// 5 s), marks them interrupted and returns; the same command later finishes the rest. A
// sweep killed outright (SIGKILL) takes its runs with it (process.h).
#pragma once

#include <string>
#include <vector>

#include "src/sweep/plan.h"
#include "src/sweep/process.h"

namespace atl::sweep {

struct RunnerOptions {
  int jobs = 1;            // runs at a time
  // The atoll binary that runs each run (`atoll simulate`). The CLI passes /proc/self/exe:
  // the very binary that planned the sweep, even if build/atoll is rebuilt meanwhile (a new
  // binary could resolve configs differently and so hash them differently).
  std::string atoll_exe = "/proc/self/exe";
  // Set: each run is a fork of this process that calls it with the run's command line
  // instead of executing atoll_exe, and skips atoll's start-up ([impl choice],
  // docs/sweeps.md "How a run starts"; process.h says when it falls back to exec).
  WarmMain warm;
};

struct SweepOutcome {
  int skipped = 0;         // finished before this invocation
  int ok = 0;
  int failed = 0;
  int diverged = 0;
  bool interrupted = false;
  std::vector<std::string> problems;  // "run id: reason" of each failed or diverged run
};

// Writes plan.csv and every run's configs/<id>.yaml (and the configs, logs and runs folders);
// returns the indices of the runs not finished yet (run_finished), in plan order. What
// run_sweep does first, and what `atoll sweep --slurm` submits.
std::vector<size_t> prepare_runs(const ExpandedSweep& sweep);

// Runs at a time that the machine's cores allow: cores / run.threads (run.threads 0 = all
// cores), at least 1.
int default_jobs(const ExpandedSweep& sweep);

// Runs every unfinished run of `sweep` (see above). Writes plan.csv and configs/ first.
// Installs SIGINT/SIGTERM handlers while it runs and restores the previous ones. Progress:
// one self-overwriting line on stderr when it is a terminal; one line per finished run on
// stdout in any case. Throws std::runtime_error when a run cannot be started at all.
SweepOutcome run_sweep(const ExpandedSweep& sweep, const RunnerOptions& options);

}  // namespace atl::sweep
