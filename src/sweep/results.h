// What runs produced, read back from their run directories, and the sweep's tables:
//   summary.csv    one row per run: run, group, seed, status, the swept keys, then steps and
//                  the metrics below, config_hash, reason
//   aggregate.csv  one row per configuration (group): its swept keys, runs, ok, then
//                  <metric>_mean and <metric>_std over the seeds that ended ok
//   curves.csv     every evaluation of every run: run, group, seed, status, step, val_loss,
//                  val_accuracy, bytes_sent, sim_time_s
// Numbers are written exactly (shortest round-trip form); an unknown value is an empty field.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "src/sweep/plan.h"

namespace atl::sweep {

inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

// One evaluation of the global model (metrics.jsonl "eval" record); NaN when not recorded.
struct EvalPoint {
  int64_t step = 0;
  double val_loss = kUnknown;
  double val_accuracy = kUnknown;
  double bytes_sent = kUnknown;   // all islands, so far
  double sim_time_s = kUnknown;   // virtual clock
};

// A run directory's results: summary.json when the run ended, else its evaluations so far.
// Every number is NaN when unknown (e.g. sim_time_s from a simulator without a virtual clock).
struct RunMetrics {
  bool has_summary = false;
  std::string config_hash;       // from summary.json
  int64_t steps = -1;
  double final_val_loss = kUnknown, best_val_loss = kUnknown;
  double final_val_accuracy = kUnknown, best_val_accuracy = kUnknown;
  double bytes_sent = kUnknown;           // all islands
  double sim_time_s = kUnknown;           // virtual clock at the end
  double compute_utilization = kUnknown;  // fraction of virtual time spent computing
  double time_to_target_s = kUnknown;     // virtual time to reach train.target_loss
  double wall_time_s = kUnknown;
  int64_t diverged_step = -1;             // the simulator stopped at a non-finite loss (-1: no)
  int64_t last_eval_step = -1;            // the step of the latest eval (-1: none or unknown)
  std::string failed;                     // summary.json says "status": "failed": its "error"
  // metrics.jsonl ends in a torn line (its writer was cut off mid-record, by an older build
  // on a full disk): what a reader says about it, e.g. "metrics.jsonl: line 12 is torn
  // (31 bytes without a newline); ignored". Every whole line before it is read.
  std::string torn;
  std::vector<EvalPoint> evals;
};

// How a run with a summary ended: "failed" (summary.json says so, with its error), "ok",
// "incomplete" (no eval at the final step: every island died before it) or "diverged", with
// the reason (the simulator stopped at a non-finite training loss, or the final validation
// loss is not finite).
std::string summary_status(const RunMetrics& m, std::string* reason);

// The metrics in table order, with their summary.csv column names.
struct MetricColumn {
  const char* name;
  double RunMetrics::*field;
};
const std::vector<MetricColumn>& metric_columns();

RunMetrics read_run_metrics(const std::string& run_dir);

// The whole file, or "" when it cannot be read (a run that has not written it yet).
std::string read_file(const std::string& path);

// A run of a plan with its state: ok | diverged | failed | interrupted (from summary.json or
// logs/<id>.json, for the run's config hash) | incomplete (started, no outcome: the sweep was
// killed) | not run.
struct RunResult {
  PlannedRun run;
  std::string status;
  std::string reason;
  RunMetrics metrics;
};

std::vector<RunResult> collect_results(const SweepPlan& plan);

// Writes summary.csv, aggregate.csv and curves.csv into plan.dir.
void write_tables(const SweepPlan& plan, const std::vector<RunResult>& results);

}  // namespace atl::sweep
