#include "src/sweep/report.h"

#include <stdexcept>

#include "src/sweep/plan.h"
#include "src/sweep/process.h"
#include "src/sweep/results.h"

namespace atl::sweep {

std::string write_report(const std::string& sweep_dir, bool plots) {
  const SweepPlan plan = read_plan(sweep_dir);
  const auto results = collect_results(plan);
  write_tables(plan, results);
  int ok = 0;
  std::string torn;  // runs whose metrics.jsonl ends in a torn line: said, not hidden
  for (const auto& r : results) {
    ok += r.status == "ok";
    if (!r.metrics.torn.empty()) torn += "\nwarning: run " + r.run.id + ": " + r.metrics.torn;
  }
  const std::string counts = std::to_string(ok) + "/" + std::to_string(results.size()) + " runs ok";
  if (!plots) return "tables " + sweep_dir + "/{summary,aggregate,curves}.csv: " + counts + torn;
  // [impl choice] Plots and HTML come from a matplotlib script: Debian packages it, and a
  // native plotting stack would cost far more code than the report is worth. /usr/bin/python3
  // is named explicitly: python3-matplotlib installs into Debian's interpreter, which a
  // python3 earlier on PATH (pyenv, venv) may not see.
  const int rc = run_and_wait({ATOLL_PYTHON, ATOLL_REPORT_SCRIPT, sweep_dir});
  if (rc != 0)
    throw std::runtime_error("the report script " + std::string(ATOLL_REPORT_SCRIPT) + " failed (exit code " +
                             std::to_string(rc) + ")");
  return "report " + sweep_dir + "/" + kReportHtml + ": " + counts + "; plots in " + sweep_dir + "/" +
         kPlotsDir + "/, tables {summary,aggregate,curves}.csv" + torn;
}

}  // namespace atl::sweep
