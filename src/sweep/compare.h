// `atoll compare RUN_DIR...`: chosen runs side by side in the terminal.
#pragma once

#include <string>
#include <vector>

namespace atl::sweep {

// A text table, one row per run directory (a sweep directory stands for all its runs, in
// plan order): the run's name, the config keys whose values differ among the runs (from
// each run's resolved config.yaml; run.name and run.out_dir left out), its state (ok,
// diverged, or incomplete when there is no summary.json), steps, final and best validation
// loss, final accuracy, bytes sent, simulated time, compute utilisation, time to target and
// wall time. Columns with no value in any run are left out. Throws atl::UserError when a
// directory holds neither config.yaml nor plan.csv.
std::string compare_table(const std::vector<std::string>& dirs);

}  // namespace atl::sweep
