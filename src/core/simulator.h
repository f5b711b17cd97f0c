// `atoll simulate`: N islands in one process over the in-process group, each on its own
// thread under the cooperative scheduler (one island computes at a time, with all cores).
// Same config + seed => identical metrics.jsonl apart from fields named wall_*.
#pragma once

#include <cstdint>
#include <string>

#include "src/config/config.h"
#include "src/core/run_dir.h"

namespace atl::core {

struct SimulateOptions {
  bool force = false;   // overwrite an existing run directory
  bool quiet = false;   // no progress output
};

struct RunSummary {
  std::string run_dir;
  // The eval at the step the run ended on (NaN when the last eval is not at that step, e.g.
  // every island died: see last_*); the latest eval, wherever it was; the best one.
  double final_val_loss = 0;
  double last_val_loss = 0;
  int64_t last_eval_step = -1;
  double best_val_loss = 0;
  double final_val_accuracy = -1;  // classifiers; NaN when final_val_loss is
  uint64_t bytes_sent_total = 0;
  uint64_t bytes_recv_total = 0;
  int64_t steps = 0;          // inner steps per island (max over islands)
  int64_t rounds = 0;         // outer rounds (max over islands)
  double wall_time_s = 0;
  // A training loss that is not finite stops the run at once: the island and step.
  bool diverged = false;
  int diverged_island = -1;
  int64_t diverged_step = -1;
  // How it ended, and what it asked of the disk (summary.json's "status" and counts).
  RunOutcome outcome;
};

// Runs the simulation and writes runs/<name>/. Throws atl::UserError for problems with
// the config or data, other exceptions for runtime failures.
RunSummary simulate(const config::Config& config, const SimulateOptions& options);

}  // namespace atl::core
