// Minimal RFC 4180 CSV for the sweep's tables (plan.csv, summary.csv, ...): fields holding a
// comma, quote or newline are quoted, quotes doubled. Run ids contain commas, so this matters.
#pragma once

#include <string>
#include <vector>

namespace atl::sweep {

// One line, '\n'-terminated.
std::string csv_line(const std::vector<std::string>& fields);

// All rows of `text` (quoted fields may span lines; a trailing newline ends the last row).
std::vector<std::vector<std::string>> parse_csv(const std::string& text);

}  // namespace atl::sweep
