// `atoll report SWEEP_DIR`: the sweep's tables, plots and HTML report.
#pragma once

#include <string>

namespace atl::sweep {

// Where the report is written, under the sweep directory.
inline constexpr const char* kReportHtml = "report.html";
inline constexpr const char* kPlotsDir = "plots";

// Refreshes summary.csv, aggregate.csv and curves.csv from the run directories (results.h),
// then, when `plots`, runs scripts/report.py with Debian's python3 (python3-matplotlib) to
// draw SWEEP_DIR/plots/*.png and write the self-contained SWEEP_DIR/report.html. Returns a
// one-line description of what was written. Throws atl::UserError when `sweep_dir` is not a
// sweep directory, std::runtime_error when the script fails (its own message is on stderr).
std::string write_report(const std::string& sweep_dir, bool plots = true);

}  // namespace atl::sweep
